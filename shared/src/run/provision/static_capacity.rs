//! Keeps the static NodePools' nodes (`spec.replicas`), once per run: what
//! [`crate::decide::provisioning::static_capacity`] says is missing is launched, the nodes
//! and launches in flight counted, as Karpenter's `static.provisioning` controller does. A
//! cluster with no static NodePool costs one list of NodePools. A node that goes (an
//! interruption, a deletion, a scale-up of `replicas`) is replaced by the next run.

use super::report::StaticReport;
use super::{ProvisionError, Provisioner};
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::static_capacity::plan;
use crate::error_chain::Chain;
use crate::ports::{Cloud, Cluster, StateStore, Timer};

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Launches the nodes the static NodePools are missing.
    pub(crate) async fn keep_static_capacity(&self, base: &RegionCatalog<'_>) -> Result<StaticReport, ProvisionError> {
        let mut report = StaticReport::default();
        let pools = self.ports.cluster.nodepools().await?;
        if !pools.valid.iter().any(|p| p.replicas().is_some()) {
            return Ok(report);
        }
        let now = self.ports.clock.now();
        let Some((snapshot, region)) = self.room_view(base, |p| p.replicas().is_some(), now).await? else {
            return Ok(report);
        };
        let planned = plan(&snapshot, &region);
        report.short = planned.short;
        report.unplanned = planned.unplanned;
        for (pool, have, want) in &report.short {
            tracing::info!(nodepool = %pool, have, want, "static NodePool short of nodes: launching the rest");
        }
        for (pool, why) in &report.unplanned {
            tracing::warn!(nodepool = %pool, reason = %why, "static NodePool: a missing node cannot be planned");
        }
        (report.launched, report.failed) = self
            .launch_room(&planned.nodes, &snapshot, &region, now, "static NodePool")
            .await?;
        Ok(report)
    }
}

/// Logs a failed round of a step that keeps room and goes on: the next run keeps it.
pub(crate) fn log_failure(what: &str, e: &ProvisionError) {
    tracing::warn!(error = %Chain(e), "{what} not kept this run; the next run tries again");
}
