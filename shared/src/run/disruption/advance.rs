//! A disruption advanced step by step: taint, replace, (wait for the replacement), drain,
//! terminate, clean up. Each step is idempotent and the record is written after each, so
//! an invocation that crashes, or runs out of time, leaves it for the next to resume.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Taint;

use super::{Disrupter, EventReport, InterruptionError, Outcome, since_ms};
use crate::catalog::RegionCatalog;
use crate::decide::disruption::drain::{DrainRules, StayReason, stay_reason};
use crate::decide::disruption::surge::pool_opted_in;
use crate::model::CapacityType;
use crate::model::well_known::{DISRUPTED_TAINT, EXCLUDE_BALANCERS, EXCLUDE_BALANCERS_VALUE};
use crate::ports::PodRef;
use crate::ports::{
    Cloud, CloudError, Cluster, ClusterError, DisruptionRecord, DisruptionStep, EpochMillis, Instance, InstanceState,
    LaunchState, StateStore, StoreError, Timer, epoch_millis,
};
use crate::run::drain::drain_pass;
use crate::run::provision::Provisioner;
use crate::run::shared_snapshot::BurstLaunch;

/// The longest wait between two drain passes with blocked pods.
const RETRY_MAX: Duration = Duration::from_secs(10);

/// How an invocation's drain of a node ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// Its pods are gone and its volumes detached: the instance may go.
    Empty,
    /// Its termination time came first: the instance goes with what is left.
    Forced,
    /// This invocation's part is over; a later run goes on.
    Going,
}

/// `carpool.sh/disrupted:NoSchedule`.
pub fn disrupted_taint() -> Taint {
    Taint {
        key: DISRUPTED_TAINT.into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

/// The launch ids of a disruption's replacements start with this: the same on every
/// attempt, so a resumed disruption finds the launches of an attempt that crashed.
pub fn replacement_prefix(instance_id: &str) -> String {
    format!("disrupt-{instance_id}")
}

/// A launched replacement as the report names it: `id (type, zone, capacity type)`.
fn described(l: &crate::run::provision::report::Launched) -> String {
    format!(
        "{} ({}, {}, {})",
        l.instance_id,
        l.instance_type,
        l.zone,
        l.capacity_type.label()
    )
}

/// A pod no replacement was planned for, as the report names it: `pod: reason`.
fn unplanned(u: &crate::decide::Unschedulable) -> String {
    format!("{}: {}", u.pod, u.reason())
}

/// A lost condition on the disruption record is a take-over, not a failure.
fn lost(e: StoreError) -> InterruptionError {
    match e {
        StoreError::Conflict { key, .. } => InterruptionError::TakenOver { instance_id: key },
        other => other.into(),
    }
}

fn at(ms: EpochMillis) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Disrupter<'_, C, K, S, T> {
    /// The instance as EC2 describes it now; `None` when EC2 does not know it.
    pub(crate) async fn described(&self, id: &str) -> Result<Option<Instance>, InterruptionError> {
        match self.ports.cloud.get(id).await {
            Ok(i) => Ok(Some(i)),
            Err(CloudError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes the record for this invocation (unless another holds it), renewing the hold.
    async fn hold(&self, record: &DisruptionRecord) -> Result<Option<DisruptionRecord>, InterruptionError> {
        let now = self.ports.clock.now();
        if let Some(holder) = &record.held_by
            && holder != &self.owner
            && record.held_until > epoch_millis(now)
        {
            return Ok(None);
        }
        let mut next = record.clone();
        next.held_by = Some(self.owner.clone());
        next.held_until = epoch_millis(now + self.settings.hold);
        next.updated_at = epoch_millis(now);
        match self.ports.store.update_disruption(&next).await {
            Ok(r) => Ok(Some(r)),
            Err(StoreError::Conflict { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the record's progress, renewing the hold. A lost condition means another
    /// invocation took the disruption over (this one's hold lapsed) or finished it.
    async fn save(&self, record: &mut DisruptionRecord) -> Result<(), InterruptionError> {
        let now = self.ports.clock.now();
        record.held_until = epoch_millis(now + self.settings.hold);
        record.updated_at = epoch_millis(now);
        *record = self.ports.store.update_disruption(record).await.map_err(lost)?;
        Ok(())
    }

    /// Advances a disruption as far as it goes by `until`; see the module doc. A
    /// disruption another invocation took over or finished meanwhile ends this one's work
    /// on it, without error.
    pub(crate) async fn advance(
        &self,
        region: &RegionCatalog<'_>,
        record: DisruptionRecord,
        known: Option<Instance>,
        event_time: Option<EpochMillis>,
        until: SystemTime,
        report: EventReport,
    ) -> Result<EventReport, InterruptionError> {
        let mut fallback = report.clone();
        match self
            .advance_held(region, record, known, event_time, until, report)
            .await
        {
            Err(InterruptionError::TakenOver { instance_id }) => {
                tracing::info!(instance_id = %instance_id, "another invocation took the disruption over, or finished it");
                fallback.outcome = Outcome::HeldElsewhere {
                    holder: "another invocation".into(),
                };
                Ok(fallback)
            }
            other => other,
        }
    }

    async fn advance_held(
        &self,
        region: &RegionCatalog<'_>,
        record: DisruptionRecord,
        known: Option<Instance>,
        event_time: Option<EpochMillis>,
        until: SystemTime,
        mut report: EventReport,
    ) -> Result<EventReport, InterruptionError> {
        let start = self.ports.clock.now();
        let event_at = at(event_time.unwrap_or(record.started_at));
        report.node = Some(record.node.clone());
        report.replacements.clone_from(&record.replacements);
        let Some(mut record) = self.hold(&record).await? else {
            report.outcome = Outcome::HeldElsewhere {
                holder: record.held_by.clone().unwrap_or_default(),
            };
            return Ok(report);
        };
        // The event's handling read the instance a moment ago; a sweep reads it now.
        let instance = match known {
            Some(i) => Some(i),
            None => self.described(&record.instance_id).await?,
        };
        // Gone (or stopped): clean up. An instance shutting down is still drained, for as
        // long as it lasts: its pods get their eviction and grace period.
        if instance
            .as_ref()
            .is_none_or(|i| matches!(i.state, InstanceState::Terminated | InstanceState::Stopped))
        {
            self.cleanup(&record.instance_id, Some(&record.node)).await?;
            report.outcome = Outcome::CleanedUp;
            report.elapsed_ms = since_ms(start, self.ports.clock.now());
            return Ok(report);
        }
        let spot = instance.as_ref().is_some_and(|i| i.capacity_type == CapacityType::Spot);

        // Taint (again: idempotent, and a resumed record may not have got that far).
        if record.step < DisruptionStep::Terminated {
            match self.ports.cluster.taint(&record.node, &disrupted_taint()).await {
                Ok(()) => {
                    if record.step == DisruptionStep::Tainted {
                        report.event_to_taint_ms = Some(since_ms(event_at, self.ports.clock.now()));
                    }
                }
                Err(ClusterError::NotFound { .. }) => {
                    tracing::info!(node = %record.node, "the Node is gone: nothing to drain");
                    record.step = record.step.max(DisruptionStep::Draining);
                }
                Err(e) => return Err(e.into()),
            }
        }

        if record.step < DisruptionStep::ReplacementLaunched {
            self.replace(region, &mut record, spot, &mut report).await?;
            report.event_to_replacement_ms = Some(since_ms(event_at, self.ports.clock.now()));
            record.step = DisruptionStep::ReplacementLaunched;
            self.save(&mut record).await?;
        }
        report.replacements.clone_from(&record.replacements);

        if record.wait_for_replacement && record.step < DisruptionStep::ReplacementReady {
            if !self.replacements_ready(&record).await? {
                self.release(&mut record).await?;
                report.outcome = Outcome::WaitingForReplacement;
                report.elapsed_ms = since_ms(start, self.ports.clock.now());
                return Ok(report);
            }
            record.step = DisruptionStep::ReplacementReady;
            self.save(&mut record).await?;
        }

        if record.step < DisruptionStep::Terminated {
            if record.step < DisruptionStep::Draining {
                self.exclude_from_balancers(&record.node).await?;
                record.step = DisruptionStep::Draining;
                self.save(&mut record).await?;
            }
            let exit = self.drain(&mut record, event_at, until, &mut report).await?;
            let deadline_passed = epoch_millis(self.ports.clock.now()) >= record.drain_deadline;
            if exit == Exit::Going && !(record.hard_deadline && deadline_passed) {
                self.release(&mut record).await?;
                report.outcome = Outcome::Draining;
                report.elapsed_ms = since_ms(start, self.ports.clock.now());
                return Ok(report);
            }
            if exit == Exit::Empty {
                report.event_to_empty_ms = Some(since_ms(event_at, self.ports.clock.now()));
            }
            if self.settings.provision.dry_run {
                tracing::info!(instance_id = %record.instance_id, "dry run: would terminate");
            } else {
                match self.ports.cloud.terminate(&record.instance_id).await {
                    Ok(()) | Err(CloudError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            record.step = DisruptionStep::Terminated;
            self.save(&mut record).await?;
        }

        // Terminated: once the instance is gone, the Node and the records go too.
        let gone = self.described(&record.instance_id).await?.is_none_or(|i| i.is_gone());
        if gone {
            self.cleanup(&record.instance_id, Some(&record.node)).await?;
            report.outcome = Outcome::CleanedUp;
        } else {
            self.release(&mut record).await?;
            report.outcome = Outcome::Terminating;
        }
        report.elapsed_ms = since_ms(start, self.ports.clock.now());
        Ok(report)
    }

    /// Labels the node [`EXCLUDE_BALANCERS`]`=carpool` before its drain, so load
    /// balancers stop sending it traffic before it goes (Karpenter's `Terminator.Taint`).
    /// A Node already gone is nothing to do.
    async fn exclude_from_balancers(&self, node: &str) -> Result<(), InterruptionError> {
        if self.settings.provision.dry_run {
            return Ok(());
        }
        let labels = crate::ports::MetadataPatch::from([(
            EXCLUDE_BALANCERS.to_string(),
            Some(EXCLUDE_BALANCERS_VALUE.to_string()),
        )]);
        match self
            .ports
            .cluster
            .patch_labels_annotations(node, &labels, &crate::ports::MetadataPatch::new())
            .await
        {
            Ok(()) | Err(ClusterError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Gives the record's hold up, so the next invocation need not wait for it to lapse.
    async fn release(&self, record: &mut DisruptionRecord) -> Result<(), InterruptionError> {
        record.held_by = None;
        record.held_until = 0;
        record.updated_at = epoch_millis(self.ports.clock.now());
        *record = self.ports.store.update_disruption(record).await.map_err(lost)?;
        Ok(())
    }

    /// Launches the replacement, unless an earlier attempt did (its launch records carry
    /// the disruption's prefix: they are adopted, and nothing is launched twice).
    async fn replace(
        &self,
        region: &RegionCatalog<'_>,
        record: &mut DisruptionRecord,
        spot: bool,
        report: &mut EventReport,
    ) -> Result<(), InterruptionError> {
        if let Some(burst) = record.burst.clone()
            && self.replace_in_burst(region, record, &burst, spot, report).await?
        {
            return Ok(());
        }
        let prefix = replacement_prefix(&record.instance_id);
        let earlier = self.launches_under(&prefix).await?;
        if !earlier.is_empty() {
            tracing::info!(instance_id = %record.instance_id, launches = ?earlier, "replacement launched by an earlier attempt");
            record.replacements = earlier;
            return Ok(());
        }
        let provisioner = Provisioner::new(
            self.ports.cloud,
            self.ports.cluster,
            self.ports.store,
            self.ports.clock,
            self.settings.provision.clone(),
            &prefix,
        )
        .with_shared_snapshot(self.shared_snapshot);
        let replacement = provisioner
            .replace_node(region, &record.node, &record.instance_id, spot)
            .await
            .map_err(InterruptionError::Replace)?;
        record.replacements.clone_from(&replacement.launch_ids);
        report.replacement_instances = replacement.launched.iter().map(described).collect();
        report.replacement_unschedulable = replacement.unschedulable.iter().map(unplanned).collect();
        for f in &replacement.failures {
            tracing::warn!(instance_id = %record.instance_id, nodepool = %f.nodepool, error = %f.error,
                "a replacement launch failed: its pods are evicted all the same, and provisioned for once pending");
        }
        Ok(())
    }

    /// The ids of the launches made under `prefix` (`<prefix>-<n>`).
    async fn launches_under(&self, prefix: &str) -> Result<Vec<String>, InterruptionError> {
        let prefix = format!("{prefix}-");
        Ok(self
            .ports
            .store
            .list_launches()
            .await?
            .into_iter()
            .filter(|l| l.id.starts_with(&prefix))
            .map(|l| l.id)
            .collect())
    }

    /// The replacement of a record of a burst: the burst's launches, adopted from the store
    /// when another record or invocation made them, or planned and launched now for the
    /// whole burst by the first record of this invocation to need them. `false` when the
    /// burst launched nothing and is not this invocation's: the record plans its own node.
    async fn replace_in_burst(
        &self,
        region: &RegionCatalog<'_>,
        record: &mut DisruptionRecord,
        burst: &str,
        spot: bool,
        report: &mut EventReport,
    ) -> Result<bool, InterruptionError> {
        let prefix = replacement_prefix(burst);
        let earlier = self.launches_under(&prefix).await?;
        if !earlier.is_empty() {
            record.replacements = earlier;
            return Ok(true);
        }
        let Some(shared) = self.shared_snapshot else {
            return Ok(false);
        };
        let Some(instances) = shared.burst_instances(burst) else {
            return Ok(false);
        };
        let provisioner = Provisioner::new(
            self.ports.cloud,
            self.ports.cluster,
            self.ports.store,
            self.ports.clock,
            self.settings.provision.clone(),
            &prefix,
        )
        .with_shared_snapshot(Some(shared));
        let plan = || async {
            let r = provisioner.replace_burst(region, instances, burst, spot).await?;
            Ok::<_, crate::run::provision::ProvisionError>(BurstLaunch {
                pods: r.pods.len(),
                launch_ids: r.launch_ids,
                instances: r.launched.iter().map(described).collect(),
                unschedulable: r.unschedulable.iter().map(unplanned).collect(),
            })
        };
        let Some(planned) = shared.burst_replacement(burst, plan).await else {
            return Ok(false);
        };
        let launch = planned.map_err(InterruptionError::Replace)?;
        tracing::info!(instance_id = %record.instance_id, burst, instances = instances.len(),
            pods = launch.pods, launches = ?launch.launch_ids, "replaced with its burst");
        record.replacements.clone_from(&launch.launch_ids);
        report.replacement_instances.clone_from(&launch.instances);
        report.replacement_unschedulable.clone_from(&launch.unschedulable);
        Ok(true)
    }

    /// Whether every replacement's node is registered and Ready.
    async fn replacements_ready(&self, record: &DisruptionRecord) -> Result<bool, InterruptionError> {
        let launches = self.ports.store.list_launches().await?;
        let instances: Vec<String> = launches
            .iter()
            .filter(|l| record.replacements.contains(&l.id) && !matches!(l.state, LaunchState::Failed { .. }))
            .filter_map(|l| l.instance_id.clone())
            .collect();
        let nodes = self.ports.cluster.nodes().await?;
        Ok(instances.iter().all(|id| {
            nodes.iter().any(|n| {
                crate::model::node::node_instance_id(n) == Some(id.as_str())
                    && n.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
        }))
    }

    /// Drains the node, then waits for it to empty, as Karpenter's termination
    /// controller does (`Controller.finalize` in kubernetes-sigs/karpenter
    /// `pkg/controllers/node/termination/controller.go`: `awaitDrain`, then
    /// `awaitVolumeDetachment`, then the instance): every pass evicts what it may and
    /// says what the node waits for; the record reaches [`DisruptionStep::Drained`] once
    /// every eviction was accepted, and the node is empty once its evicted pods are gone
    /// (each within its grace period) and its volumes are detached.
    ///
    /// Ends with [`Exit::Empty`]; [`Exit::Forced`] at the node's termination time (a hard
    /// deadline, or the start plus the NodePool's `terminationGracePeriod`), whatever is
    /// left; or [`Exit::Going`] when this invocation's part ends first (`until`, a hard
    /// deadline's drain, or the drain deadline's length for a soft one: later runs go on).
    /// Progress is saved after every pass that evicted.
    async fn drain(
        &self,
        record: &mut DisruptionRecord,
        event_at: SystemTime,
        until: SystemTime,
        report: &mut EventReport,
    ) -> Result<Exit, InterruptionError> {
        let start = self.ports.clock.now();
        let deadline = at(record.drain_deadline);
        let ceiling = if record.hard_deadline {
            Some(deadline)
        } else {
            record.terminate_by.map(at)
        };
        // An interruption with a hard deadline evicts do-not-disrupt pods too: the
        // instance goes whatever they say, and an eviction gives them their grace period.
        let rules = DrainRules {
            voluntary: !record.hard_deadline,
            surge_pool: self.pool_surges(record).await,
        };
        let mut wait = self.settings.retry_initial;
        let exit = loop {
            let now = self.ports.clock.now();
            let pass = drain_pass(self.ports.cluster, &record.node, now, deadline, &record.evicted, rules).await?;
            report.evicted += pass.evicted.len();
            report.blocked = pass.blocked.iter().map(ToString::to_string).collect();
            let progressed = !pass.evicted.is_empty();
            if progressed {
                record.evicted.extend(pass.evicted.iter().map(|p| p.pod.clone()));
            }
            let newly_drained = pass.drained && record.step < DisruptionStep::Drained;
            if newly_drained {
                record.step = DisruptionStep::Drained;
                report.event_to_drained_ms = Some(since_ms(event_at, now));
            }
            let now = self.ports.clock.now();
            if progressed || newly_drained || epoch_millis(now) + 5_000 >= record.held_until {
                self.save(record).await?;
            }
            let volumes = if pass.is_empty() {
                self.attached_volumes(&record.node).await?
            } else {
                Vec::new()
            };
            report.waiting_for = pass
                .waiting
                .iter()
                .map(PodRef::key)
                .chain(volumes.iter().map(|v| format!("pv/{v}")))
                .collect();
            if pass.is_empty() && volumes.is_empty() {
                break Exit::Empty;
            }
            if let Some(ceiling) = ceiling
                && now >= ceiling
            {
                tracing::warn!(node = %record.node, instance_id = %record.instance_id, waiting_for = ?report.waiting_for,
                    blocked = ?report.blocked, "the node's termination time has come: it goes with what is left");
                break Exit::Forced;
            }
            // A hard deadline ends the drain; a soft one (there is time) ends this
            // invocation's part after the drain deadline's length, and the sweep goes on.
            let mut stop = if record.hard_deadline {
                deadline.min(until)
            } else {
                until.min(start + self.settings.drain_deadline)
            };
            if let Some(ceiling) = ceiling {
                stop = stop.min(ceiling);
            }
            if now >= stop {
                if !(record.hard_deadline && now >= deadline) {
                    break Exit::Going;
                }
                break Exit::Forced;
            }
            if progressed && pass.blocked.is_empty() && !pass.drained {
                // A tier was evicted whole: the next one at once.
                continue;
            }
            wait = if progressed {
                self.settings.retry_initial
            } else {
                (wait * 2).min(RETRY_MAX)
            };
            let left = stop.duration_since(now).unwrap_or_default();
            self.ports.clock.sleep(wait.min(left)).await;
        };
        if exit == Exit::Going {
            tracing::warn!(node = %record.node, blocked = ?report.blocked, waiting_for = ?report.waiting_for,
                "drain not finished by this invocation");
        }
        report.drained = record.step >= DisruptionStep::Drained;
        report.drain_seconds = self
            .ports
            .clock
            .now()
            .duration_since(start)
            .unwrap_or_default()
            .as_secs_f64();
        Ok(exit)
    }

    /// Whether the record's NodePool opts its workloads in to a surge before eviction
    /// (read once per drain; an unreadable pool is logged and does not).
    async fn pool_surges(&self, record: &DisruptionRecord) -> bool {
        let Some(pool) = record.nodepool.as_deref() else {
            return false;
        };
        match self.ports.cluster.nodepools().await {
            Ok(pools) => pools
                .valid
                .iter()
                .any(|p| p.metadata.name.as_deref() == Some(pool) && pool_opted_in(p)),
            Err(e) => {
                tracing::warn!(node = %record.node, nodepool = pool, error = %crate::error_chain::Chain(&e),
                    "could not read the NodePool's surge annotation; pods opt in by their own");
                false
            }
        }
    }

    /// The PersistentVolumes still attached to `node` that hold its termination: every
    /// VolumeAttachment but those of volumes that pods staying on the node use (DaemonSet
    /// and mirror pods, and pods that tolerate the disrupted taint: they end with the
    /// node), as Karpenter's `filterVolumeAttachments` leaves out the non-drainable pods'.
    async fn attached_volumes(&self, node: &str) -> Result<Vec<String>, InterruptionError> {
        let attached = self.ports.cluster.attached_volumes(node).await?;
        if attached.is_empty() {
            return Ok(attached);
        }
        let pods = self.ports.cluster.pods_on_node(node).await?;
        let staying_claims: Vec<(String, String)> = pods
            .iter()
            .filter(|p| {
                matches!(
                    stay_reason(p, &[], DrainRules::default()),
                    Some(StayReason::DaemonSet | StayReason::Mirror | StayReason::ToleratesDisrupted)
                )
            })
            .flat_map(|p| {
                let ns = p.metadata.namespace.clone().unwrap_or_else(|| "default".into());
                p.spec
                    .iter()
                    .flat_map(|s| s.volumes.iter().flatten())
                    .filter_map(|v| v.persistent_volume_claim.as_ref().map(|c| c.claim_name.clone()))
                    .map(move |claim| (ns.clone(), claim))
                    .collect::<Vec<_>>()
            })
            .collect();
        if staying_claims.is_empty() {
            return Ok(attached);
        }
        let claims = self.ports.cluster.persistent_volume_claims().await?;
        let staying: Vec<String> = claims
            .iter()
            .filter(|c| {
                staying_claims.iter().any(|(ns, name)| {
                    c.metadata.namespace.as_deref() == Some(ns.as_str())
                        && c.metadata.name.as_deref() == Some(name.as_str())
                })
            })
            .filter_map(|c| c.spec.as_ref()?.volume_name.clone())
            .collect();
        Ok(attached.into_iter().filter(|pv| !staying.contains(pv)).collect())
    }

    /// The instance is gone: deletes its Node (only a Carpool node), its node and launch
    /// records, and its disruption record. Idempotent.
    pub(crate) async fn cleanup(&self, instance_id: &str, node: Option<&str>) -> Result<(), InterruptionError> {
        if let Some(node) = node {
            // Only a Carpool node, only the Node of this instance (its providerID), and only
            // the object read here (its UID): a Node re-created under the same name, or
            // another instance's, is left alone.
            let read = self.ports.cluster.nodes().await?.into_iter().find(|n| {
                n.metadata.name.as_deref() == Some(node)
                    && n.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(crate::model::well_known::CARPOOL_MANAGED))
                        .is_some_and(|v| v == "true")
                    && crate::model::node::node_instance_id(n).is_some_and(|id| id == instance_id)
            });
            if let Some(read) = read
                && !self.settings.provision.dry_run
            {
                let uid = read.metadata.uid.unwrap_or_default();
                match self.ports.cluster.delete_node(node, &uid).await {
                    // Its finalizer goes last: the Node goes with it.
                    Ok(()) => self.ports.cluster.remove_finalizer(node).await?,
                    Err(crate::ports::ClusterError::Conflict(why)) => {
                        tracing::warn!(node = %node, instance_id = %instance_id, reason = %why,
                            "the Node was re-created since it was read: left alone");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if self.settings.provision.dry_run {
            return Ok(());
        }
        self.ports.store.delete_node(instance_id).await?;
        for launch in self.ports.store.list_launches().await? {
            if launch.instance_id.as_deref() == Some(instance_id) {
                self.ports.store.delete_launch(&launch.id).await?;
            }
        }
        self.ports.store.delete_disruption(instance_id).await?;
        tracing::info!(
            instance_id,
            node = node.unwrap_or(""),
            "instance gone: Node and records deleted"
        );
        Ok(())
    }
}
