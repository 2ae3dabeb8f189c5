//! The replacement of a node that is going away (a spot interruption, an instance
//! stopping, a scheduled change), planned from its own pods and launched through the same
//! path as a batch's nodes, its room [reserved](crate::decide::provisioning::reservation) for those
//! pods. The interruption function calls it before it drains the node; the consolidator
//! will too.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::LaunchOutcome;
use crate::catalog::RegionCatalog;
use crate::decide::disruption::replacement::{moving_pods_of, prefer_on_demand, replacement_view_of};
use crate::decide::provisioning::reservation::reservation_for;
use crate::decide::provisioning::{backoff, nodepools};
use crate::decide::{Unschedulable, provisioning_plan};
use crate::ports::{Cloud, Cluster, StateStore, Timer, epoch_millis};
use crate::run::provision::report::{LaunchFailure, Launched};
use crate::run::provision::{ProvisionError, Provisioner, batch::MAX_ROUNDS};
use crate::snapshot::Snapshot;

/// What was launched to replace a node.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Replacement {
    /// The pods it was planned for, as `namespace/name`.
    pub pods: Vec<String>,
    /// The launch ids of the replacement nodes (launched, or whose outcome is unknown and
    /// that stay in flight).
    pub launch_ids: Vec<String>,
    /// The nodes launched.
    pub launched: Vec<Launched>,
    /// Launches that failed.
    pub failures: Vec<LaunchFailure>,
    /// Pods no replacement could be planned for, and why. They are evicted all the same,
    /// and the provisioner plans for them once they are pending.
    pub unschedulable: Vec<Unschedulable>,
}

/// The nodes a replacement is for.
enum Nodes {
    /// By name.
    Named(BTreeSet<String>),
    /// Those of these instances (their providerIDs), as the snapshot has them.
    OfInstances(BTreeSet<String>),
}

impl Nodes {
    fn names(&self, snapshot: &Snapshot) -> BTreeSet<String> {
        match self {
            Nodes::Named(names) => names.clone(),
            Nodes::OfInstances(ids) => snapshot
                .nodes
                .iter()
                .filter(|n| crate::model::node::node_instance_id(n).is_some_and(|id| ids.contains(id)))
                .filter_map(|n| n.metadata.name.clone())
                .collect(),
        }
    }
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Plans and launches the replacement of `node` (the instance `disrupted`), from the
    /// pods the drain will move, on new capacity: on-demand where the NodePools allow it
    /// when `on_demand` (see [`crate::decide::disruption::replacement`]). Capacity errors leave those
    /// offerings out and re-plan, as a batch does.
    pub async fn replace_node(
        &self,
        base: &RegionCatalog<'_>,
        node: &str,
        disrupted: &str,
        on_demand: bool,
    ) -> Result<Replacement, ProvisionError> {
        let nodes = Nodes::Named(BTreeSet::from([node.to_string()]));
        self.replace_nodes(base, &nodes, disrupted, on_demand, false).await
    }

    /// Plans and launches, together, the replacement of the nodes of the instances
    /// `instances` (a burst of spot warnings in one invocation), reserved under `burst`:
    /// one plan for all their moving pods, on new capacity and on the other nodes' free
    /// room ([`crate::decide::disruption::replacement::replacement_view_of`]).
    pub async fn replace_burst(
        &self,
        base: &RegionCatalog<'_>,
        instances: &BTreeSet<String>,
        burst: &str,
        on_demand: bool,
    ) -> Result<Replacement, ProvisionError> {
        let nodes = Nodes::OfInstances(instances.clone());
        self.replace_nodes(base, &nodes, burst, on_demand, true).await
    }

    async fn replace_nodes(
        &self,
        base: &RegionCatalog<'_>,
        nodes: &Nodes,
        disrupted: &str,
        on_demand: bool,
        free_room: bool,
    ) -> Result<Replacement, ProvisionError> {
        // The cluster as this invocation read it (once, for all its records, with a
        // shared snapshot), or as read now.
        let read = match self.shared_snapshot {
            Some(shared) => shared.get(self.ports.cluster).await?,
            None => Arc::new(crate::run::observe::read_snapshot(self.ports.cluster).await?),
        };
        let nodes = nodes.names(&read);
        let now = self.ports.clock.now();
        let backoffs = self.ports.store.list_backoffs().await?;
        let mut region = base.clone();
        // The prices the user pays: the cluster's NodeOverlays over the listed prices.
        let overlays = region.apply_overlays(&read.nodeoverlays);
        for (object, reason) in overlays.skipped_objects() {
            tracing::warn!(object = %object, reason = %reason, "NodeOverlay skipped");
        }
        for o in self.ports.store.unavailable_offerings(now).await? {
            region.mark_unavailable(&o.instance_type, &o.zone, o.capacity_type);
        }
        let mut replacement = Replacement::default();
        // The pods a launch of an earlier round provided for.
        let mut provided: BTreeSet<String> = BTreeSet::new();
        let created = BTreeMap::new();
        for _ in 0..MAX_ROUNDS {
            let (plan, pools, reservation) = {
                // One record plans at a time: its copy of the cluster and its planning
                // view are let go before the next one makes its own.
                let _turn = match self.shared_snapshot {
                    Some(shared) => Some(shared.planning().await),
                    None => None,
                };
                let mut snapshot = Snapshot::clone(&read);
                nodepools::keep_managed(&mut snapshot, &self.settings.nodepool_selector);
                nodepools::drop_without_node_class(&mut snapshot);
                backoff::hold_back(&mut snapshot, &backoffs, epoch_millis(now));
                // A class that cannot be resolved leaves its NodePools out of the
                // replacement; the provisioner's next batch backs them off.
                self.narrow_pools(&mut snapshot, base).await;
                if on_demand {
                    prefer_on_demand(&mut snapshot.nodepools);
                }
                let reservation = reservation_for(disrupted, &moving_pods_of(&snapshot, &nodes));
                let (mut view, pods) = replacement_view_of(&snapshot, &nodes, free_room);
                if replacement.pods.is_empty() {
                    replacement.pods = pods;
                }
                // A round after the first plans only for the pods whose node ran out of
                // capacity.
                view.pods.retain(|p| {
                    !provided.contains(&crate::decide::provisioning::pod::pod_key(p))
                        || p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
                });
                let plan = (!replacement.pods.is_empty()).then(|| provisioning_plan(&view, &region));
                // What a launch reads of the cluster: its NodePools and classes.
                let pools = Snapshot {
                    nodepools: std::mem::take(&mut snapshot.nodepools),
                    nodeclasses: std::mem::take(&mut snapshot.nodeclasses),
                    ..Snapshot::default()
                };
                (plan, pools, reservation)
            };
            let Some(plan) = plan else {
                return Ok(replacement);
            };
            replacement.unschedulable = plan.unschedulable.clone();
            if plan.nodes.is_empty() || self.settings.dry_run {
                break;
            }
            let at = self.ports.clock.now();
            let snapshot = &pools;
            let outcomes = self
                .launch_all(&plan.nodes, snapshot, &region, at, &created, Some(&reservation), None)
                .await;
            let mut out_of_capacity = false;
            for (planned, outcome) in plan.nodes.iter().zip(outcomes) {
                match outcome? {
                    LaunchOutcome::Launched(launched) => {
                        let (launched, record) = *launched;
                        replacement.launch_ids.push(record.id);
                        replacement.launched.push(launched);
                        provided.extend(planned.pods.iter().cloned());
                    }
                    LaunchOutcome::Unknown(unknown) => {
                        let (failure, record) = *unknown;
                        replacement.launch_ids.push(record.id);
                        replacement.failures.push(failure);
                        provided.extend(planned.pods.iter().cloned());
                    }
                    LaunchOutcome::OutOfCapacity(offerings, failure) => {
                        out_of_capacity = true;
                        for o in offerings {
                            region.mark_unavailable(&o.instance_type, &o.zone, o.capacity_type);
                            self.ports.store.mark_unavailable(&o).await?;
                        }
                        replacement.failures.push(failure);
                    }
                    LaunchOutcome::Failed(failure) => {
                        replacement.failures.push(failure);
                        provided.extend(planned.pods.iter().cloned());
                    }
                }
            }
            if !out_of_capacity {
                break;
            }
        }
        Ok(replacement)
    }
}
