//! One invocation: refresh live prices when stale, run the provisioner for what is left of
//! the function's time, print one EMF metrics line per batch and a run summary.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use carpool::catalog::RegionCatalog;
use carpool::error_chain::Chain;
use carpool::ports::{Cloud, Cluster, StateStore, Timer, epoch_millis};
use carpool::run::provision::metrics::batch_metrics;
use carpool::run::provision::report::quantile;
use carpool::run::provision::{ProvisionError, Provisioner, ProvisionerConfig, RunReport, Settings};
use lambda_runtime::LambdaEvent;
use serde_json::{Value, json};

/// Time kept back from the function's deadline for the last batch and the summary.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(15);

/// How long live spot prices are trusted before they are read again.
pub const PRICES_TTL: Duration = Duration::from_secs(3600);

/// What lives across invocations of a warm function: the ports, the settings and the
/// region's catalog with its live prices.
pub struct App<C, K, S, T> {
    /// EC2.
    pub cloud: C,
    /// The Kubernetes API.
    pub cluster: K,
    /// DynamoDB.
    pub store: S,
    /// Time.
    pub clock: T,
    /// The configuration.
    pub config: ProvisionerConfig,
    /// The region's catalog; prices refreshed in place.
    pub region: Mutex<RegionCatalog<'static>>,
    prices_read_at: Mutex<Option<SystemTime>>,
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> App<C, K, S, T> {
    /// An app over these ports.
    pub fn new(
        cloud: C,
        cluster: K,
        store: S,
        clock: T,
        config: ProvisionerConfig,
        region: RegionCatalog<'static>,
    ) -> Self {
        App {
            cloud,
            cluster,
            store,
            clock,
            config,
            region: Mutex::new(region),
            prices_read_at: Mutex::new(None),
        }
    }

    fn region(&self) -> RegionCatalog<'static> {
        self.region
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads live prices and offerings when the last read is older than [`PRICES_TTL`]:
    /// spot prices (DescribeSpotPriceHistory), on-demand prices (the Pricing API) and the
    /// types offered per zone (DescribeInstanceTypeOfferings). Each that fails leaves the
    /// embedded data in place, with a warning.
    async fn refresh_prices(&self) {
        let now = self.clock.now();
        let stale = self
            .prices_read_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none_or(|t| now.duration_since(t).unwrap_or_default() >= PRICES_TTL);
        if !stale || !self.config.live_prices {
            return;
        }
        let types: Vec<String> = self.region().types().iter().map(|t| t.name.clone()).collect();
        let (spot, on_demand, offerings) = futures_util::join!(
            self.cloud.spot_prices(&types),
            self.cloud.on_demand_prices(&types),
            self.cloud.offerings()
        );
        let mut region = self.region.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match spot {
            Ok(prices) => {
                for p in &prices {
                    region.prices_mut().set_spot(&p.instance_type, &p.zone, p.price);
                }
                tracing::info!(spot_prices = prices.len(), "read live spot prices");
            }
            Err(e) => tracing::warn!(error = %Chain(&e), "could not read spot prices; using the embedded spot model"),
        }
        match on_demand {
            Ok(prices) => {
                for p in &prices {
                    region.prices_mut().set_on_demand(&p.instance_type, p.price);
                }
                tracing::info!(on_demand_prices = prices.len(), "read live on-demand prices");
            }
            Err(e) => tracing::warn!(error = %Chain(&e), "could not read on-demand prices; using the embedded table"),
        }
        match offerings {
            Ok(offered) if !offered.is_empty() => {
                tracing::info!(offerings = offered.len(), "read the types offered per zone");
                region.restrict_to_offered(offered.into_iter().map(|o| (o.instance_type, o.zone)));
            }
            Ok(_) => tracing::warn!("EC2 listed no offerings; using the embedded ones"),
            Err(e) => tracing::warn!(error = %Chain(&e), "could not read offerings; using the embedded ones"),
        }
        *self
            .prices_read_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(now);
    }

    /// One invocation by `request_id`, which must end by `deadline`.
    pub async fn handle(&self, request_id: &str, deadline: SystemTime) -> Result<RunReport, ProvisionError> {
        self.refresh_prices().await;
        let left = deadline
            .duration_since(self.clock.now())
            .unwrap_or_default()
            .saturating_sub(DEADLINE_MARGIN);
        let settings = Settings::from_config(&self.config, left);
        let region = self.region();
        let mut provisioner = Provisioner::new(
            &self.cloud,
            &self.cluster,
            &self.store,
            &self.clock,
            settings,
            request_id,
        );
        let report = provisioner.run(&region).await?;
        let now = epoch_millis(self.clock.now());
        for batch in &report.batches {
            // EMF goes to stdout as a raw line; CloudWatch turns it into metrics.
            println!("{}", batch_metrics(&self.config.cluster, now, batch));
        }
        let summary = summary(&report);
        tracing::info!(summary = %summary, "run");
        Ok(report)
    }
}

/// One Lambda invocation: the scheduled EventBridge event (any other payload, such as a
/// manual test invoke, works the same: the schedule is only the trigger), one run, and
/// its summary as the result. A failed run is an error of the invocation, so the
/// function's Errors metric and its alarm see it.
pub async fn invoke<C: Cloud, K: Cluster, S: StateStore, T: Timer>(
    app: &App<C, K, S, T>,
    event: LambdaEvent<Value>,
) -> Result<Value, lambda_runtime::Error> {
    let (payload, context) = event.into_parts();
    match serde_json::from_value::<EventBridgeEvent<Value>>(payload) {
        Ok(e) => tracing::info!(event_id = ?e.id, time = ?e.time, "scheduled run"),
        Err(_) => tracing::info!("run invoked without a schedule event"),
    }
    let deadline = SystemTime::UNIX_EPOCH + Duration::from_millis(context.deadline);
    match app.handle(&context.request_id, deadline).await {
        Ok(report) => Ok(summary(&report)),
        Err(e) => {
            tracing::error!(error = %Chain(&e), retryable = e.is_retryable(), "run failed");
            // The message is the whole chain: the errors keep their causes as sources.
            Err(Chain(&e).to_string().into())
        }
    }
}

/// The run's summary: the most pods seen pending at once, what it launched, what it
/// could not place (as of the last batch), and the pending → CreateFleet latency.
pub fn summary(report: &RunReport) -> Value {
    let latencies: Vec<u64> = report
        .batches
        .iter()
        .flat_map(|b| b.pending_to_fleet_ms.iter().copied())
        .collect();
    json!({
        "lease_held_by": report.lease_held_by,
        "batches": report.batches.len(),
        "pods_seen": report.batches.iter().map(|b| b.pods_seen).max().unwrap_or(0),
        "nodes_launched": report.launched().count(),
        "launched": report.launched().collect::<Vec<_>>(),
        "unschedulable": report.batches.last().map(|b| b.unschedulable.clone()).unwrap_or_default(),
        "launch_errors": report.batches.iter().map(|b| b.launch_errors.len()).sum::<usize>(),
        "cost_per_hour_added": report.batches.iter().map(|b| b.cost_per_hour_added).sum::<f64>(),
        "pending_to_fleet_p50_ms": quantile(&latencies, 0.5),
        "pending_to_fleet_p99_ms": quantile(&latencies, 0.99),
        "terminated": report.housekeeping.iter().flat_map(|h| h.terminated.clone()).collect::<Vec<_>>(),
        "watched_ms": report.watched_ms,
    })
}
