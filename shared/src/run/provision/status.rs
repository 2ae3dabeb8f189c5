//! Writes the `status` of the NodePools and EC2NodeClasses Carpool manages, once per run
//! ([`crate::decide::status`] says what): `kubectl get nodepools` shows their nodes and
//! resources, `kubectl describe ec2nodeclass` what the class resolved to and, when it does
//! not resolve, why.
//!
//! Only the status subresource is written, only when it changed, and never for a NodePool
//! Carpool does not manage (Karpenter may be writing it), nor for a class that such a
//! NodePool uses. A failed write is logged and the run goes on.

use std::collections::BTreeSet;

use super::Provisioner;
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::nodepools::keep_managed;
use crate::decide::status::fleet::{FleetLine, fleet};
use crate::decide::status::{ClassReadiness, ClassResolution, changed, nodeclass_status, nodepool_status};
use crate::error_chain::Chain;
use crate::ports::{Cloud, Cluster, ClusterError, StateStore, StatusOf, Timer};
use crate::snapshot::Snapshot;

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Writes the statuses that changed; returns the objects written, as `Kind/name` (in
    /// dry run, those it would write), and the fleet of the managed NodePools
    /// ([`fleet`]), priced with the cluster's NodeOverlays.
    pub(crate) async fn write_statuses(
        &self,
        region: &RegionCatalog<'_>,
    ) -> Result<(Vec<String>, Vec<FleetLine>), ClusterError> {
        let pools = self.ports.cluster.nodepools().await?;
        let classes = self.ports.cluster.ec2nodeclasses().await?;
        let nodes = self.ports.cluster.nodes().await?;
        let mut snapshot = Snapshot {
            nodepools: pools.valid,
            nodeclasses: classes.valid,
            nodes,
            ..Snapshot::default()
        };
        let all_pools = snapshot.nodepools.clone();
        keep_managed(&mut snapshot, &self.settings.nodepool_selector);
        let managed: BTreeSet<&str> = snapshot.nodepools.iter().map(|p| p.name()).collect();
        // A class an unmanaged NodePool uses is that NodePool's owner's to describe.
        let foreign: BTreeSet<&str> = all_pools
            .iter()
            .filter(|p| !managed.contains(p.name()))
            .map(|p| p.spec.template.spec.node_class_ref.name.as_str())
            .collect();
        let managed_pools = snapshot.nodepools.clone();
        let fleet = {
            let mut priced = region.clone();
            match self.ports.cluster.nodeoverlays().await {
                Ok(overlays) => {
                    priced.apply_overlays(&overlays.valid);
                }
                Err(e) => {
                    tracing::warn!(error = %Chain(&e), "could not read NodeOverlays; the fleet's cost is at list prices")
                }
            }
            fleet(&snapshot.nodes, &managed, &priced)
        };
        let resolved = self.narrow_pools(&mut snapshot, region).await;
        let now = self.ports.clock.now();
        let mut written = Vec::new();
        for pool in &managed_pools {
            let class_name = &pool.spec.template.spec.node_class_ref.name;
            let readiness = if !snapshot.nodeclasses.iter().any(|c| c.name() == class_name) {
                ClassReadiness::NotFound
            } else if let Some(failure) = resolved.failures.get(class_name) {
                let c = failure.condition();
                ClassReadiness::NotReady {
                    reason: c.reason,
                    message: c.message,
                }
            } else {
                ClassReadiness::Ready
            };
            let status = nodepool_status(pool, &snapshot.nodes, &readiness, pool.status.as_ref(), now);
            if changed(pool.status.as_ref(), &status) {
                self.write(StatusOf::NodePool, pool.name(), &status, &mut written).await;
            }
        }
        let used: BTreeSet<&str> = managed_pools
            .iter()
            .map(|p| p.spec.template.spec.node_class_ref.name.as_str())
            .collect();
        for class in snapshot
            .nodeclasses
            .iter()
            .filter(|c| used.contains(c.name()) && !foreign.contains(c.name()))
        {
            let name = class.name();
            let resolution = match (
                resolved.failures.get(name),
                resolved.networks.get(name),
                resolved.images.get(name),
            ) {
                (Some(failure), _, _) => Err(failure.clone()),
                (None, Some(network), Some(images)) => Ok(ClassResolution {
                    network: network.clone(),
                    images: images.clone(),
                    instance_profile: resolved.profiles.get(name).cloned().flatten(),
                }),
                _ => continue,
            };
            let status = nodeclass_status(class, &resolution, now);
            if changed(class.status.as_ref(), &status) {
                self.write(StatusOf::EC2NodeClass, name, &status, &mut written).await;
            }
        }
        Ok((written, fleet))
    }

    async fn write(&self, kind: StatusOf, name: &str, status: &serde_json::Value, written: &mut Vec<String>) {
        let object = format!("{}/{name}", kind.kind());
        if self.settings.dry_run {
            tracing::info!(object = %object, status = %status, "dry run: would write the status");
            written.push(object);
            return;
        }
        match self.ports.cluster.write_status(kind, name, status).await {
            Ok(()) => written.push(object),
            // Deleted since it was read: nothing to describe.
            Err(ClusterError::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(object = %object, error = %Chain(&e), "could not write the status; the next run tries again")
            }
        }
    }
}
