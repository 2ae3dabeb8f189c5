//! Keeps the CapacityBuffers' room, once per run: their chunks
//! ([`crate::decide::provisioning::buffers`]) are planned as pending pods on the dynamic
//! NodePools, after the nodes and launches in flight, and what they need new is launched
//! (Karpenter's provisioner injects the same virtual pods into its pending pods). The real
//! pending pods are the batches': a real pod that takes a chunk's room leaves the chunk
//! without it, and the next run plans it again. A cluster with no buffer costs one list.

use super::report::BufferReport;
use super::{ProvisionError, Provisioner};
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::buffers::is_virtual;
use crate::decide::provisioning::pod::is_provisionable;
use crate::decide::provisioning_plan;
use crate::ports::{Cloud, Cluster, StateStore, Timer};

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Launches the room the CapacityBuffers need and do not have.
    pub(crate) async fn keep_buffers(&self, base: &RegionCatalog<'_>) -> Result<BufferReport, ProvisionError> {
        let now = self.ports.clock.now();
        let chunks = crate::run::observe::buffer_pods(self.ports.cluster, now).await?;
        let mut report = BufferReport {
            sizes: chunks.sizes,
            skipped: chunks.skipped,
            ..BufferReport::default()
        };
        for (buffer, why) in &report.skipped {
            tracing::warn!(buffer = %buffer, reason = %why, "CapacityBuffer skipped");
        }
        if chunks.pods.is_empty() {
            return Ok(report);
        }
        let Some((mut snapshot, region)) = self.room_view(base, |p| p.replicas().is_none(), now).await? else {
            return Ok(report);
        };
        snapshot.pods.retain(|p| !is_provisionable(p));
        snapshot.pods.extend(chunks.pods);
        let mut plan = provisioning_plan(&snapshot, &region);
        report.chunks_planned_new = plan.nodes.iter().map(|n| n.pods.len()).sum();
        report.unplaced = plan
            .unschedulable
            .iter()
            .filter(|u| {
                snapshot
                    .pods
                    .iter()
                    .any(|p| is_virtual(p) && crate::decide::provisioning::pod::pod_key(p) == u.pod)
            })
            .map(|u| (u.pod.clone(), u.reason()))
            .collect();
        for (chunk, why) in &report.unplaced {
            tracing::warn!(chunk = %chunk, reason = %why, "CapacityBuffer chunk without room (a NodePool's limits win over the buffer)");
        }
        for n in &mut plan.nodes {
            n.pods.clear();
        }
        (report.launched, report.failed) = self
            .launch_room(&plan.nodes, &snapshot, &region, now, "CapacityBuffer")
            .await?;
        Ok(report)
    }
}
