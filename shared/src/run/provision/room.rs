//! What the steps that keep room ahead of pods share (static NodePools,
//! [`super::static_capacity`]; CapacityBuffers, [`super::buffers`]): the cluster as a batch
//! sees it (the NodePools the deployment manages, narrowed to their classes' zones and
//! AMIs, the launches in flight as nodes, the prices the user pays, offerings out of
//! capacity left out), and the launch of planned nodes that carry no real pod.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::report::{LaunchFailure, Launched};
use super::{ProvisionError, Provisioner};
use crate::catalog::RegionCatalog;
use crate::decide::PlannedNode;
use crate::decide::provisioning::batch_plan::prepare_pools;
use crate::decide::provisioning::in_flight::capacity_view;
use crate::model::NodePool;
use crate::ports::{Cloud, Cluster, StateStore, Timer, epoch_millis};
use crate::run::launch::LaunchOutcome;
use crate::snapshot::Snapshot;

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// The cluster with the NodePools `keep` keeps, and the region priced for it; `None`
    /// when no NodePool is left.
    pub(crate) async fn room_view<'r>(
        &self,
        base: &RegionCatalog<'r>,
        keep: impl Fn(&NodePool) -> bool,
        now: SystemTime,
    ) -> Result<Option<(Snapshot, RegionCatalog<'r>)>, ProvisionError> {
        let mut snapshot = crate::run::observe::read_snapshot(self.ports.cluster).await?;
        prepare_pools(&mut snapshot, &self.settings.nodepool_selector);
        snapshot.nodepools.retain(|p| keep(p));
        if snapshot.nodepools.is_empty() {
            return Ok(None);
        }
        // A class that cannot be resolved takes its NodePools out, as for any launch.
        let _ = self.narrow_pools(&mut snapshot, base).await;
        let mut region = base.clone();
        region.apply_overlays(&snapshot.nodeoverlays);
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
        Ok(Some((snapshot, region)))
    }

    /// Launches `nodes` (planned with no real pod) at `now`; what launched and what failed.
    /// A capacity error marks the offerings unavailable, for the next run to plan around.
    pub(crate) async fn launch_room(
        &self,
        nodes: &[PlannedNode],
        snapshot: &Snapshot,
        region: &RegionCatalog<'_>,
        now: SystemTime,
        what: &str,
    ) -> Result<(Vec<Launched>, Vec<LaunchFailure>), ProvisionError> {
        let (mut launched, mut failed) = (Vec::new(), Vec::new());
        if nodes.is_empty() {
            return Ok((launched, failed));
        }
        if self.settings.dry_run {
            self.log_dry_run(nodes);
            return Ok((launched, failed));
        }
        let outcomes = self
            .launch_all(nodes, snapshot, region, now, &BTreeMap::new(), None, None)
            .await;
        for outcome in outcomes {
            match outcome? {
                LaunchOutcome::Launched(l) => launched.push(l.0),
                LaunchOutcome::OutOfCapacity(offerings, failure) => {
                    for o in offerings {
                        self.ports.store.mark_unavailable(&o).await?;
                    }
                    failed.push(failure);
                }
                LaunchOutcome::Failed(failure) => failed.push(failure),
                LaunchOutcome::Unknown(unknown) => failed.push(unknown.0),
            }
        }
        for f in &failed {
            tracing::warn!(nodepool = %f.nodepool, instance_type = %f.instance_type, zone = %f.zone,
                error = %f.error, "{what}: a launch failed; the next run tries again");
        }
        Ok((launched, failed))
    }
}
