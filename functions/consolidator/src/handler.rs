//! One invocation: the schedule's event (its content is not read), one consolidator run
//! until the invocation's deadline less a margin, its summary line and its EMF metrics.
//! A run that fails is a retryable error: every step it took is recorded, and the next
//! run resumes.

use carpool_adapters::edge::ErrorType;
use std::time::{Duration, SystemTime};

use carpool::catalog::RegionCatalog;
use carpool::error_chain::Chain;
use carpool::ports::{Cloud, Cluster, StateStore, Timer, epoch_millis};
use carpool::run::config::Config;
use carpool::run::consolidate::{ConsolidationReport, ConsolidationSettings, Consolidator};
use carpool::run::price_refresh::LiveCatalog;
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::Value;

/// Time kept back from the function's deadline.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(20);

/// What lives across invocations of a warm function.
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
    /// The run's settings (from the configuration; tests shorten them).
    pub settings: ConsolidationSettings,
    /// The region's catalog; live prices and offerings refreshed in place.
    pub catalog: LiveCatalog<'static>,
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> App<C, K, S, T> {
    /// An app over these ports.
    pub fn new(cloud: C, cluster: K, store: S, clock: T, config: Config, region: RegionCatalog<'static>) -> Self {
        App {
            cloud,
            cluster,
            store,
            clock,
            settings: ConsolidationSettings::from_config(&config),
            catalog: LiveCatalog::new(region, config.live_prices),
            config,
        }
    }

    /// One run by `request_id`, which must end by `deadline`; prints its metrics.
    pub async fn handle(&self, request_id: &str, deadline: SystemTime) -> Result<ConsolidationReport, Diagnostic> {
        self.catalog.refresh(&self.cloud, &self.clock).await;
        let region = self.catalog.region();
        let until = deadline.checked_sub(DEADLINE_MARGIN).unwrap_or(deadline);
        let run = Consolidator::new(
            &self.cloud,
            &self.cluster,
            &self.store,
            &self.clock,
            self.settings.clone(),
            request_id,
        );
        match run.run(&region, until).await {
            Ok(report) => {
                // EMF goes to stdout as a raw line; CloudWatch turns it into metrics.
                println!(
                    "{}",
                    report.metrics(&self.config.cluster, epoch_millis(self.clock.now()))
                );
                Ok(report)
            }
            Err(e) => {
                tracing::error!(error = %Chain(&e), "consolidator run failed; the next run resumes");
                Err(ErrorType::Retryable.diagnostic(None, &e))
            }
        }
    }
}

/// One Lambda invocation.
pub async fn invoke<C: Cloud, K: Cluster, S: StateStore, T: Timer>(
    app: &App<C, K, S, T>,
    event: LambdaEvent<Value>,
) -> Result<Value, Diagnostic> {
    let context = event.context;
    let deadline = SystemTime::UNIX_EPOCH + Duration::from_millis(context.deadline);
    let report = app.handle(&context.request_id, deadline).await?;
    serde_json::to_value(report).map_err(|e| ErrorType::NonRetryable.diagnostic(Some("Response"), &e))
}
