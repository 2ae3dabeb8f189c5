//! One invocation: an SQS batch of EventBridge events (`ReportBatchItemFailures`), or one
//! event invoked directly by EventBridge (the schedule's sweep, or a rule without the
//! queue). Each event is read ([`carpool::decide::interruption`]) and handled
//! ([`carpool::run::interruption`]); one EMF metrics line per handled instance.
//!
//! In a batch, the records are handled concurrently (a spot reclaim of many nodes at once
//! must not drain them one after the other), and one record's failure is that record's:
//! - a message that cannot be read is logged with its message id and the reason, and
//!   reported as a batch item failure, so that after the queue's `maxReceiveCount` it
//!   ends in the DLQ; the rest of the batch goes on;
//! - an event Carpool does not handle, or about an instance it does not own, is
//!   acknowledged (logged);
//! - a handling that fails (an API error) is tried again within the invocation
//!   ([`RETRIES`], while its time allows), then reported as a failure, and SQS delivers the
//!   message again: every step is idempotent.

use carpool_adapters::edge::ErrorType;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse};
use carpool::catalog::RegionCatalog;
use carpool::decide::interruption::{EventError, InputRecord, InterruptionEvent, parse_event, parse_input};
use carpool::error_chain::Chain;
use carpool::ports::{Cloud, Cluster, StateStore, Timer, epoch_millis};
use carpool::run::config::Config;
use carpool::run::disruption::{Disrupter, EventReport, InterruptionError, InterruptionSettings};
use carpool::run::interruption::metrics::event_metrics;
use carpool::run::price_refresh::LiveCatalog;
use carpool::run::shared_snapshot::SharedSnapshot;
use futures_util::future::join_all;
use lambda_runtime::{Diagnostic, LambdaEvent};
use serde_json::{Value, json};

/// Time kept back from the function's deadline for the records' answers.
pub const DEADLINE_MARGIN: Duration = Duration::from_secs(15);

/// A handling that fails is tried again within the invocation, after 1 s, 2 s and 4 s,
/// while the invocation's time allows: a message handed back to SQS is delivered again
/// only after the queue's visibility timeout, long past a spot warning's 2 minutes.
/// Every step of a handling is idempotent, so a retry redoes nothing twice.
pub const RETRIES: u32 = 3;
/// The wait before the first retry; it doubles.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);

/// What lives across invocations of a warm function: the ports, the configuration and
/// the region's catalog with its live prices.
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
    /// The settings of a handling (from the configuration; tests shorten them).
    pub settings: InterruptionSettings,
    /// The region's catalog; live prices and offerings refreshed in place.
    pub catalog: LiveCatalog<'static>,
}

/// What became of one record of a batch.
#[derive(Debug)]
pub enum RecordOutcome {
    /// Handled (or acknowledged): its reports.
    Handled(Vec<EventReport>),
    /// It cannot be read: the reason. A batch item failure, bound for the DLQ.
    Unreadable(String),
    /// Its handling failed: the error. A batch item failure, delivered again.
    Failed(InterruptionError),
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> App<C, K, S, T> {
    /// An app over these ports.
    pub fn new(cloud: C, cluster: K, store: S, clock: T, config: Config, region: RegionCatalog<'static>) -> Self {
        App {
            cloud,
            cluster,
            store,
            clock,
            settings: InterruptionSettings::from_config(&config),
            catalog: LiveCatalog::new(region, config.live_prices),
            config,
        }
    }

    /// Handles one event as `owner`, until `until`, on the invocation's `shared` read of
    /// the cluster, printing its metrics.
    pub async fn handle_event(
        &self,
        owner: &str,
        event: &InterruptionEvent,
        until: SystemTime,
        shared: &SharedSnapshot,
    ) -> Result<Vec<EventReport>, InterruptionError> {
        let region = self.catalog.region();
        let interrupter = Disrupter::new(
            &self.cloud,
            &self.cluster,
            &self.store,
            &self.clock,
            self.settings.clone(),
            owner,
        )
        .with_shared_snapshot(shared);
        let reports = interrupter.handle(&region, event, until).await?;
        let now = epoch_millis(self.clock.now());
        for r in &reports {
            if let Some(m) = event_metrics(&self.config.cluster, now, r) {
                // EMF goes to stdout as a raw line; CloudWatch turns it into metrics.
                println!("{m}");
            }
        }
        Ok(reports)
    }

    async fn record(
        &self,
        request_id: &str,
        record: InputRecord,
        until: SystemTime,
        shared: &SharedSnapshot,
    ) -> (Option<String>, RecordOutcome) {
        let message_id = record.message_id;
        let outcome = match record.event {
            Err(e) => {
                let reason = e.to_string();
                tracing::error!(message_id = message_id.as_deref().unwrap_or(""), reason = %reason,
                    "unreadable message: reported as a batch item failure, bound for the DLQ");
                RecordOutcome::Unreadable(reason)
            }
            Ok(event) => {
                let owner = format!("{request_id}/{}", message_id.as_deref().unwrap_or(&event.id));
                let mut wait = FIRST_RETRY;
                let mut attempt = 0;
                loop {
                    match self.handle_event(&owner, &event, until, shared).await {
                        Ok(reports) => break RecordOutcome::Handled(reports),
                        Err(e) if attempt < RETRIES && self.clock.now() + wait < until => {
                            attempt += 1;
                            tracing::warn!(message_id = message_id.as_deref().unwrap_or(""), event_id = %event.id,
                                error = %Chain(&e), attempt, wait_ms = wait.as_millis() as u64,
                                "handling failed: tried again within the invocation");
                            self.clock.sleep(wait).await;
                            wait *= 2;
                        }
                        Err(e) => {
                            tracing::error!(message_id = message_id.as_deref().unwrap_or(""), event_id = %event.id,
                                error = %Chain(&e), attempts = attempt + 1,
                                "handling failed: reported as a batch item failure, to be delivered again");
                            break RecordOutcome::Failed(e);
                        }
                    }
                }
            }
        };
        (message_id, outcome)
    }

    /// One SQS batch by `request_id`, which must end by `deadline`: the answer for Lambda
    /// (the records to deliver again), and what became of each record, by message id.
    /// A payload that is not an SQS batch at all (its `Records` not a list) is an error:
    /// it names no message to fail.
    pub async fn handle_batch(
        &self,
        request_id: &str,
        deadline: SystemTime,
        payload: &Value,
    ) -> Result<(SqsBatchResponse, Vec<(Option<String>, RecordOutcome)>), EventError> {
        self.catalog.refresh(&self.cloud, &self.clock).await;
        let until = deadline.checked_sub(DEADLINE_MARGIN).unwrap_or(deadline);
        let records = parse_input(payload).inspect_err(|e| tracing::error!(reason = %e, "unreadable SQS batch"))?;
        // One read of the cluster for the whole batch, on first need; its spot warnings
        // replaced together.
        let shared = SharedSnapshot::new().with_burst(carpool::decide::interruption::spot_warnings(&records));
        let outcomes = join_all(records.into_iter().map(|r| self.record(request_id, r, until, &shared))).await;
        let failures: Vec<BatchItemFailure> = outcomes
            .iter()
            .filter(|(_, o)| !matches!(o, RecordOutcome::Handled(_)))
            .filter_map(|(id, _)| id.clone())
            .map(|item_identifier| BatchItemFailure { item_identifier })
            .collect();
        let response = SqsBatchResponse {
            batch_item_failures: failures,
        };
        Ok((response, outcomes))
    }

    /// One invocation's payload by `request_id`, which must end by `deadline`: an SQS
    /// batch answers a [`SqsBatchResponse`]; a bare event answers its reports.
    pub async fn handle(&self, request_id: &str, deadline: SystemTime, payload: &Value) -> Result<Value, Diagnostic> {
        if payload.get("Records").is_some() {
            let (response, _) = self
                .handle_batch(request_id, deadline, payload)
                .await
                .map_err(|e| non_retryable("UnreadableBatch", &e))?;
            return serde_json::to_value(response).map_err(|e| non_retryable("Response", &e));
        }
        self.catalog.refresh(&self.cloud, &self.clock).await;
        let until = deadline.checked_sub(DEADLINE_MARGIN).unwrap_or(deadline);
        let event = parse_event(payload).map_err(|e| {
            tracing::error!(reason = %e, "unreadable event");
            non_retryable("UnreadableEvent", &e)
        })?;
        match self
            .handle_event(request_id, &event, until, &SharedSnapshot::new())
            .await
        {
            Ok(reports) => Ok(json!({ "reports": reports })),
            Err(e) => {
                tracing::error!(event_id = %event.id, error = %Chain(&e), "handling failed");
                Err(ErrorType::Retryable.diagnostic(None, &e))
            }
        }
    }
}

fn non_retryable(what: &str, e: &(dyn std::error::Error + 'static)) -> Diagnostic {
    ErrorType::NonRetryable.diagnostic(Some(what), e)
}

/// One Lambda invocation.
pub async fn invoke<C: Cloud, K: Cluster, S: StateStore, T: Timer>(
    app: &App<C, K, S, T>,
    event: LambdaEvent<Value>,
) -> Result<Value, Diagnostic> {
    let (payload, context) = event.into_parts();
    let deadline = SystemTime::UNIX_EPOCH + Duration::from_millis(context.deadline);
    app.handle(&context.request_id, deadline, &payload).await
}
