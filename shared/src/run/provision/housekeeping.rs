//! Following launches up, every run and every batch: list the Nodes, the instances, the
//! launch and node records, [decide](crate::decide::housekeeping) what to do, and do it.
//!
//! Before deciding, the instances of launches in flight that the list does not show are
//! read one by one ([`housekeeping::to_look_up`]), so that one already terminated is known
//! to be gone at once.
//! Registrations and registration failures then update the NodePools' launch backoffs
//! ([`crate::decide::provisioning::backoff`]): three instances in a row that never joined back the pair
//! off, a node that registered resets it.
//!
//! Once per run, the launch templates no launch uses any more are deleted
//! ([`TEMPLATE_IDLE`]), so that they never pile up to the Region's quota.
//!
//! Each step goes on after an error, which is reported; one bad record does not stop the
//! others. A step that depends on another (the failed record written after its instance
//! is terminated) is skipped when that one failed. Terminations held back by the cap, and
//! in dry-run mode the terminations planned, are logged (and counted in the run's
//! metrics), not carried out.

use std::collections::BTreeMap;

use super::report::HousekeepingReport;
use super::{ProvisionError, Provisioner};
use crate::catalog::RegionCatalog;
use crate::decide::housekeeping::{
    self, Forget, HousekeepingPlan, Observed, Registration, Termination, TerminationReason,
};
use crate::decide::provisioning::backoff;
use crate::error_chain::Chain;
use crate::ports::{
    Cloud, CloudError, Cluster, EpochMillis, MetadataPatch, StateStore, StoreError, Timer, epoch_millis,
};

/// How long a launch template Carpool made is kept, from its creation, while no live
/// instance was launched from it. A template in use is kept whatever its age; one deleted
/// and needed again is created again by the next launch.
pub const TEMPLATE_IDLE: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// The launches in flight whose instance did not register, as `nodepool → reason`.
fn not_registered(plan: &HousekeepingPlan) -> Vec<(String, String)> {
    plan.terminate
        .iter()
        .filter(|t| matches!(t.reason, TerminationReason::NotRegistered { .. }))
        .filter_map(|t| Some((t.then_write.as_ref()?.nodepool.clone(), t.reason.to_string())))
        .chain(plan.fail.iter().map(|l| {
            let reason = match &l.state {
                crate::ports::LaunchState::Failed { reason } => reason.clone(),
                _ => String::new(),
            };
            (l.nodepool.clone(), reason)
        }))
        .collect()
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// One round of housekeeping.
    pub async fn housekeeping(&self, region: &RegionCatalog<'_>) -> Result<HousekeepingReport, ProvisionError> {
        let mut report = HousekeepingReport::default();
        let now = epoch_millis(self.ports.clock.now());
        let nodes = self.ports.cluster.nodes().await?;
        let instances = self.ports.cloud.list().await?;
        let launches = self.ports.store.list_launches().await?;
        let node_records = match self.ports.store.list_nodes().await {
            Ok(records) => Some(records),
            Err(e) => {
                report.errors.push(format!("node records: {}", Chain(&e)));
                None
            }
        };
        let mut looked_up = BTreeMap::new();
        for id in housekeeping::to_look_up(&nodes, &instances, &launches) {
            match self.ports.cloud.get(&id).await {
                Ok(instance) => {
                    looked_up.insert(id, Some(instance));
                }
                Err(CloudError::NotFound { .. }) => {
                    looked_up.insert(id, None);
                }
                Err(e) => report.errors.push(format!("instance {id}: {e}")),
            }
        }
        let observed = Observed {
            nodes: &nodes,
            instances: &instances,
            looked_up: &looked_up,
            launches: &launches,
            node_records: node_records.as_deref(),
            deployment: &self.settings.deployment,
            dry_run: self.settings.dry_run,
            now,
            registration_ttl: self.settings.registration_ttl,
        };
        // A node that registers is recorded at the price the user pays: the cluster's
        // NodeOverlays, read only when a launch is in flight (one may register now).
        let priced;
        let region = if launches
            .iter()
            .any(|l| matches!(l.state, crate::ports::LaunchState::InFlight))
        {
            match self.ports.cluster.nodeoverlays().await {
                Ok(overlays) if !overlays.valid.is_empty() => {
                    let mut r = region.clone();
                    r.apply_overlays(&overlays.valid);
                    priced = r;
                    &priced
                }
                Ok(_) => region,
                Err(e) => {
                    tracing::warn!(error = %Chain(&e), "could not read NodeOverlays; recording list prices");
                    region
                }
            }
        } else {
            region
        };
        let plan = housekeeping::plan(&observed, region);
        report.not_registered = not_registered(&plan);
        let backoff_plan = (!plan.register.is_empty() || !report.not_registered.is_empty()).then(|| plan.clone());
        self.carry_out(plan, &mut report).await;
        // Waves due, whoever launched them: a run that crashed leaves none held.
        let (released, errors) = self.release(&nodes, &launches, now).await;
        report.released = released;
        report.errors.extend(errors);
        if let Some(plan) = backoff_plan {
            self.registration_backoffs(&plan, now, &mut report).await;
        }
        for e in &report.errors {
            tracing::warn!(error = %e, "housekeeping");
        }
        Ok(report)
    }

    /// Deletes the launch templates no launch uses any more ([`TEMPLATE_IDLE`]; see
    /// [`Cloud::collect_launch_templates`]), once per run. In dry run, nothing.
    pub(crate) async fn collect_launch_templates(&self, report: &mut HousekeepingReport) {
        if self.settings.dry_run {
            return;
        }
        match self
            .ports
            .cloud
            .collect_launch_templates(self.ports.clock.now(), TEMPLATE_IDLE)
            .await
        {
            Ok(deleted) => {
                if !deleted.is_empty() {
                    tracing::info!(templates = ?deleted, "deleted launch templates no launch uses");
                }
                report.templates_deleted = deleted;
            }
            Err(e) => report.errors.push(format!("launch templates: {}", Chain(&e))),
        }
    }

    /// Updates the backoffs of the NodePools whose launches registered or did not.
    async fn registration_backoffs(&self, plan: &HousekeepingPlan, now: EpochMillis, report: &mut HousekeepingReport) {
        let pools = match self.ports.cluster.nodepools().await {
            Ok(pools) => pools.valid,
            Err(e) => {
                report.errors.push(format!("launch backoffs: NodePools: {}", Chain(&e)));
                return;
            }
        };
        let rounds = backoff::registration_rounds(plan, |name| {
            pools
                .iter()
                .find(|p| p.name() == name)
                .map(|p| p.spec.template.spec.node_class_ref.name.clone())
        });
        if rounds.is_empty() {
            return;
        }
        let stored = match self.ports.store.list_backoffs().await {
            Ok(stored) => stored,
            Err(e) => {
                report.errors.push(format!("launch backoffs: {}", Chain(&e)));
                return;
            }
        };
        match self.apply_backoffs(&rounds, &stored, now).await {
            Ok(set) => report.backoffs_set = set,
            Err(e) => report.errors.push(format!("launch backoffs: {}", Chain(&e))),
        }
    }

    /// Carries a plan out, in its order, reporting what was done and what failed.
    async fn carry_out(&self, plan: HousekeepingPlan, report: &mut HousekeepingReport) {
        for registration in &plan.register {
            if let Err(e) = self.register(registration, report).await {
                report
                    .errors
                    .push(format!("launch {}: {}", registration.launch.id, Chain(&e)));
            }
        }
        for found in &plan.reconcile {
            let instance = found.instance_id.clone().unwrap_or_default();
            match self.ports.store.update_launch(found).await {
                Ok(_) => {
                    tracing::info!(launch_id = %found.id, instance_id = %instance,
                        instance_type = %found.instance_type, zone = %found.zone,
                        "launch found by its launch-id tag; recorded");
                    report.reconciled.push((found.id.clone(), instance));
                }
                Err(e) => report.errors.push(format!("launch {}: {e}", found.id)),
            }
        }
        for failed in &plan.fail {
            if let Err(e) = self.ports.store.update_launch(failed).await {
                report.errors.push(format!("launch {}: {}", failed.id, Chain(&e)));
            }
        }
        for lost in &plan.lost {
            let reason = lost.reason.to_string();
            match self.ports.store.update_launch(&lost.launch).await {
                Ok(_) => {
                    tracing::warn!(launch_id = %lost.launch.id, reason = %reason,
                        pods = %lost.launch.pods.join(","), "launch lost; its pods are planned again");
                    report.lost.push((lost.launch.id.clone(), reason));
                }
                Err(e) => report.errors.push(format!("launch {}: {e}", lost.launch.id)),
            }
        }
        for spared in &plan.spared {
            tracing::debug!(instance_id = %spared.instance_id, would_be = %spared.would_be,
                reason = %spared.reason, "not terminating an instance this deployment does not own");
            report
                .spared
                .push((spared.instance_id.clone(), spared.reason.to_string()));
        }
        for held in &plan.held_back {
            tracing::warn!(instance_id = %held.instance_id, launch_id = held.launch_id.as_deref().unwrap_or(""),
                reason = %held.reason, cap = plan.terminate.len(),
                "termination held back: past the cap of terminations per round");
            report
                .held_back
                .push((held.instance_id.clone(), held.reason.to_string()));
        }
        for would in &plan.would_terminate {
            tracing::info!(instance_id = %would.instance_id, launch_id = would.launch_id.as_deref().unwrap_or(""),
                reason = %would.reason, "dry run: would terminate");
            report
                .would_terminate
                .push((would.instance_id.clone(), would.reason.to_string()));
        }
        for termination in &plan.terminate {
            if let Err(e) = self.terminate(termination, report).await {
                report.errors.push(match &termination.launch_id {
                    Some(launch) => format!("launch {launch}: {}", Chain(&e)),
                    None => format!("terminate {}: {}", termination.instance_id, Chain(&e)),
                });
            }
        }
        for forget in &plan.forget {
            match forget {
                Forget::Launch(id) => match self.ports.store.delete_launch(id).await {
                    Ok(()) => report.records_removed += 1,
                    Err(e) => report.errors.push(format!("launch {id}: {}", Chain(&e))),
                },
                Forget::NodeRecord(id) => match self.ports.store.delete_node(id).await {
                    Ok(()) => report.records_removed += 1,
                    Err(e) => report.errors.push(format!("node record {id}: {}", Chain(&e))),
                },
            }
        }
        for labelling in &plan.label {
            match self
                .ports
                .cluster
                .patch_labels_annotations(&labelling.node, &labelling.labels, &MetadataPatch::new())
                .await
            {
                Ok(()) => report.labelled.push(labelling.node.clone()),
                Err(e) => report
                    .errors
                    .push(format!("label node {}: {}", labelling.node, Chain(&e))),
            }
        }
    }

    async fn register(
        &self,
        registration: &Registration,
        report: &mut HousekeepingReport,
    ) -> Result<(), ProvisionError> {
        let Registration {
            launch,
            node,
            then_forget,
        } = registration;
        self.ports.store.update_launch(launch).await?;
        match self.ports.store.create_node(node).await {
            Ok(_) | Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(launch_id = %launch.id, instance_id = %node.instance_id, node = %node.node, "registered");
        // From now on a `kubectl delete node` drains it before its instance goes (the
        // interruption function's sweep). Best effort: without it, housekeeping
        // terminates the instance of a deleted Node at its next run.
        if let Err(e) = self.ports.cluster.add_finalizer(&node.node).await {
            report
                .errors
                .push(format!("finalizer on node {}: {}", node.node, Chain(&e)));
        }
        report.registered.push((launch.id.clone(), node.node.clone()));
        if *then_forget {
            match self.ports.store.delete_node(&node.instance_id).await {
                Ok(()) => report.records_removed += 1,
                Err(e) => report
                    .errors
                    .push(format!("node record {}: {}", node.instance_id, Chain(&e))),
            }
        }
        Ok(())
    }

    async fn terminate(
        &self,
        termination: &Termination,
        report: &mut HousekeepingReport,
    ) -> Result<(), ProvisionError> {
        let id = &termination.instance_id;
        let reason = termination.reason.to_string();
        self.ports.cloud.terminate(id).await?;
        tracing::warn!(
            launch_id = termination.launch_id.as_deref().unwrap_or(""), instance_id = %id, reason = %reason,
            "terminated an unregistered instance"
        );
        report.terminated.push((id.clone(), reason));
        if let Some(failed) = &termination.then_write {
            self.ports.store.update_launch(failed).await?;
        }
        Ok(())
    }
}
