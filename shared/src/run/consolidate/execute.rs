//! Carrying a consolidation out: start it, resume it, roll it back.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use super::report::{ConsolidationReport, RolledBack};
use super::{ConsolidationError, Consolidator};
use crate::catalog::RegionCatalog;
use crate::decide::disruption::DisruptionCommand;
use crate::decide::disruption::replacement::moving_pods;
use crate::decide::interruption::EventKind;
use crate::decide::provisioning::reservation::reservation_for;
use crate::model::NodePool;
use crate::model::node::instance_id_from_provider_id;
use crate::model::time::kube_time;
use crate::model::well_known as wk;
use crate::ports::{
    Cloud, Cluster, ClusterError, DisruptionRecord, DisruptionStep, LaunchState, MetadataPatch, StateStore, StoreError,
    Timer, epoch_millis,
};
use crate::run::disruption::advance::{disrupted_taint, replacement_prefix};
use crate::run::disruption::{Disrupter, EventReport, InterruptionSettings, Outcome};
use crate::run::disruption::{GROUP_PREFIX, REASON_PREFIX, is_consolidation};
use crate::run::launch::LaunchOutcome;
use crate::snapshot::Snapshot;

/// How long a node whose drain stalled and was rolled back is left out of voluntary
/// disruption (annotation [`wk::STALLED_UNTIL`]).
pub const STALL_COOLDOWN: Duration = Duration::from_secs(30 * 60);

/// What the disruptions in progress are, after a run advanced them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct InFlight {
    /// Some disruption is still going.
    pub any: bool,
    /// A consolidation (a method that moves pods to save money, not drift, expiration or
    /// repair) is still going: no other starts until it is done, since its moves are not
    /// in the cluster yet.
    pub consolidating: bool,
}

/// What advancing one group did.
#[derive(Clone, Debug, Default)]
struct GroupProgress {
    going: bool,
    evicted: usize,
    blocked: Vec<String>,
    consolidated: usize,
    steps: Vec<(String, String)>,
}

impl GroupProgress {
    fn add_to(self, report: &mut ConsolidationReport) {
        report.evicted += self.evicted;
        report.blocked.extend(self.blocked);
        report.nodes_consolidated += self.consolidated;
        report.steps.extend(self.steps);
    }
}

/// Whether a record's reason (`consolidation-<method>`) names a consolidating method.
fn consolidates(reason: &str) -> bool {
    let method = reason.trim_start_matches(REASON_PREFIX);
    !matches!(method, "drift" | "expiration" | "repair")
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Consolidator<'_, C, K, S, T> {
    /// Starts a command: records, taints, launches the replacements, then advances.
    pub(super) async fn start(
        &self,
        region: &RegionCatalog<'_>,
        snapshot: &Snapshot,
        command: &DisruptionCommand,
        until: SystemTime,
        report: &mut ConsolidationReport,
    ) -> Result<(), ConsolidationError> {
        let mut targets = Vec::new();
        for name in &command.nodes {
            let node = snapshot.nodes.iter().find(|n| n.metadata.name.as_deref() == Some(name));
            let instance = node
                .and_then(|n| n.spec.as_ref()?.provider_id.as_deref())
                .and_then(instance_id_from_provider_id);
            let Some(instance) = instance else {
                report.abandoned = Some(format!("node {name} has no EC2 instance in its providerID"));
                return Ok(());
            };
            let pool = node
                .and_then(|n| n.metadata.labels.as_ref()?.get(wk::NODEPOOL).cloned())
                .filter(|p| !p.is_empty());
            targets.push((name.clone(), instance.to_string(), pool));
        }
        let now = self.ports.clock.now();
        // The group: the first node's instance and the start, so that a command started again
        // after a rollback never reuses the launch ids of the attempt rolled back.
        let Some(group) = targets.first().map(|t| format!("{}-{}", t.1, epoch_millis(now))) else {
            return Ok(());
        };
        // The launch ids the replacements will get (the launch path numbers a run's
        // launches after its owner, here the group's prefix): recorded before launching,
        // so a run that dies in between is told from a command that launches nothing.
        let expected: Vec<String> = if self.settings.provision.dry_run {
            Vec::new()
        } else {
            (0..command.replacements.len())
                .map(|n| format!("{}-{n}", replacement_prefix(&group)))
                .collect()
        };
        let mut records = Vec::new();
        for (node, instance, pool) in &targets {
            let record = DisruptionRecord {
                instance_id: instance.clone(),
                node: node.clone(),
                reason: format!("{REASON_PREFIX}{}", command.method),
                step: DisruptionStep::Tainted,
                replacements: expected.clone(),
                started_at: epoch_millis(now),
                updated_at: epoch_millis(now),
                event_id: format!("{GROUP_PREFIX}{group}"),
                nodepool: pool.clone(),
                drain_deadline: epoch_millis(now).saturating_add(ms(self.settings.drain_limit)),
                hard_deadline: false,
                wait_for_replacement: true,
                terminate_by: pool
                    .as_deref()
                    .and_then(|p| snapshot.nodepools.iter().find(|n| n.name() == p))
                    .and_then(NodePool::termination_grace_period)
                    .map(|tgp| crate::model::time::epoch_millis_after(now, tgp)),
                burst: None,
                evicted: Vec::new(),
                held_by: None,
                held_until: 0,
                version: 0,
            };
            match self.ports.store.create_disruption(&record).await {
                Ok(r) => records.push(r),
                Err(StoreError::Conflict { .. }) => {
                    let why = format!("a disruption of {node} started meanwhile");
                    self.roll_back(&records, &why, report).await?;
                    report.abandoned = Some(why);
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            }
        }
        for r in &records {
            match self.ports.cluster.taint(&r.node, &disrupted_taint()).await {
                Ok(()) | Err(ClusterError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let mut launch_ids = Vec::new();
        if !command.replacements.is_empty() && !self.settings.provision.dry_run {
            let moving: Vec<_> = command.nodes.iter().flat_map(|n| moving_pods(snapshot, n)).collect();
            let reservation = reservation_for(&group, &moving);
            let provisioner = self.provisioner(&replacement_prefix(&group));
            let outcomes = provisioner
                .launch_all(
                    &command.replacements,
                    snapshot,
                    region,
                    self.ports.clock.now(),
                    &BTreeMap::new(),
                    Some(&reservation),
                    None,
                )
                .await;
            let mut failed = None;
            for outcome in outcomes {
                match outcome {
                    Ok(LaunchOutcome::Launched(l)) => launch_ids.push(l.1.id),
                    Ok(LaunchOutcome::Unknown(u)) => launch_ids.push(u.1.id),
                    Ok(LaunchOutcome::OutOfCapacity(offerings, f)) => {
                        for o in offerings {
                            self.ports.store.mark_unavailable(&o).await?;
                        }
                        failed = Some(format!(
                            "{} in {} ({}): {}",
                            f.instance_type, f.zone, f.capacity_type, f.error
                        ));
                    }
                    Ok(LaunchOutcome::Failed(f)) => {
                        failed = Some(format!(
                            "{} in {} ({}): {}",
                            f.instance_type, f.zone, f.capacity_type, f.error
                        ));
                    }
                    // The store failed around the launch: not the replacement's failure. The
                    // run stops; the next one resumes from the records.
                    Err(e) => return Err(ConsolidationError::Launch(e)),
                }
            }
            if let Some(why) = failed {
                self.roll_back(&records, &format!("the replacement launch failed: {why}"), report)
                    .await?;
                return Ok(());
            }
        }
        for r in &mut records {
            r.step = DisruptionStep::ReplacementLaunched;
            r.replacements.clone_from(&launch_ids);
            *r = self.ports.store.update_disruption(r).await?;
        }
        report.started.extend(records.iter().map(|r| r.node.clone()));
        tracing::info!(method = %command.method, nodes = ?command.nodes, replacements = ?launch_ids,
            savings_per_hour = command.savings_per_hour, "consolidation started");
        self.advance_group(region, records, until).await?.add_to(report);
        Ok(())
    }

    /// Resumes the disruptions in progress, every group at once (within the budgets that
    /// let them start, nothing holds one back for another), and says which are still
    /// going.
    pub(super) async fn resume(
        &self,
        region: &RegionCatalog<'_>,
        until: SystemTime,
        report: &mut ConsolidationReport,
    ) -> Result<InFlight, ConsolidationError> {
        if self.settings.provision.dry_run {
            // A dry run starts nothing, and does not advance what a real run started.
            return Ok(InFlight::default());
        }
        let mut groups: BTreeMap<String, Vec<DisruptionRecord>> = BTreeMap::new();
        for r in self
            .ports
            .store
            .list_disruptions()
            .await?
            .into_iter()
            .filter(is_consolidation)
        {
            groups.entry(r.event_id.clone()).or_default().push(r);
        }
        let mut to_advance = Vec::new();
        for (group, mut records) in groups {
            let first = group.trim_start_matches(GROUP_PREFIX).to_string();
            let prefix = format!("{}-", replacement_prefix(&first));
            let launches: Vec<_> = self
                .ports
                .store
                .list_launches()
                .await?
                .into_iter()
                .filter(|l| l.id.starts_with(&prefix))
                .collect();
            let now = self.ports.clock.now();
            // The run that started it died before its records said the replacements were
            // launched: resumed when they were (or none was needed), else rolled back.
            if records.iter().any(|r| r.step == DisruptionStep::Tainted) {
                let expected: BTreeSet<String> = records.iter().flat_map(|r| r.replacements.iter().cloned()).collect();
                let launched = expected.iter().all(|id| launches.iter().any(|l| &l.id == id));
                if !launched {
                    self.roll_back(
                        &records,
                        "the run that started it ended before its replacement was launched",
                        report,
                    )
                    .await?;
                    continue;
                }
                for r in &mut records {
                    r.step = DisruptionStep::ReplacementLaunched;
                    *r = self.ports.store.update_disruption(r).await?;
                }
            }
            let failed = records
                .iter()
                .flat_map(|r| r.replacements.iter())
                .filter(|id| {
                    launches
                        .iter()
                        .any(|l| &l.id == *id && matches!(l.state, LaunchState::Failed { .. }))
                })
                .count();
            let before_drain = records.iter().all(|r| r.step < DisruptionStep::Draining);
            if failed > 0 && before_drain {
                self.roll_back(&records, "its replacement failed to come up", report)
                    .await?;
                continue;
            }
            // Stalled: an eviction still refused at the drain's deadline. A node whose every
            // eviction was accepted is waiting for its pods to end: it is not rolled back.
            let stalled = records.iter().all(|r| r.step < DisruptionStep::Terminated)
                && records
                    .iter()
                    .any(|r| r.step < DisruptionStep::Drained && epoch_millis(now) >= r.drain_deadline);
            if stalled {
                let why = format!(
                    "its drain did not finish within {} s (pods blocked by PDBs or not leaving)",
                    self.settings.drain_limit.as_secs()
                );
                self.roll_back(&records, &why, report).await?;
                continue;
            }
            to_advance.push(records);
        }
        let advanced = futures_util::future::join_all(to_advance.into_iter().map(|records| async move {
            let consolidating = records.iter().any(|r| consolidates(&r.reason));
            (consolidating, self.advance_group(region, records, until).await)
        }))
        .await;
        let mut in_flight = InFlight::default();
        let mut failure = None;
        for (consolidating, progress) in advanced {
            match progress {
                Ok(p) => {
                    in_flight.any |= p.going;
                    in_flight.consolidating |= p.going && consolidating;
                    p.add_to(report);
                }
                Err(e) => failure = Some(e),
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(in_flight),
        }
    }

    /// Advances each record of a group with the interruption function's machinery, all
    /// at once; says whether any is not finished, and what they did.
    async fn advance_group(
        &self,
        region: &RegionCatalog<'_>,
        records: Vec<DisruptionRecord>,
        until: SystemTime,
    ) -> Result<GroupProgress, ConsolidationError> {
        let interrupter = Disrupter::new(
            self.ports.cloud,
            self.ports.cluster,
            self.ports.store,
            self.ports.clock,
            InterruptionSettings {
                provision: self.settings.provision.clone(),
                drain_deadline: self.settings.drain_slice,
                ..InterruptionSettings::default()
            },
            &self.owner,
        );
        let interrupter = &interrupter;
        let done = futures_util::future::join_all(records.into_iter().map(|record| async move {
            let start = EventReport::new(
                &record.event_id,
                EventKind::Scheduled,
                "consolidate",
                Some(&record.instance_id),
                Outcome::Draining,
            );
            let step = record.step;
            let node = record.node.clone();
            let done = interrupter.advance(region, record, None, None, until, start).await;
            (step, node, done)
        }))
        .await;
        let mut progress = GroupProgress::default();
        for (step, node, done) in done {
            let done = done?;
            progress.evicted += done.evicted;
            progress.blocked.extend(done.blocked.iter().cloned());
            if done.outcome == Outcome::CleanedUp || done.outcome == Outcome::Terminating {
                if step < DisruptionStep::Terminated {
                    progress.consolidated += 1;
                }
            } else {
                progress.going = true;
            }
            progress.steps.push((node, format!("{:?}", done.outcome)));
        }
        Ok(progress)
    }

    /// Undoes a consolidation that cannot finish: untaints its nodes and deletes its
    /// records (its replacements, if any came up, are capacity like any other).
    async fn roll_back(
        &self,
        records: &[DisruptionRecord],
        why: &str,
        report: &mut ConsolidationReport,
    ) -> Result<(), ConsolidationError> {
        let nodes: BTreeSet<String> = records.iter().map(|r| r.node.clone()).collect();
        let stalled_until = self.ports.clock.now() + STALL_COOLDOWN;
        for r in records {
            match self.ports.cluster.untaint(&r.node, &disrupted_taint()).await {
                Ok(()) | Err(ClusterError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            // A drain that stalled is remembered on the node, so that the next runs do not
            // pick it again at once with a fresh replacement; the load balancers' label
            // set when its drain began goes.
            if r.step >= DisruptionStep::Draining {
                let labels = MetadataPatch::from([(wk::EXCLUDE_BALANCERS.to_string(), None)]);
                let annotations = MetadataPatch::from([(
                    wk::STALLED_UNTIL.to_string(),
                    Some(kube_time(stalled_until).0.to_string()),
                )]);
                match self
                    .ports
                    .cluster
                    .patch_labels_annotations(&r.node, &labels, &annotations)
                    .await
                {
                    Ok(()) | Err(ClusterError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            self.ports.store.delete_disruption(&r.instance_id).await?;
        }
        tracing::warn!(nodes = ?nodes, reason = %why, "consolidation rolled back");
        report.rolled_back.push(RolledBack {
            nodes: nodes.into_iter().collect(),
            reason: why.to_string(),
        });
        Ok(())
    }
}
