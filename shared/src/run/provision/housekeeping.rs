//! Following launches up, every run and every batch: list the Nodes, the instances, the
//! launch and node records, [decide](crate::decide::housekeeping) what to do, and do it.
//!
//! Each step goes on after an error, which is reported; one bad record does not stop the
//! others. A step that depends on another (the failed record written after its instance
//! is terminated) is skipped when that one failed.

use super::report::HousekeepingReport;
use super::{ProvisionError, Provisioner};
use crate::catalog::RegionCatalog;
use crate::decide::housekeeping::{self, Forget, HousekeepingPlan, Observed, Registration, Termination};
use crate::error_chain::Chain;
use crate::ports::{Cloud, Cluster, MetadataPatch, StateStore, StoreError, Timer, epoch_millis};

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// One round of housekeeping.
    pub async fn housekeeping(&self, region: &RegionCatalog<'_>) -> Result<HousekeepingReport, ProvisionError> {
        let mut report = HousekeepingReport::default();
        let now = epoch_millis(self.clock.now());
        let nodes = self.cluster.nodes().await?;
        let instances = self.cloud.list().await?;
        let launches = self.store.list_launches().await?;
        let node_records = match self.store.list_nodes().await {
            Ok(records) => Some(records),
            Err(e) => {
                report.errors.push(format!("node records: {}", Chain(&e)));
                None
            }
        };
        let observed = Observed {
            nodes: &nodes,
            instances: &instances,
            launches: &launches,
            node_records: node_records.as_deref(),
            now,
            registration_ttl: self.settings.registration_ttl,
        };
        let plan = housekeeping::plan(&observed, region);
        self.carry_out(plan, &mut report).await;
        for e in &report.errors {
            tracing::warn!(error = %e, "housekeeping");
        }
        Ok(report)
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
        for failed in &plan.fail {
            if let Err(e) = self.store.update_launch(failed).await {
                report.errors.push(format!("launch {}: {}", failed.id, Chain(&e)));
            }
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
                Forget::Launch(id) => match self.store.delete_launch(id).await {
                    Ok(()) => report.records_removed += 1,
                    Err(e) => report.errors.push(format!("launch {id}: {}", Chain(&e))),
                },
                Forget::NodeRecord(id) => match self.store.delete_node(id).await {
                    Ok(()) => report.records_removed += 1,
                    Err(e) => report.errors.push(format!("node record {id}: {}", Chain(&e))),
                },
            }
        }
        for labelling in &plan.label {
            match self
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
        self.store.update_launch(launch).await?;
        match self.store.create_node(node).await {
            Ok(_) | Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(launch_id = %launch.id, instance_id = %node.instance_id, node = %node.node, "registered");
        report.registered.push((launch.id.clone(), node.node.clone()));
        if *then_forget {
            match self.store.delete_node(&node.instance_id).await {
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
        self.cloud.terminate(id).await?;
        tracing::warn!(
            launch_id = termination.launch_id.as_deref().unwrap_or(""), instance_id = %id, reason = %reason,
            "terminated an unregistered instance"
        );
        report.terminated.push((id.clone(), reason));
        if let Some(failed) = &termination.then_write {
            self.store.update_launch(failed).await?;
        }
        Ok(())
    }
}
