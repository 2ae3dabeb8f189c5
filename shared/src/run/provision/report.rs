//! What a run did, as values: logged as one JSON line per batch and per run, and turned
//! into CloudWatch metrics.

use serde::{Deserialize, Serialize};

use crate::decide::Unschedulable;
use crate::decide::provisioning::templates::Skipped;
use crate::model::CapacityType;
use crate::ports::Backoff;

/// A node launched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launched {
    /// The launch id (tagged on the instance).
    pub launch_id: String,
    /// The instance.
    pub instance_id: String,
    /// The NodePool.
    pub nodepool: String,
    /// The type EC2 chose among the plan's alternatives.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour, from the price book.
    pub price_per_hour: f64,
    /// How many pods it was planned for.
    pub pods: usize,
}

/// A launch that failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchFailure {
    /// The NodePool.
    pub nodepool: String,
    /// The planned type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// Why.
    pub error: String,
}

/// One batch: pods seen, the plan, the launches.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchReport {
    /// Pending pods Carpool should provision for, when the batch closed.
    pub pods_seen: usize,
    /// Pods placed: on new nodes, on nodes that exist or on capacity in flight.
    pub pods_planned: usize,
    /// Pods placed on new nodes this batch launched.
    pub pods_on_new_nodes: usize,
    /// Nodes launched.
    pub launched: Vec<Launched>,
    /// Per planning round, how the plan was grown to fit kube-scheduler's own placement
    /// ([`crate::decide::provisioning::scheduler_fit`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fitting: Vec<crate::decide::provisioning::scheduler_fit::Fitting>,
    /// Launches that failed (capacity errors included; those were re-planned).
    pub launch_errors: Vec<LaunchFailure>,
    /// Offerings marked unavailable after a capacity error, as `type/zone/capacity`.
    pub marked_unavailable: Vec<String>,
    /// NodePools left out because they were backed off when the batch started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backed_off: Vec<Backoff>,
    /// Backoffs this batch's launch errors set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backoffs_set: Vec<Backoff>,
    /// Pods no node can take, and why.
    pub unschedulable: Vec<Unschedulable>,
    /// NodePools and EC2NodeClasses left out, and why.
    pub skipped: Vec<Skipped>,
    /// Zones a new node was not planned in for want of free subnet addresses, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones_passed_over: Vec<crate::decide::provisioning::plan::ZonePassedOver>,
    /// The USD per hour the launched nodes add.
    pub cost_per_hour_added: f64,
    /// Planning rounds (1, plus one per round of capacity errors).
    pub rounds: usize,
    /// Time spent reading the snapshot from the cluster.
    #[serde(default)]
    pub snapshot_ms: u64,
    /// Time spent planning, all rounds.
    pub plan_ms: u64,
    /// Time spent launching, all rounds.
    pub launch_ms: u64,
    /// Per pod placed on a new node: milliseconds from its creation to the CreateFleet
    /// call that launched its node.
    pub pending_to_fleet_ms: Vec<u64>,
    /// Whether nothing was launched because of dry-run mode.
    pub dry_run: bool,
}

/// Housekeeping: launches and instances followed up.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HousekeepingReport {
    /// Launches whose node registered, as `launch id → node`.
    pub registered: Vec<(String, String)>,
    /// Instances terminated because their node never registered, and why.
    pub terminated: Vec<(String, String)>,
    /// Launches in flight whose instance was found by its launch-id tag and recorded, as
    /// `launch id → instance`.
    #[serde(default)]
    pub reconciled: Vec<(String, String)>,
    /// Launches in flight marked failed because their instance is gone or never came, as
    /// `launch id → reason`; their pods are planned again.
    #[serde(default)]
    pub lost: Vec<(String, String)>,
    /// Terminations past the per-round cap, not carried out, and why they were planned.
    #[serde(default)]
    pub held_back: Vec<(String, String)>,
    /// In dry-run mode, the instances that would have been terminated, and why.
    #[serde(default)]
    pub would_terminate: Vec<(String, String)>,
    /// Instances that would have been terminated but are not this deployment's, and why
    /// they are spared.
    #[serde(default)]
    pub spared: Vec<(String, String)>,
    /// Records removed because their instance is gone.
    pub records_removed: usize,
    /// Launch templates deleted: made by Carpool, idle, and used by no live instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates_deleted: Vec<String>,
    /// Launches whose instance did not register within the TTL, as `nodepool → reason`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_registered: Vec<(String, String)>,
    /// Backoffs these registration failures set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backoffs_set: Vec<Backoff>,
    /// Nodes given the labels of their instance type.
    pub labelled: Vec<String>,
    /// Nodes released from their launch wave ([`crate::decide::waves::wave`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<crate::decide::waves::wave::Untaint>,
    /// Errors met (housekeeping goes on after each).
    pub errors: Vec<String>,
}

/// One run of the provisioner.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Who held the lease instead, when this run did not get it.
    pub lease_held_by: Option<String>,
    /// Housekeeping, once per batch and at the start.
    pub housekeeping: Vec<HousekeepingReport>,
    /// The batches.
    pub batches: Vec<BatchReport>,
    /// How long the run watched.
    pub watched_ms: u64,
    /// Nodes released from their launch wave by the watch loop (housekeeping's releases
    /// are in its reports).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub released: Vec<crate::decide::waves::wave::Untaint>,
    /// Waves handed to their pending pods before their nodes were released.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handed: Vec<crate::decide::waves::wave::Handed>,
    /// Steps that failed and that the watch went on past (a poll of pending pods, a
    /// housekeeping round, a batch), as `step: error` (the `TransientErrors` metric).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transient_errors: Vec<String>,
    /// Requests the run sent the apiserver ([`crate::ports::Cluster::requests_sent`]): each
    /// page of a list, each retry and each write (the `ApiserverRequests` metric).
    #[serde(default)]
    pub apiserver_requests: u64,
    /// The NodePools and EC2NodeClasses whose status the run wrote, as `Kind/name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statuses_written: Vec<String>,
    /// What the run did for the static NodePools (`spec.replicas`).
    #[serde(default)]
    pub static_capacity: StaticReport,
    /// What the run did for the CapacityBuffers.
    #[serde(default)]
    pub buffers: BufferReport,
    /// The managed NodePools' nodes and cost per hour, by capacity type, as the run found
    /// them (empty when its statuses could not be read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fleet: Vec<crate::decide::status::fleet::FleetLine>,
    /// The adaptive watch found nothing to do and exited after one check.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exited_early: bool,
}

impl BatchReport {
    /// NodePools backed off in this batch: held back at its start, or by its launch
    /// errors (the `LaunchBackoffs` metric).
    pub fn launch_backoffs(&self) -> usize {
        self.backed_off.len() + self.backoffs_set.len()
    }
}

impl RunReport {
    /// Nodes launched in all batches.
    pub fn launched(&self) -> impl Iterator<Item = &Launched> {
        self.batches.iter().flat_map(|b| b.launched.iter())
    }
}

/// The `q`-quantile (0..=1) of some values, by nearest rank; `None` when empty.
pub fn quantile(values: &[u64], q: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.saturating_sub(1).min(sorted.len() - 1)).copied()
}

/// What a run did for the CapacityBuffers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BufferReport {
    /// Per buffer, `namespace/name` and its chunks now.
    pub sizes: Vec<(String, u32)>,
    /// Buffers that give no chunk, `namespace/name` and why.
    pub skipped: Vec<(String, String)>,
    /// Chunks planned on new nodes (the rest have room on nodes that exist or come).
    pub chunks_planned_new: usize,
    /// Chunks with no room anywhere (a NodePool's limits, say), and why.
    pub unplaced: Vec<(String, String)>,
    /// The nodes launched for them.
    pub launched: Vec<Launched>,
    /// The launches that failed.
    pub failed: Vec<LaunchFailure>,
}

/// What a run did for the static NodePools.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StaticReport {
    /// Per static pool short of nodes: `(pool, have, want)`.
    pub short: Vec<(String, usize, usize)>,
    /// The nodes launched.
    pub launched: Vec<Launched>,
    /// The launches that failed.
    pub failed: Vec<LaunchFailure>,
    /// Why a missing node could not be planned, per pool.
    pub unplanned: Vec<(String, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
