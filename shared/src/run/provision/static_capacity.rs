//! Keeps the static NodePools' nodes (`spec.replicas`), once per run: what
//! [`crate::decide::provisioning::static_capacity`] says is missing is launched, the nodes
//! and launches in flight counted, as Karpenter's `static.provisioning` controller does. A
//! cluster with no static NodePool costs one list of NodePools. A node that goes (an
//! interruption, a deletion, a scale-up of `replicas`) is replaced by the next run.

use std::collections::BTreeMap;

use super::report::StaticReport;
use super::{ProvisionError, Provisioner};
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::batch_plan::prepare_pools;
use crate::decide::provisioning::in_flight::capacity_view;
use crate::decide::provisioning::static_capacity::plan;
use crate::error_chain::Chain;
use crate::ports::{Cloud, Cluster, StateStore, Timer, epoch_millis};
use crate::run::launch::LaunchOutcome;

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Launches the nodes the static NodePools are missing.
    pub(crate) async fn keep_static_capacity(&self, base: &RegionCatalog<'_>) -> Result<StaticReport, ProvisionError> {
        let mut report = StaticReport::default();
        let pools = self.ports.cluster.nodepools().await?;
        if !pools.valid.iter().any(|p| p.replicas().is_some()) {
            return Ok(report);
        }
        let mut snapshot = crate::run::observe::read_snapshot(self.ports.cluster).await?;
        prepare_pools(&mut snapshot, &self.settings.nodepool_selector);
        snapshot.nodepools.retain(|p| p.replicas().is_some());
        if snapshot.nodepools.is_empty() {
            return Ok(report);
        }
        // A class that cannot be resolved takes its NodePools out, as for any launch.
        let _ = self.narrow_pools(&mut snapshot, base).await;
        let mut region = base.clone();
        region.apply_overlays(&snapshot.nodeoverlays);
        let now = self.ports.clock.now();
        for o in self
            .ports
            .store
            .unavailable_offerings(now)
            .await?
            .into_iter()
            .filter(|o| !o.reclaimed)
        {
            region.mark_unavailable(&o.instance_type, &o.zone, o.capacity_type);
        }
        let launches = self.ports.store.list_launches().await?;
        let ttl_ms = i64::try_from(self.settings.registration_ttl.as_millis()).unwrap_or(i64::MAX);
        snapshot.nodes = capacity_view(&snapshot, &launches, &region, epoch_millis(now), ttl_ms);
        let planned = plan(&snapshot, &region);
        report.short = planned.short;
        report.unplanned = planned.unplanned;
        for (pool, have, want) in &report.short {
            tracing::info!(nodepool = %pool, have, want, "static NodePool short of nodes: launching the rest");
        }
        for (pool, why) in &report.unplanned {
            tracing::warn!(nodepool = %pool, reason = %why, "static NodePool: a missing node cannot be planned");
        }
        if planned.nodes.is_empty() {
            return Ok(report);
        }
        if self.settings.dry_run {
            self.log_dry_run(&planned.nodes);
            return Ok(report);
        }
        let outcomes = self
            .launch_all(&planned.nodes, &snapshot, &region, now, &BTreeMap::new(), None, None)
            .await;
        for outcome in outcomes {
            match outcome? {
                LaunchOutcome::Launched(launched) => report.launched.push(launched.0),
                LaunchOutcome::OutOfCapacity(offerings, failure) => {
                    for o in offerings {
                        self.ports.store.mark_unavailable(&o).await?;
                    }
                    report.failed.push(failure);
                }
                LaunchOutcome::Failed(failure) => report.failed.push(failure),
                LaunchOutcome::Unknown(unknown) => report.failed.push(unknown.0),
            }
        }
        for f in &report.failed {
            tracing::warn!(nodepool = %f.nodepool, instance_type = %f.instance_type, zone = %f.zone,
                error = %f.error, "static NodePool: a launch failed; the next run tries again");
        }
        Ok(report)
    }
}

/// Logs a failed static round and goes on: static capacity is kept again by the next run.
pub(crate) fn log_failure(e: &ProvisionError) {
    tracing::warn!(error = %Chain(e), "static NodePools not kept this run; the next run tries again");
}
