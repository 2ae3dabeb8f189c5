//! A batch's Kubernetes Events on its pending pods: chosen by
//! [`crate::decide::provisioning::pod_events`] against the Events published lately ([`RecentEvents`],
//! kept across runs of a warm process: [`SharedRecentEvents`]), published through
//! [`crate::ports::Cluster::publish_event`] a few at a time. Best effort: a failure is
//! logged and the batch goes on; an Event that failed is not remembered, so a later batch
//! tries it again. Dry runs publish nothing.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::{StreamExt, stream};

use super::Provisioner;
use super::report::BatchReport;
use crate::decide::provisioning::pod_events::{BatchOutcome, Nomination, RecentEvents, pod_events};
use crate::ports::{Cloud, Cluster, LaunchRecord, StateStore, Timer};
use crate::snapshot::Snapshot;

/// Event API calls in flight at once.
pub const PUBLISH_CONCURRENCY: usize = 8;

/// The rate limit's state, shared by the runs of one process (the Lambda's `App` holds it
/// across invocations).
pub type SharedRecentEvents = Arc<Mutex<RecentEvents>>;

fn lock(m: &Mutex<RecentEvents>) -> MutexGuard<'_, RecentEvents> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The pods planned onto the nodes the batch launched: each launch's record (by its id)
/// holds its pods.
fn nominations(report: &BatchReport, launches: &[LaunchRecord]) -> Vec<Nomination> {
    report
        .launched
        .iter()
        .filter_map(|l| Some((l, launches.iter().find(|r| r.id == l.launch_id)?)))
        .flat_map(|(l, record)| {
            record.pods.iter().map(|pod| Nomination {
                pod: pod.clone(),
                instance_id: l.instance_id.clone(),
                nodepool: l.nodepool.clone(),
                instance_type: l.instance_type.clone(),
                zone: l.zone.clone(),
                capacity_type: l.capacity_type,
            })
        })
        .collect()
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Publishes the batch's Events: its nominations (from `launches`, the records of its
    /// launches among others) and its unschedulable pods, as the module doc says.
    pub(super) async fn publish_events(&self, snapshot: &Snapshot, report: &BatchReport, launches: &[LaunchRecord]) {
        if self.settings.dry_run {
            return;
        }
        let nominated = nominations(report, launches);
        let outcome = BatchOutcome {
            pods: &snapshot.pods,
            nominated: &nominated,
            unschedulable: &report.unschedulable,
        };
        let now = self.ports.clock.now();
        let events = pod_events(&outcome, &lock(&self.recent_events), now);
        if events.is_empty() {
            return;
        }
        let results: Vec<_> = stream::iter(
            events
                .iter()
                .map(|e| async move { (e, self.ports.cluster.publish_event(e).await) }),
        )
        .buffer_unordered(PUBLISH_CONCURRENCY)
        .collect()
        .await;
        let mut recent = lock(&self.recent_events);
        let mut failed = 0usize;
        for (event, result) in results {
            match result {
                Ok(()) => recent.record(event, now),
                Err(e) => {
                    failed += 1;
                    tracing::warn!(pod = %event.pod.key(), reason = %event.reason,
                        error = %crate::error_chain::Chain(&e), "could not publish an event; going on");
                }
            }
        }
        recent.forget_old(now);
        tracing::debug!(published = events.len() - failed, failed, "pod events");
    }
}
