//! Releasing launch waves: a wave this run holds is first handed to its pending pods,
//! the biggest first (each gets the wave's toleration, tier by tier,
//! [`crate::decide::waves::wave::hand_off`]), then the nodes
//! [`crate::decide::waves::wave::releases`] names lose the wave taint, all at once: one
//! conditional write per node, as listed, all concurrent.
//!
//! A wave's nodes register [`HELD`] (the launch template carries nothing of the batch);
//! each poll first names its wave on each of them ([`joins`]), before any hand-off.
//!
//! Every housekeeping round releases what is due, whoever launched it, so a wave whose
//! run crashed is released by the next run. While a run has waves of its own not yet
//! settled, its watch loop also releases at every poll, and the run goes on after its
//! watch, up to [`super::Settings::release_limit`], until they are.

use futures_util::future::join_all;
use k8s_openapi::api::core::v1::Node;

use super::Provisioner;
use super::report::RunReport;
use crate::decide::provisioning::pod::pod_key;
use crate::decide::waves::wave::{
    HELD, Handed, Handing, Join, Release, Untaint, Waiting, hand_off, joins, releases, settled, wave_taint,
    wave_toleration,
};
use crate::error_chain::Chain;
use crate::model::pod::Pod;
use crate::model::well_known::{WAVE_LABEL, WAVE_TAINT};
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
        self.untaint_all(nodes, due).await
    }

    /// Removes the wave taint from the nodes of `due`, all concurrent.
    async fn untaint_all(&self, nodes: &[Node], due: Vec<Untaint>) -> (Vec<Untaint>, Vec<String>) {
        if due.is_empty() {
            return (due, Vec::new());
        }
        let calls = due.iter().map(|u| async move {
            let listed = nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(u.node.as_str()));
            let outcome = match listed {
                Some(n) => self.ports.cluster.untaint_listed(n, &wave_taint(&u.wave)).await,
                None => self.ports.cluster.untaint(&u.node, &wave_taint(&u.wave)).await,
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

    /// Names its wave on each node of `nodes` still [`HELD`] whose launch record names one
    /// ([`joins`]): the wave taint's value, then the wave label, all concurrent; `nodes`
    /// is updated as written. A node whose write fails stays held, and is released with
    /// its wave (or retried at the next poll).
    async fn join_waves(&self, nodes: &mut [Node], launches: &[LaunchRecord]) {
        let due = joins(nodes, launches);
        if due.is_empty() {
            return;
        }
        let calls = due.iter().map(|j| async move {
            self.ports.cluster.taint(&j.node, &wave_taint(&j.wave)).await?;
            let label = [(WAVE_LABEL.to_string(), Some(j.wave.clone()))].into();
            self.ports
                .cluster
                .patch_labels_annotations(&j.node, &label, &Default::default())
                .await
        });
        let outcomes = join_all(calls).await;
        for (Join { node, wave }, outcome) in due.into_iter().zip(outcomes) {
            match outcome {
                Ok(()) => {
                    tracing::debug!(node = %node, wave = %wave, "joined its launch wave");
                    if let Some(n) = nodes
                        .iter_mut()
                        .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
                    {
                        let taints = n.spec.get_or_insert_default().taints.get_or_insert_default();
                        for t in taints.iter_mut().filter(|t| t.key == WAVE_TAINT) {
                            t.value = Some(wave.clone());
                        }
                        n.metadata
                            .labels
                            .get_or_insert_default()
                            .insert(WAVE_LABEL.into(), wave);
                    }
                }
                Err(e) => tracing::warn!(node = %node, wave = %wave, error = %Chain(&e), "naming a node's launch wave"),
            }
        }
    }

    /// Lists the nodes and launches, releases what is due, and forgets this run's waves
    /// that are settled. `polled`: the pending pods as the watch just listed them, read
    /// instead of listing them again. Errors are logged and retried at the next poll.
    pub(crate) async fn release_waves(&mut self, report: &mut RunReport, polled: Option<&[Pod]>) {
        let listed = async {
            // The run's waves, and the nodes still held whose wave is not named yet.
            let waves: Vec<String> = self.waves.iter().cloned().chain([HELD.to_string()]).collect();
            let nodes = self
                .ports
                .cluster
                .nodes_of_waves(&waves)
                .await
                .map_err(|e| Chain(&e).to_string())?;
            let launches = self
                .ports
                .store
                .list_launches()
                .await
                .map_err(|e| Chain(&e).to_string())?;
            Ok::<_, String>((nodes, launches))
        };
        let (nodes, launches) = match listed.await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!(error = %e, "wave release: could not list nodes and launches");
                return;
            }
        };
        let mut nodes = nodes;
        self.join_waves(&mut nodes, &launches).await;
        let now = epoch_millis(self.ports.clock.now());
        let due = releases(&nodes, &launches, now, self.settings.wave_grace);
        // The pending pods, counted by the wave they were planned into, when a wave of
        // this run is due for being Ready (to hand it, or to see its pods placed).
        let ready_own = due
            .iter()
            .any(|u| self.waves.contains(&u.wave) && matches!(u.why, Release::AllReady | Release::Grace { .. }));
        let listed_now: Vec<Pod>;
        let pending: &[Pod] = match polled {
            _ if !ready_own => &[],
            Some(pods) => pods,
            None => match self.ports.cluster.pending_pods().await {
                Ok(pods) => {
                    listed_now = pods;
                    &listed_now
                }
                Err(e) => {
                    tracing::warn!(error = %Chain(&e), "wave release: could not list pending pods");
                    return;
                }
            },
        };
        let mut waiting = Waiting::new();
        for p in pending {
            let key = pod_key(p);
            if let Some(w) = self.wave_pods.get(&key) {
                let tier = self.hand_tiers.get(&key).copied().unwrap_or(0);
                *waiting.entry(w.clone()).or_default().entry(tier).or_default() += 1;
            }
        }
        let step = hand_off(due, &self.waves, &self.handed, &waiting, now);
        for (wave, tier) in step.hand {
            let pods = self.hand(&wave, tier, pending).await;
            tracing::info!(wave = %wave, tier, pods, "launch wave handed to its pending pods");
            report.handed.push(Handed {
                wave: wave.clone(),
                tier,
                pods,
                at: now,
            });
            self.handed.insert(wave, Handing { tier, at: now });
        }
        // A wave of this run released with pods still pending (the hold ran out): the watch
        // stays open until they may be planned again, and a poll more.
        if step
            .untaint
            .iter()
            .any(|u| self.waves.contains(&u.wave) && waiting.get(&u.wave).is_some_and(|t| t.values().any(|n| *n > 0)))
        {
            let until = self.ports.clock.now() + self.settings.batch_max + self.settings.poll * 2;
            self.recheck_until = Some(self.recheck_until.map_or(until, |r| r.max(until)));
        }
        let (released, errors) = self.untaint_all(&nodes, step.untaint).await;
        if errors.is_empty() {
            for u in &released {
                if let Some(n) = nodes
                    .iter_mut()
                    .find(|n| n.metadata.name.as_deref() == Some(u.node.as_str()))
                    && let Some(taints) = n.spec.as_mut().and_then(|s| s.taints.as_mut())
                {
                    taints.retain(|t| t.key != WAVE_TAINT);
                }
            }
            let at = self.ports.clock.now();
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

    /// Adds `wave`'s toleration to each of the `pending` pods this run planned into it in
    /// `tier`, all concurrent; returns how many took it. A pod that refuses it, or is
    /// gone, waits for the taint to come off like any other.
    async fn hand(&self, wave: &str, tier: usize, pending: &[Pod]) -> usize {
        let toleration = wave_toleration(wave);
        let calls = pending
            .iter()
            .filter(|p| {
                let key = pod_key(p);
                self.wave_pods.get(&key).is_some_and(|w| w == wave)
                    && self.hand_tiers.get(&key).copied().unwrap_or(0) == tier
            })
            .map(|p| {
                let toleration = &toleration;
                async move {
                    let outcome = self.ports.cluster.tolerate(p, toleration).await;
                    if let Err(e) = &outcome {
                        tracing::warn!(pod = %pod_key(p), wave = %wave, error = %Chain(e), "handing a wave to a pod");
                    }
                    outcome.is_ok()
                }
            });
        join_all(calls).await.into_iter().filter(|ok| *ok).count()
    }
}
