//! The snapshot a batch plans on, read through the Cluster port.

use crate::decide::provisioning::pod::is_provisionable;
use crate::ports::{Cluster, ClusterError, Validated};
use crate::snapshot::Snapshot;

fn skipped<T>(kind: &str, v: &Validated<T>) -> Vec<(String, String)> {
    v.invalid
        .iter()
        .map(|o| (format!("{kind}/{}", o.name), o.reason.clone()))
        .collect()
}

/// Pods, nodes, DaemonSets, PDBs, PersistentVolumes and their claims, StorageClasses,
/// CSINodes, Namespaces, NodePools, EC2NodeClasses and NodeOverlays as the cluster holds
/// them now. The pending pods kept are the ones to provision for (see
/// [`is_provisionable`]); invalid NodePools, EC2NodeClasses and NodeOverlays are skipped
/// with their reason, and the others work.
pub async fn read_snapshot<K: Cluster>(cluster: &K) -> Result<Snapshot, ClusterError> {
    let pending = cluster.pending_pods().await?;
    let scheduled = cluster.scheduled_pods().await?;
    let nodes = cluster.nodes().await?;
    let daemonsets = cluster.daemonsets().await?;
    let pdbs = cluster.pdbs().await?;
    let pvs = cluster.persistent_volumes().await?;
    let pvcs = cluster.persistent_volume_claims().await?;
    let storage_classes = cluster.storage_classes().await?;
    let csinodes = cluster.csinodes().await?;
    let namespaces = cluster.namespaces().await?;
    let nodepools = cluster.nodepools().await?;
    let nodeclasses = cluster.ec2nodeclasses().await?;
    let nodeoverlays = cluster.nodeoverlays().await?;
    let mut skipped_objects = skipped("NodePool", &nodepools);
    skipped_objects.extend(skipped("EC2NodeClass", &nodeclasses));
    skipped_objects.extend(skipped("NodeOverlay", &nodeoverlays));
    let mut pods: Vec<_> = pending.into_iter().filter(is_provisionable).collect();
    pods.extend(scheduled);
    Ok(Snapshot {
        pods,
        nodes,
        daemonsets,
        pdbs,
        pvs,
        pvcs,
        storage_classes,
        csinodes,
        namespaces,
        nodepools: nodepools.valid,
        nodeclasses: nodeclasses.valid,
        nodeoverlays: nodeoverlays.valid,
        skipped: skipped_objects,
        ..Snapshot::default()
    })
}

/// The CapacityBuffers' chunks at `now`, as pending pods
/// ([`crate::decide::provisioning::buffers`]), with the buffers that give none (invalid
/// ones included) and why. A cluster with no buffer costs one list; the PodTemplates are
/// listed only when a buffer exists.
pub async fn buffer_pods<K: Cluster>(
    cluster: &K,
    now: std::time::SystemTime,
) -> Result<crate::decide::provisioning::buffers::BufferPods, ClusterError> {
    let buffers = cluster.capacity_buffers().await?;
    let mut out = crate::decide::provisioning::buffers::BufferPods::default();
    if !buffers.valid.is_empty() {
        let templates = cluster.pod_templates().await?;
        out = crate::decide::provisioning::buffers::virtual_pods(&buffers.valid, &templates, now);
    }
    out.skipped.extend(skipped("CapacityBuffer", &buffers));
    Ok(out)
}
