//! The durable disruption of a node: the `DISRUPT#<instance>` state machine that the
//! interruption function (an event about an instance) and the consolidator (a command)
//! both drive. A disruption advances step by step, each step idempotent, the record
//! written after each ([`advance`]): taint `carpool.sh/disrupted:NoSchedule`; launch the
//! replacement through the provisioner's path; for a rebalance recommendation, a
//! scheduled change or a consolidation, wait until it is Ready; drain by eviction
//! ([`crate::run::drain`]); terminate the instance; once it is gone, delete the Node and
//! the records. An invocation holds the record while it works (`held_by`, renewed every
//! pass); a crashed or timed-out holder's record is taken over once its hold lapses.
//!
//! - [`advance`]: the steps;
//! - [`report`]: what became of one disruption, as logged and counted.

pub mod advance;
pub mod report;

use std::time::{Duration, SystemTime};

pub use report::{EventReport, Outcome};

use crate::ports::{Cloud, CloudError, Cluster, ClusterError, DisruptionRecord, StateStore, StoreError, Timer};
use crate::run::drain::DrainError;
use crate::run::ports::Ports;
use crate::run::provision::{ProvisionError, Settings};

/// The prefix of a consolidation's `DISRUPT#` reason.
pub const REASON_PREFIX: &str = "consolidation-";

/// The prefix of a consolidation's group, in its records' `event_id`.
pub const GROUP_PREFIX: &str = "consolidation:";

/// Whether a disruption record is a consolidation's.
pub fn is_consolidation(record: &DisruptionRecord) -> bool {
    record.event_id.starts_with(GROUP_PREFIX)
}

/// The settings of the interruption function's run.
#[derive(Clone, Debug, PartialEq)]
pub struct InterruptionSettings {
    /// What the launch path needs: the deployment, the NodePool selector, the
    /// registration TTL, dry run.
    pub provision: Settings,
    /// How long after the event a drain with a hard deadline may take (90 s: the spot
    /// notice is 2 minutes, and the pods need their grace period).
    pub drain_deadline: Duration,
    /// How long an event id is remembered.
    pub event_ttl: Duration,
    /// How long an invocation holds a disruption without renewing it: past this, another
    /// invocation takes it over.
    pub hold: Duration,
    /// The first wait after a drain pass with blocked pods (doubling up to 10 s).
    pub retry_initial: Duration,
}

impl InterruptionSettings {
    /// The settings of a configuration (the provisioner's, with its drain deadline).
    pub fn from_config(config: &crate::run::config::Config) -> Self {
        InterruptionSettings {
            provision: Settings::from_config(config, config.watch),
            drain_deadline: config.drain_deadline,
            ..InterruptionSettings::default()
        }
    }
}

impl Default for InterruptionSettings {
    fn default() -> Self {
        InterruptionSettings {
            provision: Settings::default(),
            drain_deadline: Duration::from_secs(90),
            event_ttl: Duration::from_secs(24 * 3600),
            hold: Duration::from_secs(20),
            retry_initial: Duration::from_secs(1),
        }
    }
}

/// A handling that could not go on. The event is then not acknowledged, and SQS
/// delivers it again; every step is idempotent.
#[derive(Debug, thiserror::Error)]
pub enum InterruptionError {
    /// The Kubernetes API failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// EC2 failed.
    #[error(transparent)]
    Cloud(#[from] CloudError),
    /// The replacement's launch path failed outside a launch.
    #[error("launching the replacement")]
    Replace(#[source] ProvisionError),
    /// The drain failed.
    #[error(transparent)]
    Drain(#[from] DrainError),
    /// Every disruption a sweep advanced failed (each failure is logged); when only some
    /// did, the sweep reports the others and the next sweep retries these.
    #[error("the sweep could advance none of its {failed} disruptions")]
    SweepFailed {
        /// How many failed.
        failed: usize,
    },
    /// Another invocation took the disruption over (this one's hold lapsed) or finished
    /// it: this one stops working on it. [`Disrupter::handle`] reports it as
    /// [`Outcome::HeldElsewhere`], not as an error.
    #[error("disruption {instance_id} taken over by another invocation")]
    TakenOver {
        /// The record's key.
        instance_id: String,
    },
}

/// One invocation's ports and settings.
pub struct Disrupter<'a, C, K, S, T> {
    /// EC2, the Kubernetes API, DynamoDB and time.
    pub ports: Ports<'a, C, K, S, T>,
    /// Settings.
    pub settings: InterruptionSettings,
    /// Who runs (the Lambda request id): the holder of the disruptions it advances.
    pub owner: String,
    /// The invocation's one read of the cluster, shared by its records; `None`: each
    /// replacement reads the cluster itself.
    pub shared_snapshot: Option<&'a crate::run::shared_snapshot::SharedSnapshot>,
}

pub(crate) fn since_ms(from: SystemTime, to: SystemTime) -> u64 {
    to.duration_since(from)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl<'a, C: Cloud, K: Cluster, S: StateStore, T: Timer> Disrupter<'a, C, K, S, T> {
    /// An invocation by `owner`.
    pub fn new(
        cloud: &'a C,
        cluster: &'a K,
        store: &'a S,
        clock: &'a T,
        settings: InterruptionSettings,
        owner: &str,
    ) -> Self {
        Disrupter {
            ports: Ports {
                cloud,
                cluster,
                store,
                clock,
            },
            settings,
            owner: owner.to_string(),
            shared_snapshot: None,
        }
    }

    /// Plans replacements on `shared`, read once for the invocation and shared by its
    /// records ([`crate::run::shared_snapshot`]).
    #[must_use]
    pub fn with_shared_snapshot(mut self, shared: &'a crate::run::shared_snapshot::SharedSnapshot) -> Self {
        self.shared_snapshot = Some(shared);
        self
    }
}
