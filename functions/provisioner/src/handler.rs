//! One invocation: refresh live prices when stale, run the provisioner for what is left of
//! the function's time, print one EMF metrics line per batch and a run summary.

use carpool_adapters::edge::ErrorType;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use carpool::catalog::RegionCatalog;
use carpool::error_chain::Chain;
use carpool::ports::{Cloud, Cluster, StateStore, Timer, epoch_millis};
use carpool::run::config::Config;
use carpool::run::price_refresh::LiveCatalog;
use carpool::run::provision::metrics::{batch_metrics, fleet_metrics, housekeeping_metrics, run_metrics};
use carpool::run::provision::report::quantile;
use carpool::run::provision::{ProvisionError, Provisioner, RunReport, Settings, SharedRecentEvents};
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::{Value, json};

/// Time kept back from the function's deadline for the last batch and the summary.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(15);

/// What lives across invocations of a warm function: the ports, the settings, the
/// region's catalog with its live prices ([`LiveCatalog`]), and the Events published
/// lately (their rate limit holds across invocations).
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
    pub config: Config,
    /// The region's catalog; live prices and offerings refreshed in place.
    pub catalog: LiveCatalog<'static>,
    /// The pod Events published lately, for their rate limit.
    pub recent_events: SharedRecentEvents,
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> App<C, K, S, T> {
    /// An app over these ports.
    pub fn new(cloud: C, cluster: K, store: S, clock: T, config: Config, region: RegionCatalog<'static>) -> Self {
        App {
            cloud,
            cluster,
            store,
            clock,
            catalog: LiveCatalog::new(region, config.live_prices),
            config,
            recent_events: SharedRecentEvents::default(),
        }
    }

    /// One invocation by `request_id`, which must end by `deadline`.
    pub async fn handle(&self, request_id: &str, deadline: SystemTime) -> Result<RunReport, ProvisionError> {
        self.catalog.refresh(&self.cloud, &self.clock).await;
        let left = deadline
            .duration_since(self.clock.now())
            .unwrap_or_default()
            .saturating_sub(DEADLINE_MARGIN);
        let settings = Settings::from_config(&self.config, left);
        let region = self.catalog.region();
        let mut provisioner = Provisioner::new(
            &self.cloud,
            &self.cluster,
            &self.store,
            &self.clock,
            settings,
            request_id,
        )
        .with_recent_events(self.recent_events.clone());
        let report = provisioner.run(&region).await?;
        let now = epoch_millis(self.clock.now());
        for batch in &report.batches {
            // EMF goes to stdout as a raw line; CloudWatch turns it into metrics.
            println!("{}", batch_metrics(&self.config.cluster, now, batch));
        }
        println!(
            "{}",
            housekeeping_metrics(&self.config.cluster, now, &report.housekeeping)
        );
        println!("{}", run_metrics(&self.config.cluster, now, &report));
        for fleet in fleet_metrics(&self.config.cluster, now, &report.fleet) {
            println!("{fleet}");
        }
        let summary = summary(&report);
        tracing::info!(summary = %summary, "run");
        Ok(report)
    }
}

/// The error a failed run returns to Lambda: its message, and whether running again may
/// succeed as its `error_type`.
pub fn diagnostic(error: &ProvisionError) -> Diagnostic {
    let kind = if error.is_retryable() {
        ErrorType::Retryable
    } else {
        ErrorType::NonRetryable
    };
    kind.diagnostic(None, error)
}

/// One Lambda invocation: the scheduled EventBridge event (any other payload, such as a
/// manual test invoke, works the same: the schedule is only the trigger), one run, and
/// its summary as the result. A failed run is an error of the invocation, so the
/// function's Errors metric and its alarm see it; its [`diagnostic`] says whether it is
/// retryable.
pub async fn invoke<C: Cloud, K: Cluster, S: StateStore, T: Timer>(
    app: &App<C, K, S, T>,
    event: LambdaEvent<Value>,
) -> Result<Value, Diagnostic> {
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
            Err(diagnostic(&e))
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
        "terminations_held_back": report.housekeeping.iter().flat_map(|h| h.held_back.clone()).collect::<Vec<_>>(),
        "would_terminate": report.housekeeping.iter().flat_map(|h| h.would_terminate.clone()).collect::<Vec<_>>(),
        "launches_lost": report.housekeeping.iter().flat_map(|h| h.lost.clone()).collect::<Vec<_>>(),
        "watched_ms": report.watched_ms,
        "apiserver_requests": report.apiserver_requests,
    })
}
