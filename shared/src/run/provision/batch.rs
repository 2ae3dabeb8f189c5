//! One batch: snapshot, count capacity in flight, plan, launch every planned node at
//! once, re-plan after capacity errors, record.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use futures_util::{StreamExt, stream};

use super::report::{BatchReport, LaunchFailure, Launched};
use super::{ProvisionError, Provisioner};
use crate::catalog::RegionCatalog;
use crate::decide::Unschedulable;
use crate::decide::in_flight::capacity_view;
use crate::decide::subnet_zones::narrow_to_subnet_zones;
use crate::decide::templates::pool_labels;
use crate::decide::{PlannedNode, provisioning_plan};
use crate::model::NodePool;
use crate::model::well_known as wk;
use crate::ports::{
    Cloud, CloudError, Cluster, EpochMillis, LaunchRecord, LaunchRequest, LaunchState, StateStore, Timer,
    UnavailableOffering, epoch_millis,
};
use crate::snapshot::Snapshot;

/// How long an offering that ran out of capacity is left out (Karpenter's ICE cache TTL).
pub const UNAVAILABLE_FOR: Duration = Duration::from_secs(180);

/// CreateFleet calls in flight at once: every planned node is launched concurrently, in
/// waves of this many, under EC2's request-rate limits for mutating calls.
pub const LAUNCH_CONCURRENCY: usize = 16;

/// Planning rounds per batch: the first, and re-plans after capacity errors. Each round
/// leaves out the offerings that failed, so a spot outage across a region's six zones
/// takes at most seven rounds to reach on-demand.
pub const MAX_ROUNDS: usize = 10;

fn elapsed_ms(from: SystemTime, to: SystemTime) -> u64 {
    to.duration_since(from)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn offering_name(o: &UnavailableOffering) -> String {
    format!("{}/{}/{}", o.instance_type, o.zone, o.capacity_type.label())
}

/// `insufficient capacity for m5.large, c5.large and 58 more in us-east-1a (spot)`.
fn capacity_message(offerings: &[UnavailableOffering]) -> String {
    let Some(first) = offerings.first() else {
        return "insufficient capacity".into();
    };
    let names: Vec<&str> = offerings.iter().take(3).map(|o| o.instance_type.as_str()).collect();
    let more = offerings.len().saturating_sub(3);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "insufficient capacity for {}{more} in {} ({})",
        names.join(", "),
        first.zone,
        first.capacity_type.label()
    )
}

/// The report of a batch with no valid NodePool: every pending pod unschedulable, the
/// skipped objects with their reasons.
fn no_nodepool(snapshot: &Snapshot, dry_run: bool) -> BatchReport {
    let pending: Vec<String> = snapshot
        .pods
        .iter()
        .filter(|p| crate::decide::pod::is_provisionable(p))
        .map(crate::decide::pod::pod_key)
        .collect();
    tracing::warn!(skipped = ?snapshot.skipped, pods = pending.len(), "no valid NodePool: nothing to launch");
    BatchReport {
        pods_seen: pending.len(),
        unschedulable: pending
            .into_iter()
            .map(|pod| Unschedulable {
                pod,
                reason: "no valid NodePool with an EC2NodeClass in the cluster".into(),
            })
            .collect(),
        skipped: snapshot
            .skipped
            .iter()
            .map(|(object, reason)| crate::decide::templates::Skipped {
                object: object.clone(),
                reason: reason.clone(),
            })
            .collect(),
        rounds: 0,
        dry_run,
        ..BatchReport::default()
    }
}

/// The pods' creation times, by `namespace/name`.
fn created_at(snapshot: &Snapshot) -> BTreeMap<String, EpochMillis> {
    snapshot
        .pods
        .iter()
        .filter_map(|p| {
            let t = p.metadata.creation_timestamp.as_ref()?.0.as_millisecond();
            Some((crate::decide::pod::pod_key(p), t))
        })
        .collect()
}

/// The launch request for a planned node.
fn request(launch_id: &str, node: &PlannedNode, pool: Option<&NodePool>, snapshot: &Snapshot) -> LaunchRequest {
    let mut labels = pool.map(pool_labels).unwrap_or_default();
    labels.insert(wk::NODEPOOL.into(), node.nodepool.clone());
    labels.insert(wk::CAPACITY_TYPE.into(), node.capacity_type.label().to_string());
    let class_name = pool.map(|p| p.spec.template.spec.node_class_ref.name.clone());
    if let Some(class) = &class_name {
        labels.insert(wk::EC2NODECLASS.into(), class.clone());
    }
    let node_class = class_name
        .and_then(|name| snapshot.nodeclasses.iter().find(|c| c.name() == name).cloned())
        .unwrap_or_else(|| crate::model::EC2NodeClass::named("default"));
    LaunchRequest {
        launch_id: launch_id.to_string(),
        nodepool: node.nodepool.clone(),
        node_class,
        instance_types: node.instance_types.clone(),
        zone: node.zone.clone(),
        capacity_type: node.capacity_type,
        labels,
        taints: pool.map(|p| p.spec.template.spec.taints.clone()).unwrap_or_default(),
        startup_taints: pool
            .map(|p| p.spec.template.spec.startup_taints.clone())
            .unwrap_or_default(),
    }
}

/// The outcome of one planned node's launch.
enum Outcome {
    Launched(Box<(Launched, LaunchRecord)>),
    OutOfCapacity(Vec<UnavailableOffering>, LaunchFailure),
    Failed(LaunchFailure),
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Plans and launches for the pending pods, counting the capacity already in flight.
    pub async fn batch(&mut self, base: &RegionCatalog<'_>) -> Result<BatchReport, ProvisionError> {
        let mut report = BatchReport {
            dry_run: self.settings.dry_run,
            ..BatchReport::default()
        };
        let mut snapshot = super::observe::read_snapshot(self.cluster).await?;
        // A NodePool whose EC2NodeClass is missing cannot launch: skip it with the reason,
        // as Karpenter marks such a pool not ready, and let the others work.
        let classes: Vec<String> = snapshot.nodeclasses.iter().map(|c| c.name().to_string()).collect();
        let (pools, orphans): (Vec<NodePool>, Vec<NodePool>) = std::mem::take(&mut snapshot.nodepools)
            .into_iter()
            .partition(|p| classes.contains(&p.spec.template.spec.node_class_ref.name));
        snapshot.nodepools = pools;
        for p in orphans {
            snapshot.skipped.push((
                format!("NodePool/{}", p.name()),
                format!(
                    "its EC2NodeClass {:?} does not exist (or is invalid)",
                    p.spec.template.spec.node_class_ref.name
                ),
            ));
        }
        // The planner falls back to a default NodePool for cluster dumps that have none;
        // in a cluster, no valid NodePool means Carpool launches nothing, as Karpenter.
        if snapshot.nodepools.is_empty() {
            return Ok(no_nodepool(&snapshot, self.settings.dry_run));
        }
        let mut zones_by_class = BTreeMap::new();
        for class in &snapshot.nodeclasses {
            zones_by_class.insert(class.name().to_string(), self.cloud.zones(class).await?);
        }
        narrow_to_subnet_zones(&mut snapshot.nodepools, &zones_by_class);
        let now = self.clock.now();
        let mut launches = self.store.list_launches().await?;
        let mut region = base.clone();
        for o in self.store.unavailable_offerings(now).await? {
            region.mark_unavailable(&o.instance_type, &o.zone, o.capacity_type);
        }
        let created = created_at(&snapshot);
        let ttl_ms = i64::try_from(self.settings.registration_ttl.as_millis()).unwrap_or(i64::MAX);

        // Pods of nodes whose launch failed in the last round, and why.
        let mut not_launched: Vec<Unschedulable> = Vec::new();
        for round in 0..MAX_ROUNDS {
            report.rounds = round + 1;
            let plan_start = self.clock.now();
            let mut view = snapshot.clone();
            view.nodes = capacity_view(&snapshot, &launches, &region, epoch_millis(plan_start), ttl_ms);
            let plan = provisioning_plan(&view, &region);
            report.plan_ms += elapsed_ms(plan_start, self.clock.now());
            if round == 0 {
                report.pods_seen = snapshot
                    .pods
                    .iter()
                    .filter(|p| crate::decide::pod::is_provisionable(p))
                    .count();
                report.skipped = plan.skipped.clone();
            }
            report.unschedulable = plan.unschedulable.clone();
            not_launched.clear();
            if plan.nodes.is_empty() {
                break;
            }
            if self.settings.dry_run {
                report.cost_per_hour_added = plan.cost_per_hour;
                self.log_dry_run(&plan.nodes);
                break;
            }

            let launch_start = self.clock.now();
            let fleet_at = epoch_millis(launch_start);
            let outcomes: Vec<_> = stream::iter(
                plan.nodes
                    .iter()
                    .map(|node| self.launch_one(node, &snapshot, &region, launch_start, &created)),
            )
            .buffered(LAUNCH_CONCURRENCY)
            .collect()
            .await;
            report.launch_ms += elapsed_ms(launch_start, self.clock.now());

            let mut out_of_capacity = false;
            for (node, outcome) in plan.nodes.iter().zip(outcomes) {
                match outcome? {
                    Outcome::Launched(launched) => {
                        let (launched, record) = *launched;
                        report.pods_on_new_nodes += node.pods.len();
                        report.cost_per_hour_added += launched.price_per_hour;
                        report.pending_to_fleet_ms.extend(
                            node.pods
                                .iter()
                                .filter_map(|p| created.get(p))
                                .map(|&t| u64::try_from(fleet_at.saturating_sub(t)).unwrap_or(0)),
                        );
                        report.launched.push(launched);
                        launches.push(record);
                    }
                    Outcome::OutOfCapacity(offerings, failure) => {
                        out_of_capacity = true;
                        not_launched.extend(node.pods.iter().map(|p| Unschedulable {
                            pod: p.clone(),
                            reason: format!("launch: {}", failure.error),
                        }));
                        for o in offerings {
                            region.mark_unavailable(&o.instance_type, &o.zone, o.capacity_type);
                            report.marked_unavailable.push(offering_name(&o));
                            self.store.mark_unavailable(&o).await?;
                        }
                        report.launch_errors.push(failure);
                    }
                    Outcome::Failed(failure) => {
                        not_launched.extend(node.pods.iter().map(|p| Unschedulable {
                            pod: p.clone(),
                            reason: format!("launch: {}", failure.error),
                        }));
                        report.launch_errors.push(failure);
                    }
                }
            }
            if !out_of_capacity {
                break;
            }
        }
        report.unschedulable.extend(not_launched);
        report.pods_planned = report.pods_seen.saturating_sub(report.unschedulable.len());
        report.pending_to_fleet_ms.sort_unstable();
        Ok(report)
    }

    fn log_dry_run(&self, nodes: &[PlannedNode]) {
        for n in nodes {
            tracing::info!(
                nodepool = %n.nodepool, instance_type = %n.instance_type, zone = %n.zone,
                capacity_type = %n.capacity_type.label(), price_per_hour = n.price_per_hour,
                pods = n.pods.len(), "dry run: would launch"
            );
        }
    }

    /// Records, launches and records again one planned node. Store errors end the batch;
    /// cloud errors are outcomes.
    async fn launch_one(
        &self,
        node: &PlannedNode,
        snapshot: &Snapshot,
        region: &RegionCatalog<'_>,
        at: SystemTime,
        created: &BTreeMap<String, EpochMillis>,
    ) -> Result<Outcome, ProvisionError> {
        let launch_id = self.next_launch_id();
        let pool = snapshot.nodepools.iter().find(|p| p.name() == node.nodepool);
        let request = request(&launch_id, node, pool, snapshot);
        let failure = |error: String| LaunchFailure {
            nodepool: node.nodepool.clone(),
            instance_type: node.instance_type.clone(),
            zone: node.zone.clone(),
            capacity_type: node.capacity_type,
            error,
        };
        // Recorded before CreateFleet: a crash after the call leaves a record (and the
        // instance its launch-id tag) for housekeeping to follow up.
        let record = LaunchRecord {
            id: launch_id.clone(),
            instance_id: None,
            nodepool: node.nodepool.clone(),
            instance_type: node.instance_type.clone(),
            zone: node.zone.clone(),
            capacity_type: node.capacity_type,
            pods: node.pods.clone(),
            launched_at: epoch_millis(at),
            state: LaunchState::InFlight,
            version: 0,
        };
        let record = self.store.create_launch(&record).await?;
        match self.cloud.launch(&request).await {
            Ok(instance) => {
                let mut updated = record.clone();
                updated.instance_id = Some(instance.id.clone());
                updated.instance_type.clone_from(&instance.instance_type);
                updated.zone.clone_from(&instance.zone);
                updated.capacity_type = instance.capacity_type;
                let updated = self.store.update_launch(&updated).await?;
                let price = region
                    .types()
                    .iter()
                    .find(|t| t.name == instance.instance_type)
                    .and_then(|it| region.prices().price(it, &instance.zone, instance.capacity_type))
                    .unwrap_or(node.price_per_hour);
                // The longest any of its pods waited, from creation to this CreateFleet.
                let max_pending_ms = node
                    .pods
                    .iter()
                    .filter_map(|p| created.get(p))
                    .map(|&t| epoch_millis(at).saturating_sub(t))
                    .max()
                    .unwrap_or(0);
                tracing::info!(
                    launch_id = %launch_id, instance_id = %instance.id, nodepool = %node.nodepool,
                    instance_type = %instance.instance_type, zone = %instance.zone,
                    capacity_type = %instance.capacity_type.label(), price_per_hour = price,
                    pod_count = node.pods.len(), pods = %node.pods.join(","), max_pending_ms,
                    "launched"
                );
                Ok(Outcome::Launched(Box::new((
                    Launched {
                        launch_id,
                        instance_id: instance.id,
                        nodepool: node.nodepool.clone(),
                        instance_type: instance.instance_type,
                        zone: instance.zone,
                        capacity_type: instance.capacity_type,
                        price_per_hour: price,
                        pods: node.pods.len(),
                    },
                    updated,
                ))))
            }
            Err(CloudError::InsufficientCapacity { offerings }) => {
                self.store.delete_launch(&launch_id).await?;
                let until = epoch_millis(at + UNAVAILABLE_FOR);
                let mut unavailable: Vec<UnavailableOffering> = offerings
                    .iter()
                    .map(|o| UnavailableOffering {
                        instance_type: o.instance_type.clone(),
                        zone: o.zone.clone(),
                        capacity_type: o.capacity_type,
                        until,
                    })
                    .collect();
                if unavailable.is_empty() {
                    // The cloud named no offering: every one tried is out.
                    unavailable = node
                        .instance_types
                        .iter()
                        .map(|t| UnavailableOffering {
                            instance_type: t.clone(),
                            zone: node.zone.clone(),
                            capacity_type: node.capacity_type,
                            until,
                        })
                        .collect();
                }
                let message = capacity_message(&unavailable);
                tracing::warn!(launch_id = %launch_id, nodepool = %node.nodepool, zone = %node.zone,
                    capacity_type = %node.capacity_type.label(), error = %message, "launch: insufficient capacity; re-planning");
                Ok(Outcome::OutOfCapacity(unavailable, failure(message)))
            }
            Err(e) => {
                let message = crate::error_chain::Chain(&e).to_string();
                tracing::error!(launch_id = %launch_id, nodepool = %node.nodepool, error = %message, "launch failed");
                let mut failed = record;
                failed.state = LaunchState::Failed {
                    reason: message.clone(),
                };
                self.store.update_launch(&failed).await?;
                Ok(Outcome::Failed(failure(message)))
            }
        }
    }
}
