//! Following launches up, every run and every batch:
//!
//! - a launch whose Node appeared (matched by providerID) is marked registered, and a
//!   node record is written;
//! - a Node Carpool launched gets the labels of its instance type that the kubelet does
//!   not set (`karpenter.k8s.aws/instance-*`), as Karpenter copies them from the
//!   NodeClaim, since the type is known only once EC2 has chosen it;
//! - an instance whose Node has not registered within the registration TTL is terminated,
//!   and its launch marked failed with the reason; so is an instance of this cluster with
//!   no launch record at all (a crash between CreateFleet and the record) and no Node;
//! - the records of instances that are gone are removed.
//!
//! Each step goes on after an error, which is reported; one bad record does not stop the
//! others.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::Node;

use super::report::HousekeepingReport;
use super::{ProvisionError, Provisioner};
use crate::catalog::RegionCatalog;
use crate::error_chain::Chain;
use crate::model::node::instance_id_from_provider_id;
use crate::model::well_known as wk;
use crate::ports::{
    Cloud, Cluster, EpochMillis, Instance, LaunchRecord, LaunchState, MetadataPatch, NodeRecord, StateStore,
    StoreError, Timer, epoch_millis,
};

fn node_name(n: &Node) -> String {
    n.metadata.name.clone().unwrap_or_default()
}

fn labels(n: &Node) -> BTreeMap<String, String> {
    n.metadata.labels.clone().unwrap_or_default()
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// One round of housekeeping.
    pub async fn housekeeping(&self, region: &RegionCatalog<'_>) -> Result<HousekeepingReport, ProvisionError> {
        let mut report = HousekeepingReport::default();
        let now = epoch_millis(self.clock.now());
        let ttl_ms = i64::try_from(self.settings.registration_ttl.as_millis()).unwrap_or(i64::MAX);
        let nodes = self.cluster.nodes().await?;
        let instances = self.cloud.list().await?;
        let launches = self.store.list_launches().await?;

        let node_of: HashMap<&str, &Node> = nodes
            .iter()
            .filter_map(|n| {
                let id = instance_id_from_provider_id(n.spec.as_ref()?.provider_id.as_deref()?)?;
                Some((id, n))
            })
            .collect();
        let instance_of: HashMap<&str, &Instance> = instances.iter().map(|i| (i.id.as_str(), i)).collect();
        let by_launch_id: HashMap<&str, &Instance> = instances
            .iter()
            .filter(|i| !i.launch_id.is_empty())
            .map(|i| (i.launch_id.as_str(), i))
            .collect();

        let mut known: HashSet<String> = HashSet::new();
        for launch in &launches {
            // A launch interrupted before its instance id was recorded: find it by tag.
            let instance_id = launch
                .instance_id
                .clone()
                .or_else(|| by_launch_id.get(launch.id.as_str()).map(|i| i.id.clone()));
            if let Some(id) = &instance_id {
                known.insert(id.clone());
            }
            let outcome = self
                .follow_up(
                    launch,
                    instance_id.as_deref(),
                    &node_of,
                    &instance_of,
                    region,
                    now,
                    ttl_ms,
                    &mut report,
                )
                .await;
            if let Err(e) = outcome {
                report.errors.push(format!("launch {}: {}", launch.id, Chain(&e)));
            }
        }

        // Instances of this cluster that no record knows and that never became a Node.
        for instance in &instances {
            if known.contains(&instance.id)
                || node_of.contains_key(instance.id.as_str())
                || now.saturating_sub(instance.launched_at) < ttl_ms
            {
                continue;
            }
            let reason = format!(
                "instance of launch {:?} has no launch record and no node after {}s",
                instance.launch_id,
                ttl_ms / 1000
            );
            match self.cloud.terminate(&instance.id).await {
                Ok(()) => {
                    tracing::warn!(instance_id = %instance.id, reason = %reason, "terminated an unregistered instance");
                    report.terminated.push((instance.id.clone(), reason));
                }
                Err(e) => report.errors.push(format!("terminate {}: {}", instance.id, Chain(&e))),
            }
        }

        // Node records whose instance is gone.
        match self.store.list_nodes().await {
            Ok(records) => {
                for r in records {
                    if !instance_of.contains_key(r.instance_id.as_str()) {
                        match self.store.delete_node(&r.instance_id).await {
                            Ok(()) => report.records_removed += 1,
                            Err(e) => report
                                .errors
                                .push(format!("node record {}: {}", r.instance_id, Chain(&e))),
                        }
                    }
                }
            }
            Err(e) => report.errors.push(format!("node records: {}", Chain(&e))),
        }

        // Labels of the instance type on Carpool's nodes.
        for node in &nodes {
            let labels = labels(node);
            if labels.get(wk::CARPOOL_MANAGED).map(String::as_str) != Some("true") {
                continue;
            }
            let Some(it) = labels
                .get(wk::INSTANCE_TYPE)
                .and_then(|t| region.types().iter().find(|it| &it.name == t))
            else {
                continue;
            };
            let missing: MetadataPatch = it
                .labels()
                .into_iter()
                .filter(|(k, v)| labels.get(k) != Some(v))
                .map(|(k, v)| (k, Some(v)))
                .collect();
            if missing.is_empty() {
                continue;
            }
            let name = node_name(node);
            match self
                .cluster
                .patch_labels_annotations(&name, &missing, &MetadataPatch::new())
                .await
            {
                Ok(()) => report.labelled.push(name),
                Err(e) => report.errors.push(format!("label node {name}: {}", Chain(&e))),
            }
        }
        for e in &report.errors {
            tracing::warn!(error = %e, "housekeeping");
        }
        Ok(report)
    }

    #[allow(clippy::too_many_arguments)]
    async fn follow_up(
        &self,
        launch: &LaunchRecord,
        instance_id: Option<&str>,
        node_of: &HashMap<&str, &Node>,
        instance_of: &HashMap<&str, &Instance>,
        region: &RegionCatalog<'_>,
        now: EpochMillis,
        ttl_ms: i64,
        report: &mut HousekeepingReport,
    ) -> Result<(), ProvisionError> {
        let expired = now.saturating_sub(launch.launched_at) >= ttl_ms;
        match &launch.state {
            LaunchState::InFlight => {
                if let Some(id) = instance_id
                    && let Some(node) = node_of.get(id)
                {
                    let name = node_name(node);
                    let mut registered = launch.clone();
                    registered.instance_id = Some(id.to_string());
                    registered.state = LaunchState::Registered { node: name.clone() };
                    self.store.update_launch(&registered).await?;
                    let price = region
                        .types()
                        .iter()
                        .find(|t| t.name == launch.instance_type)
                        .and_then(|it| region.prices().price(it, &launch.zone, launch.capacity_type))
                        .unwrap_or_default();
                    let record = NodeRecord {
                        instance_id: id.to_string(),
                        node: name.clone(),
                        nodepool: launch.nodepool.clone(),
                        instance_type: launch.instance_type.clone(),
                        capacity_type: launch.capacity_type,
                        price_per_hour: price,
                        launched_at: launch.launched_at,
                        version: 0,
                    };
                    match self.store.create_node(&record).await {
                        Ok(_) | Err(StoreError::Conflict { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                    tracing::info!(launch_id = %launch.id, instance_id = %id, node = %name, "registered");
                    report.registered.push((launch.id.clone(), name));
                } else if expired {
                    let reason = format!("the node did not register within {}s", ttl_ms / 1000);
                    if let Some(id) = instance_id {
                        self.cloud.terminate(id).await?;
                        tracing::warn!(launch_id = %launch.id, instance_id = %id, reason = %reason, "terminated an unregistered instance");
                        report.terminated.push((id.to_string(), reason.clone()));
                    }
                    let mut failed = launch.clone();
                    failed.instance_id = instance_id.map(str::to_string);
                    failed.state = LaunchState::Failed { reason };
                    self.store.update_launch(&failed).await?;
                }
            }
            LaunchState::Failed { .. }
                if instance_id.is_some_and(|id| instance_of.contains_key(id) && !node_of.contains_key(id)) =>
            {
                // A launch that failed as far as the run knew (a timeout, say) but did
                // start an instance, which never became a Node: terminate it after the TTL.
                if expired && let Some(id) = instance_id {
                    self.cloud.terminate(id).await?;
                    let reason = format!(
                        "instance of failed launch {} did not register within {}s",
                        launch.id,
                        ttl_ms / 1000
                    );
                    tracing::warn!(launch_id = %launch.id, instance_id = %id, reason = %reason, "terminated an unregistered instance");
                    report.terminated.push((id.to_string(), reason));
                }
            }
            LaunchState::Registered { .. } | LaunchState::Failed { .. } => {
                let gone = instance_id.is_none_or(|id| !instance_of.contains_key(id));
                if gone && (instance_id.is_some() || expired) {
                    self.store.delete_launch(&launch.id).await?;
                    report.records_removed += 1;
                }
            }
        }
        Ok(())
    }
}
