//! One batch: snapshot, drop the NodePools that cannot launch
//! ([`crate::decide::provisioning::nodepools`]) and those backed off ([`crate::decide::provisioning::backoff`]),
//! count capacity in flight, plan, launch every planned node at once
//! ([`crate::run::launch`]), re-plan after capacity errors, back off the NodePools whose
//! launches failed otherwise, publish the pods' Events ([`super::events`]), report.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::report::BatchReport;
use super::{ProvisionError, Provisioner};
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::backoff::{self, HeldBack, PoolKey, Round};
use crate::decide::provisioning::batch_plan::{
    FitTo, classes_in_use, drop_unresolved, narrow_pools, plan_batch, prepare_pools,
};
use crate::decide::provisioning::in_flight::capacity_view;
use crate::decide::provisioning::nodepools;
use crate::decide::provisioning::reservation::keep_reserved;
use crate::decide::provisioning::reserved_capacity::usable;
use crate::decide::provisioning::templates::Skipped;
use crate::decide::provisioning::unschedulable::Reason;
use crate::decide::waves::wave::wave_id;
use crate::decide::{PlannedNode, Unschedulable};
use crate::error_chain::Chain;
use crate::model::NodePool;
use crate::ports::{Cloud, CloudError, Cluster, EpochMillis, StateStore, Timer, UnavailableOffering, epoch_millis};
use crate::run::launch::{LaunchOutcome, Wave};
use crate::snapshot::Snapshot;

/// What resolving the classes of a snapshot's NodePools gave
/// ([`Provisioner::narrow_pools`]).
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    /// The images of each class resolved, by class.
    pub images: BTreeMap<String, Vec<crate::ports::ResolvedImage>>,
    /// The subnets and security groups of each class resolved, by class.
    pub networks: BTreeMap<String, crate::ports::ResolvedNetwork>,
    /// The instance profile of each class resolved, by class.
    pub profiles: BTreeMap<String, Option<String>>,
    /// The capacity reservations each class selects, by class (classes selecting none
    /// absent).
    pub reservations: BTreeMap<String, Vec<crate::ports::CapacityReservation>>,
    /// Why each class that did not resolve did not, by class.
    pub failures: BTreeMap<String, crate::decide::status::ClassFailure>,
    /// The NodePools dropped because their class could not be resolved, each with the
    /// error.
    pub unresolved: Vec<(NodePool, String)>,
}

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

/// The snapshot's skipped objects, with their reasons.
fn skipped(snapshot: &Snapshot) -> Vec<Skipped> {
    snapshot
        .skipped
        .iter()
        .map(|(object, reason)| Skipped {
            object: object.clone(),
            reason: reason.clone(),
        })
        .collect()
}

/// The report of a batch with no valid NodePool: every pending pod unschedulable, the
/// skipped objects with their reasons.
fn no_nodepool(snapshot: &Snapshot, unschedulable: Vec<Unschedulable>, dry_run: bool) -> BatchReport {
    tracing::warn!(skipped = ?snapshot.skipped, pods = unschedulable.len(), "no valid NodePool: nothing to launch");
    BatchReport {
        pods_seen: unschedulable.len(),
        unschedulable,
        skipped: skipped(snapshot),
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
            Some((crate::decide::provisioning::pod::pod_key(p), t))
        })
        .collect()
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Plans and launches for the pending pods, counting the capacity already in flight.
    pub async fn batch(&mut self, base: &RegionCatalog<'_>) -> Result<BatchReport, ProvisionError> {
        let mut report = BatchReport {
            dry_run: self.settings.dry_run,
            ..BatchReport::default()
        };
        let read_start = self.ports.clock.now();
        let mut snapshot = crate::run::observe::read_snapshot(self.ports.cluster).await?;
        report.snapshot_ms = elapsed_ms(read_start, self.ports.clock.now());
        // Only the NodePools the deployment's selector picks are Carpool's. A NodePool whose
        // EC2NodeClass is missing cannot launch: skip it with the reason, and let the
        // others work; with none left, launch nothing.
        let unmanaged = prepare_pools(&mut snapshot, &self.settings.nodepool_selector);
        if !unmanaged.is_empty() {
            tracing::debug!(nodepools = ?unmanaged, "NodePools the selector leaves to another autoscaler");
        }
        if let Some(unschedulable) = nodepools::without_nodepool(&snapshot) {
            let report = no_nodepool(&snapshot, unschedulable, self.settings.dry_run);
            self.publish_events(&snapshot, &report, &[]).await;
            return Ok(report);
        }
        let now = self.ports.clock.now();
        // A NodePool backed off after failures in a row is left out until its window ends
        // (its class is not resolved meanwhile).
        let backoffs = self.ports.store.list_backoffs().await?;
        let mut held = backoff::hold_back(&mut snapshot, &backoffs, epoch_millis(now));
        for h in &held {
            tracing::warn!(nodepool = %h.backoff.nodepool, node_class = %h.backoff.node_class,
                until = h.backoff.until, failures = h.backoff.failures, reason = %h.backoff.reason,
                "NodePool backed off: not launching for it");
        }
        report.backed_off = held.iter().map(|h| h.backoff.clone()).collect();
        // A class that cannot be resolved backs its NodePools off; the others go on.
        let resolved = self.narrow_pools(&mut snapshot, base).await;
        if !resolved.unresolved.is_empty() {
            let unresolved = self
                .back_off_unresolved(&resolved.unresolved, &backoffs, &mut report)
                .await?;
            held.extend(unresolved);
        }
        if snapshot.nodepools.is_empty() {
            report.pods_seen = snapshot
                .pods
                .iter()
                .filter(|p| crate::decide::provisioning::pod::is_provisionable(p))
                .count();
            report.unschedulable = backoff::all_held_back(&snapshot, &held, base);
            report.skipped = skipped(&snapshot);
            self.publish_events(&snapshot, &report, &[]).await;
            return Ok(report);
        }
        let mut launches = self.ports.store.list_launches().await?;
        let mut region = base.clone();
        // The prices the user pays: the cluster's NodeOverlays over the listed prices.
        let overlays = region.apply_overlays(&snapshot.nodeoverlays);
        snapshot.skipped.extend(overlays.skipped_objects());
        // A reclaimed offering holds back moves, not the launches of new pods.
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
        let created = created_at(&snapshot);
        // Every node this batch launches, whatever the round, is one wave.
        let wave = (!self.settings.wave_grace.is_zero()).then(|| Wave {
            id: wave_id(&self.owner, self.batches),
            release_by: epoch_millis(now + self.settings.wave_deadline),
        });
        self.batches += 1;
        let ttl_ms = i64::try_from(self.settings.registration_ttl.as_millis()).unwrap_or(i64::MAX);

        // Pods of nodes whose launch failed in the last round, and why.
        let mut not_launched: Vec<Unschedulable> = Vec::new();
        for round in 0..MAX_ROUNDS {
            report.rounds = round + 1;
            let plan_start = self.ports.clock.now();
            // The view takes the snapshot's pods and gives them back once planned: a copy
            // of a large cluster's running pods would double the run's memory.
            // `keep_reserved`'s tolerations stay on them, which is what every round adds.
            let pods = std::mem::take(&mut snapshot.pods);
            let mut view = snapshot.clone();
            view.pods = pods;
            // The room left in each reservation: EC2's count less the launches since
            // (this batch's earlier rounds' included).
            for (class, found) in &resolved.reservations {
                region.set_capacity_reservations(class, usable(found, &launches, epoch_millis(plan_start)));
            }
            view.nodes = capacity_view(&view, &launches, &region, epoch_millis(plan_start), ttl_ms);
            keep_reserved(&mut view, &launches, epoch_millis(plan_start), ttl_ms);
            // Grown where kube-scheduler's own placement would strand a pod: waves are
            // handed to their pods biggest first; without waves, the nodes reach the
            // scheduler one by one, in no order the plan knows.
            let (plan, fitting) = plan_batch(
                &view,
                &region,
                FitTo::of(self.settings.fit_to_scheduler, wave.is_some()),
            );
            if let Some(fitting) = fitting {
                if fitting.skipped {
                    tracing::info!(
                        "plan not fitted to kube-scheduler's placement: the cluster is too large for a replay within the run's time"
                    );
                }
                if !fitting.grown.is_empty() || !fitting.stranded.is_empty() {
                    tracing::info!(grown = ?fitting.grown, stranded = ?fitting.stranded, cost_added = fitting.cost_added,
                        replays = fitting.replays, "plan fitted to kube-scheduler's placement");
                }
                report.fitting.push(fitting);
            }
            report.plan_ms += elapsed_ms(plan_start, self.ports.clock.now());
            if round == 0 {
                report.pods_seen = view
                    .pods
                    .iter()
                    .filter(|p| crate::decide::provisioning::pod::is_provisionable(p))
                    .count();
                report.skipped = plan.skipped.clone();
            }
            report.unschedulable = plan.unschedulable.clone();
            for z in &plan.zones_passed_over {
                if !report.zones_passed_over.contains(z) {
                    tracing::warn!(nodepool = %z.nodepool, zone = %z.zone, available = z.available,
                        needed = z.needed, "{}", z.reason());
                    report.zones_passed_over.push(z.clone());
                }
            }
            backoff::attribute(&view, &held, &mut report.unschedulable, &region);
            snapshot.pods = std::mem::take(&mut view.pods);
            drop(view);
            not_launched.clear();
            if plan.nodes.is_empty() {
                break;
            }
            if self.settings.dry_run {
                report.cost_per_hour_added = plan.cost_per_hour;
                self.log_dry_run(&plan.nodes);
                break;
            }

            let launch_start = self.ports.clock.now();
            let fleet_at = epoch_millis(launch_start);
            let outcomes = self
                .launch_all(
                    &plan.nodes,
                    &snapshot,
                    &region,
                    launch_start,
                    &created,
                    None,
                    wave.as_ref(),
                )
                .await;
            report.launch_ms += elapsed_ms(launch_start, self.ports.clock.now());

            let tiers = crate::decide::waves::hand_tiers::of_plan(&snapshot, &plan);
            let mut out_of_capacity = false;
            let mut failed: Vec<super::report::LaunchFailure> = Vec::new();
            for (node, outcome) in plan.nodes.iter().zip(outcomes) {
                match outcome? {
                    LaunchOutcome::Launched(launched) => {
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
                        if let Some(w) = &wave {
                            self.waves.insert(w.id.clone());
                            self.wave_pods
                                .extend(node.pods.iter().map(|p| (p.clone(), w.id.clone())));
                            self.hand_tiers.extend(
                                node.pods
                                    .iter()
                                    .map(|p| (p.clone(), tiers.get(p).copied().unwrap_or(0))),
                            );
                        }
                    }
                    LaunchOutcome::OutOfCapacity(offerings, failure) => {
                        out_of_capacity = true;
                        not_launched.extend(node.pods.iter().map(|p| {
                            Unschedulable::new(
                                p.clone(),
                                Reason::Launch {
                                    error: failure.error.clone(),
                                },
                            )
                        }));
                        for o in offerings {
                            region.mark_unavailable(&o.instance_type, &o.zone, o.capacity_type);
                            report.marked_unavailable.push(offering_name(&o));
                            self.ports.store.mark_unavailable(&o).await?;
                        }
                        report.launch_errors.push(failure);
                    }
                    LaunchOutcome::Unknown(unknown) => {
                        // Its pods are provided for by the record in flight.
                        let (failure, record) = *unknown;
                        report.launch_errors.push(failure);
                        launches.push(record);
                    }
                    LaunchOutcome::Failed(failure) => {
                        not_launched.extend(node.pods.iter().map(|p| {
                            Unschedulable::new(
                                p.clone(),
                                Reason::Launch {
                                    error: failure.error.clone(),
                                },
                            )
                        }));
                        failed.push(failure.clone());
                        report.launch_errors.push(failure);
                    }
                }
            }
            if !failed.is_empty() {
                // Failures that are not capacity back their NodePool off: it is left out of
                // the next rounds, and of later batches until its window ends.
                let rounds = super::backoff::launch_error_rounds(&failed, &snapshot);
                let set = self
                    .apply_backoffs(&rounds, &backoffs, epoch_millis(self.ports.clock.now()))
                    .await?;
                snapshot
                    .nodepools
                    .retain(|p| !set.iter().any(|b| b.nodepool == p.name()));
                report.backoffs_set.extend(set);
            }
            if !out_of_capacity {
                break;
            }
        }
        report.unschedulable.extend(not_launched);
        report.pods_planned = report.pods_seen.saturating_sub(report.unschedulable.len());
        report.pending_to_fleet_ms.sort_unstable();
        self.publish_events(&snapshot, &report, &launches).await;
        Ok(report)
    }

    /// Narrows the snapshot's NodePools to the zones of their classes' subnets and the
    /// types their AMIs boot. Only the classes the NodePools left refer to are resolved
    /// ([`classes_in_use`]); a class whose zones or images cannot be resolved, whatever
    /// the error (a typed [`crate::ports::CloudError::NodeClass`], an SSM parameter the
    /// role may not read, a throttle), is that class's failure: its NodePools are dropped
    /// ([`drop_unresolved`]) and returned with the error, and every other NodePool goes on.
    pub(crate) async fn narrow_pools(&self, snapshot: &mut Snapshot, base: &RegionCatalog<'_>) -> Resolved {
        let mut zones_by_class = BTreeMap::new();
        let mut free_ips = BTreeMap::new();
        let mut images_by_class = BTreeMap::new();
        let mut networks = BTreeMap::new();
        let mut failures = BTreeMap::new();
        let mut profiles = BTreeMap::new();
        let mut reservations = BTreeMap::new();
        let mut failed: BTreeMap<String, String> = BTreeMap::new();
        for class in classes_in_use(snapshot) {
            let resolved = match self.ports.cloud.network(class).await {
                Ok(network) => match self.ports.cloud.images(class).await {
                    Ok(images) => match self
                        .ports
                        .cloud
                        .instance_profile(class, &self.settings.deployment)
                        .await
                    {
                        // A malformed capacity reservation term is the class's error, as a
                        // bad subnet term is: its NodePools launch nothing, the others go on.
                        Ok(profile) => self
                            .ports
                            .cloud
                            .capacity_reservations(class)
                            .await
                            .map(|found| (network, images, profile, found)),
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            match resolved {
                Ok((network, images, profile, found)) => {
                    zones_by_class.insert(class.name().to_string(), network.zones());
                    free_ips.insert(class.name().to_string(), network.free_ips_by_zone());
                    images_by_class.insert(class.name().to_string(), images);
                    networks.insert(class.name().to_string(), network);
                    profiles.insert(class.name().to_string(), profile);
                    if !found.is_empty() {
                        reservations.insert(class.name().to_string(), found);
                    }
                }
                Err(e) => {
                    let error = Chain(&e).to_string();
                    tracing::warn!(node_class = %class.name(), error = %error,
                        "EC2NodeClass not resolved: its NodePools launch nothing; the others go on");
                    let reason = match &e {
                        CloudError::NodeClass { reason, .. } => Some(reason.clone()),
                        _ => None,
                    };
                    failures.insert(
                        class.name().to_string(),
                        crate::decide::status::ClassFailure {
                            reason,
                            message: error.clone(),
                        },
                    );
                    failed.insert(class.name().to_string(), error);
                }
            }
        }
        let dropped = drop_unresolved(snapshot, &failed);
        narrow_pools(snapshot, &zones_by_class, &images_by_class, base.types());
        snapshot.free_ips = free_ips;
        Resolved {
            images: images_by_class,
            networks,
            failures,
            profiles,
            reservations,
            unresolved: dropped
                .into_iter()
                .map(|pool| {
                    let error = failed
                        .get(&pool.spec.template.spec.node_class_ref.name)
                        .cloned()
                        .unwrap_or_default();
                    (pool, error)
                })
                .collect(),
        }
    }

    /// Backs off the NodePools whose class could not be resolved; returns them as held
    /// back, with the backoffs set (in dry run, those it would set).
    async fn back_off_unresolved(
        &self,
        unresolved: &[(NodePool, String)],
        stored: &[crate::ports::Backoff],
        report: &mut BatchReport,
    ) -> Result<Vec<HeldBack>, ProvisionError> {
        let rounds: BTreeMap<PoolKey, Round> = unresolved
            .iter()
            .map(|(pool, error)| {
                (
                    PoolKey::of(pool),
                    Round {
                        node_class_error: Some(error.clone()),
                        ..Round::default()
                    },
                )
            })
            .collect();
        let set = self
            .apply_backoffs(&rounds, stored, epoch_millis(self.ports.clock.now()))
            .await?;
        let held = unresolved
            .iter()
            .filter_map(|(pool, _)| {
                let backoff = set.iter().find(|b| b.nodepool == pool.name())?.clone();
                Some(HeldBack {
                    pool: pool.clone(),
                    backoff,
                })
            })
            .collect();
        report.backoffs_set.extend(set);
        Ok(held)
    }

    pub(crate) fn log_dry_run(&self, nodes: &[PlannedNode]) {
        for n in nodes {
            tracing::info!(
                nodepool = %n.nodepool, instance_type = %n.instance_type, zone = %n.zone,
                capacity_type = %n.capacity_type.label(), price_per_hour = n.price_per_hour,
                pods = n.pods.len(), "dry run: would launch"
            );
        }
    }
}
