//! Releasing launch waves: the nodes [`crate::decide::wave::releases`] names lose the
//! wave taint, all at once: one conditional write per node, as listed, all concurrent,
//! so that kube-scheduler sees the wave's capacity within a few milliseconds and binds
//! as few pods as can be to the first nodes released before it sees the rest.
//!
//! Every housekeeping round releases what is due, whoever launched it, so a wave whose
//! run crashed is released by the next run. While a run has waves of its own not yet
//! settled, its watch loop also releases at every poll, and the run goes on after its
//! watch, up to [`super::Settings::release_limit`], until they are.

use futures_util::future::join_all;
use k8s_openapi::api::core::v1::Node;

use super::Provisioner;
use super::report::RunReport;
use crate::decide::wave::{Untaint, releases, settled, wave_taint};
use crate::error_chain::Chain;
use crate::ports::{Cloud, Cluster, ClusterError, EpochMillis, LaunchRecord, StateStore, Timer, epoch_millis};

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Removes the wave taint from the nodes due, given the listed `nodes` and
    /// `launches`; returns those released and the errors met. A node gone meanwhile is
    /// no error.
    pub(crate) async fn release(
        &self,
        nodes: &[Node],
        launches: &[LaunchRecord],
        now: EpochMillis,
    ) -> (Vec<Untaint>, Vec<String>) {
        let due = releases(nodes, launches, now, self.settings.wave_grace);
        if due.is_empty() {
            return (due, Vec::new());
        }
        let calls = due.iter().map(|u| async move {
            let listed = nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(u.node.as_str()));
            let outcome = match listed {
                Some(n) => self.cluster.untaint_listed(n, &wave_taint(&u.wave)).await,
                None => self.cluster.untaint(&u.node, &wave_taint(&u.wave)).await,
            };
            match outcome {
                Ok(()) | Err(ClusterError::NotFound { .. }) => Ok(()),
                Err(e) => Err(format!("releasing node {} of wave {}: {}", u.node, u.wave, Chain(&e))),
            }
        });
        let outcomes = join_all(calls).await;
        let mut released = Vec::new();
        let mut errors = Vec::new();
        for (u, outcome) in due.into_iter().zip(outcomes) {
            match outcome {
                Ok(()) => {
                    tracing::info!(node = %u.node, wave = %u.wave, why = ?u.why, "released from its launch wave");
                    released.push(u);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "wave release");
                    errors.push(e);
                }
            }
        }
        (released, errors)
    }

    /// Lists the nodes and launches, releases what is due, and forgets this run's waves
    /// that are settled. Errors are logged and retried at the next poll.
    pub(crate) async fn release_waves(&mut self, report: &mut RunReport) {
        let listed = async {
            let waves: Vec<String> = self.waves.iter().cloned().collect();
            let nodes = self
                .cluster
                .nodes_of_waves(&waves)
                .await
                .map_err(|e| Chain(&e).to_string())?;
            let launches = self.store.list_launches().await.map_err(|e| Chain(&e).to_string())?;
            Ok::<_, String>((nodes, launches))
        };
        let (nodes, launches) = match listed.await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!(error = %e, "wave release: could not list nodes and launches");
                return;
            }
        };
        let now = epoch_millis(self.clock.now());
        let (released, errors) = self.release(&nodes, &launches, now).await;
        if errors.is_empty() {
            let mut nodes = nodes;
            for u in &released {
                if let Some(n) = nodes
                    .iter_mut()
                    .find(|n| n.metadata.name.as_deref() == Some(u.node.as_str()))
                    && let Some(taints) = n.spec.as_mut().and_then(|s| s.taints.as_mut())
                {
                    taints.retain(|t| t.key != crate::decide::wave::WAVE_TAINT);
                }
            }
            let at = self.clock.now();
            let done: Vec<String> = self
                .waves
                .iter()
                .filter(|w| settled(w, &nodes, &launches, now))
                .cloned()
                .collect();
            for w in done {
                self.waves.remove(&w);
                self.released_at.insert(w, at);
            }
        }
        report.released.extend(released);
    }
}
