//! The interruption function's run: an event about an instance becomes a disruption that
//! survives crashes.
//!
//! For each instance an event names ([`Disrupter::handle`]):
//!
//! 1. An event handled before (its `EVENT#` record) does nothing twice.
//! 2. The instance's **actual** state is read from EC2: state-change events arrive out of
//!    order, so a `stopping` event about an instance running again is stale, and one
//!    about an instance already gone is a clean-up. An instance this deployment did not
//!    launch (no launch-id tag, or another deployment's tag) is left alone.
//! 3. A spot interruption marks its offering (type, zone, spot) unavailable, as a
//!    capacity error would, so nothing is launched into it again for 3 minutes.
//! 4. A `DISRUPT#<instance>` record is created (a conditional write: a second delivery,
//!    or a second event about the same instance, joins the first), then the event is
//!    recorded, then the disruption is [advanced](advance).
//!
//! A disruption advances step by step, each step idempotent, the record written after
//! each: taint `carpool.sh/disrupted:NoSchedule`; launch the replacement through the
//! provisioner's path, its room reserved for the node's pods
//! ([`crate::run::launch::replace`]); for a rebalance recommendation or a scheduled
//! change, wait until it is Ready; drain by eviction ([`crate::run::drain`]); terminate
//! the instance; once it is gone, delete the Node and the records. An invocation holds
//! the record while it works (`held_by`, renewed every pass); a crashed or timed-out
//! holder's record is taken over once its hold lapses, by the next event or by the
//! scheduled [sweep](Disrupter::sweep), which resumes every disruption in progress.
//!
//! Deadlines ([`crate::decide::interruption::deadline`]): a spot interruption, and an
//! instance stopping or shutting down, go away whatever Carpool does, so the drain ends
//! [`InterruptionSettings::drain_deadline`] (90 s, inside the 2-minute notice) after the
//! event **arrived** (this handling's start, not the event's `time`, which the sender
//! writes) and the instance is terminated then, drained or not. A spot warning is
//! believed only about an instance EC2 says is spot; one about an on-demand instance is
//! ignored with the reason. A rebalance recommendation and a scheduled change leave time:
//! the drain retries blocked pods in later invocations, PDBs holding, and the instance is
//! terminated only once drained.
//!
//! The scheduled sweep also starts the disruption of each node of a Capacity Block for ML
//! that is expiring, as a spot warning's with the block's reclaim as the hard deadline
//! ([`crate::decide::interruption::capacity_block`]).

pub mod metrics;

use std::time::SystemTime;

use crate::catalog::RegionCatalog;
use crate::decide::interruption::{Action, Cause, InstanceStateName, InterruptionEvent, capacity_block, drain_terms};
use crate::model::node::instance_id_from_provider_id;
use crate::model::well_known::REBALANCE_ANNOTATION;
use crate::model::{CapacityType, NodePool};
use crate::ports::{
    Cloud, Cluster, DisruptionRecord, DisruptionStep, Instance, InstanceState, StateStore, StoreError, Timer,
    UnavailableOffering, epoch_millis,
};
use crate::run::disruption::{Disrupter, EventReport, InterruptionError, Outcome, is_consolidation, since_ms};

/// The `EVENT#` key of an event about one instance: the event id, with the instance when
/// the event names several (a Health event).
fn event_key(event: &InterruptionEvent, instance: &str) -> String {
    if event.instance_ids.len() > 1 {
        format!("{}#{instance}", event.id)
    } else {
        event.id.clone()
    }
}

/// Why an instance is not this deployment's to disrupt, if it is not.
fn not_owned(instance: &Instance, deployment: &str) -> Option<String> {
    if instance.launch_id.is_empty() {
        return Some("it has no launch-id tag: Carpool did not launch it".into());
    }
    match instance.deployment.as_deref() {
        Some(d) if d == deployment => None,
        Some(d) => Some(format!("it belongs to deployment {d:?}")),
        None => Some("it has no deployment tag".into()),
    }
}

impl<'a, C: Cloud, K: Cluster, S: StateStore, T: Timer> Disrupter<'a, C, K, S, T> {
    /// Handles one event, working until `until` at most (the invocation's time less a
    /// margin): one report per instance it names (one for an event it ignores; those of
    /// the disruptions it resumed for a sweep). Each report is logged.
    pub async fn handle(
        &self,
        region: &RegionCatalog<'_>,
        event: &InterruptionEvent,
        until: SystemTime,
    ) -> Result<Vec<EventReport>, InterruptionError> {
        let reports = match &event.action {
            Action::Ignore { reason } => vec![EventReport::new(
                &event.id,
                event.kind,
                event.action_word(),
                None,
                Outcome::Ignored {
                    reason: reason.to_string(),
                },
            )],
            Action::Sweep => self.sweep(region, until).await?,
            _ => {
                let mut reports = Vec::new();
                for id in &event.instance_ids {
                    reports.push(self.instance(region, event, id, until).await?);
                }
                reports
            }
        };
        for r in &reports {
            r.log();
        }
        Ok(reports)
    }

    /// The disruptions to start for the Carpool nodes someone deleted (`kubectl delete
    /// node`): marked for deletion, held by Carpool's finalizer, and not being disrupted
    /// yet. Each is drained as a voluntary disruption (PDBs hold, the pods get their grace
    /// periods, up to the NodePool's `terminationGracePeriod`), then its instance is
    /// terminated and the finalizer removed, as Karpenter's termination controller does
    /// for a deleted Node (`Controller.finalize`). No replacement is launched: the evicted
    /// pods go pending, and the provisioner plans for them.
    async fn deleted_nodes(&self, disrupting: &[DisruptionRecord]) -> Result<Vec<DisruptionRecord>, InterruptionError> {
        let now = self.ports.clock.now();
        let mut started = Vec::new();
        for node in self.ports.cluster.nodes().await? {
            let Some(name) = node.metadata.name.clone() else {
                continue;
            };
            let finalized = node
                .metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == crate::model::well_known::TERMINATION_FINALIZER));
            if node.metadata.deletion_timestamp.is_none() || !finalized || disrupting.iter().any(|d| d.node == name) {
                continue;
            }
            let Some(instance_id) = crate::model::node::node_instance_id(&node).map(str::to_string) else {
                tracing::warn!(node = %name, "a deleted Node with Carpool's finalizer names no instance: its finalizer is removed");
                self.ports.cluster.remove_finalizer(&name).await?;
                continue;
            };
            let nodepool = node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::model::well_known::NODEPOOL))
                .cloned();
            let terminate_by = match &nodepool {
                Some(pool) => self
                    .termination_grace(pool)
                    .await?
                    .map(|tgp| crate::model::time::epoch_millis_after(now, tgp)),
                None => None,
            };
            let record = DisruptionRecord {
                instance_id: instance_id.clone(),
                node: name.clone(),
                reason: "node-deleted".into(),
                step: DisruptionStep::ReplacementLaunched,
                replacements: Vec::new(),
                started_at: epoch_millis(now),
                updated_at: epoch_millis(now),
                event_id: format!("node-deleted:{name}"),
                nodepool,
                drain_deadline: epoch_millis(now + self.settings.drain_deadline),
                terminate_by,
                hard_deadline: false,
                wait_for_replacement: false,
                burst: None,
                evicted: Vec::new(),
                held_by: None,
                held_until: 0,
                version: 0,
            };
            match self.ports.store.create_disruption(&record).await {
                Ok(r) => {
                    tracing::info!(node = %name, instance_id = %instance_id, "a Carpool node was deleted: draining it before its instance goes");
                    started.push(r);
                }
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(started)
    }

    /// The disruptions to start for the Carpool nodes of a Capacity Block that is expiring
    /// ([`crate::decide::interruption::capacity_block`]): each as a spot warning's
    /// (taint, replacement, drain), with the block's reclaim as its hard deadline. The
    /// blocks are looked up by id, as Karpenter's expiration controller lists them; when
    /// EC2 cannot be asked, none is started and the next sweep asks again.
    async fn expiring_capacity_blocks(
        &self,
        disrupting: &[DisruptionRecord],
    ) -> Result<Vec<DisruptionRecord>, InterruptionError> {
        let nodes = self.ports.cluster.nodes().await?;
        let blocks = capacity_block::blocks_in_use(&nodes);
        if blocks.is_empty() {
            return Ok(Vec::new());
        }
        let mut lookup = crate::model::EC2NodeClass::named("capacity-block-expiration");
        lookup.spec.capacity_reservation_selector_terms =
            blocks.iter().map(|id| serde_json::json!({"id": id})).collect();
        let reservations = match self.ports.cloud.capacity_reservations(&lookup).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %crate::error_chain::Chain(&e), blocks = ?blocks,
                    "Capacity Blocks not described: their expiry is checked again at the next sweep");
                return Ok(Vec::new());
            }
        };
        let now = self.ports.clock.now();
        let mut started = Vec::new();
        for e in capacity_block::expiring(&nodes, &reservations, epoch_millis(now)) {
            if disrupting
                .iter()
                .any(|d| d.node == e.node || d.instance_id == e.instance_id)
            {
                continue;
            }
            let nodepool = nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(e.node.as_str()))
                .and_then(|n| {
                    n.metadata
                        .labels
                        .as_ref()?
                        .get(crate::model::well_known::NODEPOOL)
                        .cloned()
                });
            let record = DisruptionRecord {
                instance_id: e.instance_id.clone(),
                node: e.node.clone(),
                reason: "capacity-block-expiring".into(),
                step: DisruptionStep::Tainted,
                replacements: Vec::new(),
                started_at: epoch_millis(now),
                updated_at: epoch_millis(now),
                event_id: format!("capacity-block-expiring:{}:{}", e.reservation, e.instance_id),
                nodepool,
                drain_deadline: e.deadline,
                terminate_by: None,
                hard_deadline: true,
                wait_for_replacement: false,
                burst: None,
                evicted: Vec::new(),
                held_by: None,
                held_until: 0,
                version: 0,
            };
            if self.settings.provision.dry_run {
                continue;
            }
            match self.ports.store.create_disruption(&record).await {
                Ok(r) => {
                    tracing::warn!(node = %e.node, instance_id = %e.instance_id, capacity_block = %e.reservation,
                        deadline = e.deadline, "Capacity Block expiring: draining its node before EC2 reclaims it");
                    started.push(r);
                }
                Err(StoreError::Conflict { .. }) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(started)
    }

    /// Resumes every disruption in progress (the scheduled sweep), until `until`.
    pub async fn sweep(
        &self,
        region: &RegionCatalog<'_>,
        until: SystemTime,
    ) -> Result<Vec<EventReport>, InterruptionError> {
        // A consolidation's disruptions are the consolidator's to advance (it rolls them
        // back when their replacement fails or their drain stalls).
        let records = self.ports.store.list_disruptions().await?;
        let mut reports = Vec::new();
        if self.settings.provision.dry_run {
            // A dry run starts no disruption; one a real run left is not advanced either.
            for record in records.iter().filter(|r| !is_consolidation(r)) {
                tracing::warn!(instance_id = %record.instance_id, node = ?record.node, step = ?record.step,
                    "dry run: would resume this disruption");
            }
            return Ok(reports);
        }
        // Hard deadlines (spot warnings, instances stopping) first, soonest first; then the
        // rest. All are advanced at once, and one's failure is that one's: it is logged,
        // and the next sweep (a minute later) takes it up again.
        let mut records: Vec<DisruptionRecord> = records.into_iter().filter(|r| !is_consolidation(r)).collect();
        records.extend(self.deleted_nodes(&records).await?);
        records.extend(self.expiring_capacity_blocks(&records).await?);
        records.sort_by_key(|r| (!r.hard_deadline, r.drain_deadline));
        let advanced = futures_util::future::join_all(records.into_iter().map(|record| {
            let instance_id = record.instance_id.clone();
            let report = EventReport::new(
                &record.event_id,
                crate::decide::interruption::EventKind::Scheduled,
                "sweep",
                Some(&record.instance_id),
                Outcome::Draining,
            );
            async move {
                (
                    instance_id,
                    self.advance(region, record, None, None, until, report).await,
                )
            }
        }))
        .await;
        let mut failed = 0usize;
        for (instance_id, outcome) in advanced {
            match outcome {
                Ok(report) => reports.push(report),
                Err(e) => {
                    failed += 1;
                    tracing::error!(instance_id = %instance_id, error = %crate::error_chain::Chain(&e),
                        "sweep: advancing this disruption failed; the others went on, and the next sweep retries it");
                }
            }
        }
        if failed > 0 && reports.is_empty() {
            return Err(InterruptionError::SweepFailed { failed });
        }
        Ok(reports)
    }

    async fn instance(
        &self,
        region: &RegionCatalog<'_>,
        event: &InterruptionEvent,
        id: &str,
        until: SystemTime,
    ) -> Result<EventReport, InterruptionError> {
        let start = self.ports.clock.now();
        let key = event_key(event, id);
        let mut report = EventReport::new(&event.id, event.kind, event.action_word(), Some(id), Outcome::Duplicate);
        if self.ports.store.event_recorded(&key, start).await? {
            tracing::info!(event_id = %event.id, instance_id = %id, "event handled before: nothing done twice");
            return Ok(report);
        }
        let instance = self.described(id).await?;
        let existing = self
            .ports
            .store
            .list_disruptions()
            .await?
            .into_iter()
            .find(|d| d.instance_id == id);
        let node = self.node_of(id).await?;
        report.node.clone_from(&node);

        // Gone, or going: a clean-up, whatever the event said (the actual state wins).
        let gone = instance
            .as_ref()
            .is_none_or(|i| matches!(i.state, InstanceState::Terminated | InstanceState::Stopped));
        if let Action::Cleanup { .. } = event.action
            && instance
                .as_ref()
                .is_some_and(|i| matches!(i.state, InstanceState::Running | InstanceState::Pending))
        {
            report.outcome = Outcome::Ignored {
                reason: "the instance is running again: the event is stale".into(),
            };
            self.remember(&key, start).await?;
            return Ok(report);
        }
        if let Some(i) = &instance
            && let Some(reason) = not_owned(i, &self.settings.provision.deployment)
        {
            tracing::info!(event_id = %event.id, instance_id = %id, reason = %reason, "not Carpool's instance: ignored");
            report.outcome = Outcome::NotOwned { reason };
            self.remember(&key, start).await?;
            return Ok(report);
        }
        if instance.is_none() && existing.is_none() && !self.has_records(id).await? {
            report.outcome = Outcome::NotOwned {
                reason: "EC2 does not know it and Carpool has no record of it".into(),
            };
            self.remember(&key, start).await?;
            return Ok(report);
        }
        if matches!(event.action, Action::Cleanup { .. }) || gone {
            if self.settings.provision.dry_run {
                tracing::warn!(event_id = %event.id, instance_id = %id, node = ?node,
                    "dry run: would clean up the instance's Node and records");
                report.outcome = Outcome::DryRun {
                    would: "clean up the instance's Node and records".into(),
                };
                return Ok(report);
            }
            self.cleanup(id, node.as_deref()).await?;
            self.remember(&key, start).await?;
            report.outcome = Outcome::CleanedUp;
            report.elapsed_ms = since_ms(start, self.ports.clock.now());
            return Ok(report);
        }
        let Some(instance) = instance else {
            return Ok(report);
        };
        if let Action::Disrupt {
            cause: Cause::StateChange(InstanceStateName::Stopping | InstanceStateName::ShuttingDown),
        } = event.action
            && matches!(instance.state, InstanceState::Running | InstanceState::Pending)
        {
            report.outcome = Outcome::Ignored {
                reason: "the instance is running: the state change is stale".into(),
            };
            self.remember(&key, start).await?;
            return Ok(report);
        }
        // The terms are decided from what EC2 says of the instance and from when the event
        // arrived (now), not from the event's claims: a spot warning about an on-demand
        // instance is not genuine, and a `time` in the past must not shorten the drain.
        let terms = match drain_terms(
            &event.action,
            id,
            instance.capacity_type,
            epoch_millis(start),
            self.settings.drain_deadline,
        ) {
            Ok(terms) => terms,
            Err(reason) => {
                tracing::warn!(event_id = %event.id, instance_id = %id, reason = %reason, "event not believed: ignored");
                report.outcome = Outcome::Ignored {
                    reason: reason.to_string(),
                };
                self.remember(&key, start).await?;
                return Ok(report);
            }
        };
        if self.settings.provision.dry_run {
            // Decided, logged and reported; nothing written, tainted, evicted, launched
            // or terminated.
            let would = format!(
                "{} node {} of instance {id}: taint it, launch a replacement, drain it by eviction{}, terminate it",
                reason_of(&event.action),
                node.as_deref().unwrap_or("(none yet)"),
                if terms.hard {
                    format!(" until {} (hard deadline)", terms.deadline)
                } else {
                    " once the replacement is Ready".to_string()
                }
            );
            tracing::warn!(event_id = %event.id, instance_id = %id, would = %would, "dry run: would disrupt");
            report.outcome = Outcome::DryRun { would };
            return Ok(report);
        }
        if matches!(
            event.action,
            Action::Disrupt {
                cause: Cause::SpotInterruption
            }
        ) {
            let offering = UnavailableOffering {
                instance_type: instance.instance_type.clone(),
                zone: instance.zone.clone(),
                capacity_type: CapacityType::Spot,
                until: epoch_millis(start + crate::run::launch::UNAVAILABLE_FOR),
                reclaimed: false,
            };
            self.ports.store.mark_unavailable(&offering).await?;
            // And for longer, for the consolidator's moves back to spot and for
            // replacements: one interruption does not cause two moves.
            let reclaimed = UnavailableOffering {
                until: epoch_millis(start + RECLAIMED_FOR),
                reclaimed: true,
                ..offering
            };
            self.ports.store.mark_unavailable(&reclaimed).await?;
        }
        let Some(node) = node else {
            tracing::info!(event_id = %event.id, instance_id = %id, "the instance has no Node yet: nothing to drain");
            report.outcome = Outcome::NoNode;
            self.remember(&key, start).await?;
            return Ok(report);
        };
        if matches!(event.action, Action::Rebalance) && !self.rebalance_opted_in(&instance.nodepool).await? {
            report.outcome = Outcome::Ignored {
                reason: format!(
                    "NodePool {:?} does not opt in to rebalance recommendations (annotation {REBALANCE_ANNOTATION}: \"true\")",
                    instance.nodepool
                ),
            };
            self.remember(&key, start).await?;
            return Ok(report);
        }
        let record = match existing {
            // A node already being disrupted (a consolidation, a rebalance, a scheduled
            // change) gets a spot warning: the notice's hard deadline wins, the drain stops
            // waiting for the replacement, and the record is this event's from now on.
            Some(mut record) if escalates(&record, &terms) => {
                record.hard_deadline = true;
                record.wait_for_replacement = false;
                record.drain_deadline = record.drain_deadline.min(terms.deadline);
                tracing::warn!(event_id = %event.id, instance_id = %id, from = %record.reason,
                    "a disruption in progress escalated to the notice's deadline");
                record.event_id.clone_from(&event.id);
                record.reason = reason_of(&event.action).to_string();
                match self.ports.store.update_disruption(&record).await {
                    Ok(r) => r,
                    Err(StoreError::Conflict { .. }) => return Ok(report),
                    Err(e) => return Err(e.into()),
                }
            }
            Some(record) => record,
            None => {
                let record = DisruptionRecord {
                    instance_id: id.to_string(),
                    node: node.clone(),
                    reason: reason_of(&event.action).to_string(),
                    step: DisruptionStep::Tainted,
                    replacements: Vec::new(),
                    started_at: epoch_millis(start),
                    updated_at: epoch_millis(start),
                    event_id: event.id.clone(),
                    nodepool: Some(instance.nodepool.clone()).filter(|p| !p.is_empty()),
                    drain_deadline: terms.deadline,
                    hard_deadline: terms.hard,
                    wait_for_replacement: terms.wait_for_replacement,
                    terminate_by: if terms.hard {
                        None
                    } else {
                        self.termination_grace(&instance.nodepool)
                            .await?
                            .map(|tgp| crate::model::time::epoch_millis_after(start, tgp))
                    },
                    // A spot warning of a burst: replaced together with the others.
                    burst: if terms.hard {
                        self.shared_snapshot.and_then(|s| s.burst_of(id)).map(str::to_string)
                    } else {
                        None
                    },
                    evicted: Vec::new(),
                    held_by: None,
                    held_until: 0,
                    version: 0,
                };
                match self.ports.store.create_disruption(&record).await {
                    Ok(r) => r,
                    Err(StoreError::Conflict { .. }) => {
                        // Another delivery created it a moment ago: join it.
                        match self
                            .ports
                            .store
                            .list_disruptions()
                            .await?
                            .into_iter()
                            .find(|d| d.instance_id == id)
                        {
                            Some(r) => r,
                            None => return Ok(report),
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        self.remember(&key, start).await?;
        self.advance(region, record, Some(instance), event.time, until, report)
            .await
    }

    /// Remembers that the event was handled for an instance (its `EVENT#` record), so a
    /// redelivery does nothing twice; in dry run, nothing is written.
    async fn remember(&self, key: &str, at: SystemTime) -> Result<(), InterruptionError> {
        if !self.settings.provision.dry_run {
            self.ports.store.record_event(key, at, self.settings.event_ttl).await?;
        }
        Ok(())
    }

    /// The Node of an instance, by its providerID.
    async fn node_of(&self, instance_id: &str) -> Result<Option<String>, InterruptionError> {
        Ok(self.ports.cluster.nodes().await?.into_iter().find_map(|n| {
            let id = n
                .spec
                .as_ref()?
                .provider_id
                .as_deref()
                .and_then(instance_id_from_provider_id)?;
            (id == instance_id).then(|| n.metadata.name.clone()).flatten()
        }))
    }

    /// Whether Carpool has a node or launch record of the instance.
    async fn has_records(&self, instance_id: &str) -> Result<bool, InterruptionError> {
        let node = self
            .ports
            .store
            .list_nodes()
            .await?
            .iter()
            .any(|n| n.instance_id == instance_id);
        let launch = self
            .ports
            .store
            .list_launches()
            .await?
            .iter()
            .any(|l| l.instance_id.as_deref() == Some(instance_id));
        Ok(node || launch)
    }

    /// The NodePool's `terminationGracePeriod`, when it sets one.
    async fn termination_grace(&self, nodepool: &str) -> Result<Option<std::time::Duration>, InterruptionError> {
        let pools = self.ports.cluster.nodepools().await?;
        Ok(pools
            .valid
            .iter()
            .find(|p| p.name() == nodepool)
            .and_then(NodePool::termination_grace_period))
    }

    async fn rebalance_opted_in(&self, nodepool: &str) -> Result<bool, InterruptionError> {
        let pools = self.ports.cluster.nodepools().await?;
        Ok(pools.valid.iter().any(|p| {
            p.name() == nodepool
                && p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(REBALANCE_ANNOTATION))
                    .is_some_and(|v| v == "true")
        }))
    }
}

/// Whether an event with `terms` escalates the disruption `record` already in progress:
/// a hard deadline (a spot warning) over a soft one, or an earlier hard one.
fn escalates(record: &DisruptionRecord, terms: &crate::decide::interruption::deadline::DrainTerms) -> bool {
    terms.hard && (!record.hard_deadline || terms.deadline < record.drain_deadline)
}

/// How long an offering a spot interruption reclaimed is avoided by voluntary
/// disruption and by interruption replacements (launches of new pods wait only out the
/// capacity record, [`crate::run::launch::UNAVAILABLE_FOR`], as Karpenter's
/// unavailable-offerings cache does).
pub const RECLAIMED_FOR: std::time::Duration = std::time::Duration::from_secs(3600);

/// The disruption's reason, as its record keeps it.
fn reason_of(action: &Action) -> &'static str {
    match action {
        Action::Disrupt {
            cause: Cause::SpotInterruption,
        } => "spot-interruption",
        Action::Disrupt {
            cause: Cause::ScheduledChange,
        } => "scheduled-change",
        Action::Disrupt {
            cause: Cause::StateChange(_),
        } => "state-change",
        Action::Rebalance => "rebalance-recommendation",
        _ => "interruption",
    }
}
