//! What a pod's PersistentVolumeClaims ask of its node, read from the claims, volumes and
//! StorageClasses themselves (kube-scheduler's VolumeBinding and NodeVolumeLimits plugins):
//!
//! - a claim that does not exist, an unbound claim whose StorageClass binds `Immediate`
//!   (the default, and the meaning of no class at all), or whose StorageClass does not
//!   exist, keeps the pod off every node (`volumebinding` PreFilter: "pod has unbound
//!   immediate PersistentVolumeClaims", "persistentvolumeclaim not found"): the plan must
//!   report it, not place it;
//! - a bound claim's PersistentVolume restricts the node by its required node affinity
//!   (`volumebinding` `checkBoundClaims`, `CheckNodeAffinity`: one of its terms);
//! - an unbound claim of a `WaitForFirstConsumer` class with `allowedTopologies` restricts
//!   the node to one of those terms (`checkVolumeProvisions`,
//!   `v1helper.MatchTopologySelectorTerms`);
//! - each volume counts against its CSI driver's attach limit on the node (`nodevolumelimits`
//!   `CSILimits.Filter`): the PV's `spec.csi.driver` (`ebs.csi.aws.com` for an in-tree
//!   `awsElasticBlockStore` volume, which CSI migration hands to it), or the StorageClass's
//!   provisioner for an unbound claim, identified by the PV or the claim.
//!
//! Approximations: a generic ephemeral volume whose claim does not exist yet is ignored (the
//! ephemeral volume controller creates it); a bound claim whose PersistentVolume is not in
//! the snapshot blocks the pod (`ErrReasonPVNotExist`); a planned node will carry the EBS CSI driver's
//! `topology.ebs.csi.aws.com/zone` label (the driver sets it at registration), so volume
//! terms are matched against the zone under that key too.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, TopologySelectorTerm};

use super::pending::namespace;
use super::selector::{self, Labels};
use crate::model::pod::Pod;
use crate::snapshot::Snapshot;

/// The EBS CSI driver.
pub(crate) const EBS_DRIVER: &str = "ebs.csi.aws.com";
/// The zone key the EBS CSI driver labels its nodes with.
pub(crate) const EBS_ZONE: &str = "topology.ebs.csi.aws.com/zone";

/// A pod's volumes, as they constrain its node.
#[derive(Clone, Debug, Default)]
pub(crate) struct PodVolumes {
    /// Why no node can take the pod, if one of its claims rules it out.
    pub bad: Option<String>,
    /// Per bound volume, its required node selector terms (one must match).
    pub pv_terms: Vec<Vec<NodeSelectorTerm>>,
    /// Per unbound `WaitForFirstConsumer` claim with allowed topologies, those (one must match).
    pub topologies: Vec<Vec<TopologySelectorTerm>>,
    /// The volumes it attaches: (CSI driver, volume identity).
    pub attached: BTreeSet<(String, String)>,
}

fn topology_term(t: &TopologySelectorTerm, labels: &Labels) -> bool {
    t.match_label_expressions
        .iter()
        .flatten()
        .all(|e| labels.get(&e.key).is_some_and(|v| e.values.contains(v)))
}

impl PodVolumes {
    /// Reads the volumes of a pod.
    pub fn of(pod: &Pod, snapshot: &Snapshot) -> PodVolumes {
        let mut out = PodVolumes::default();
        let ns = namespace(pod);
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let (claim_name, ephemeral) = match (&v.persistent_volume_claim, &v.ephemeral) {
                (Some(c), _) => (c.claim_name.clone(), false),
                (None, Some(_)) => (format!("{pod_name}-{}", v.name), true),
                _ => continue,
            };
            let claim = snapshot.pvcs.iter().find(|c| {
                c.metadata.namespace.as_deref().unwrap_or("default") == ns
                    && c.metadata.name.as_deref() == Some(claim_name.as_str())
            });
            let Some(claim) = claim else {
                if !ephemeral {
                    out.bad
                        .get_or_insert(format!("persistentvolumeclaim {claim_name:?} not found"));
                }
                continue;
            };
            let spec = claim.spec.as_ref();
            if let Some(pv_name) = spec.and_then(|s| s.volume_name.as_deref()).filter(|n| !n.is_empty()) {
                let Some(pv) = snapshot
                    .pvs
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(pv_name))
                else {
                    // volumebinding `checkBoundClaims`: a claim bound to a PV that does not
                    // exist (`ErrReasonPVNotExist`) makes the pod unschedulable.
                    out.bad.get_or_insert(format!(
                        "persistentvolumeclaim {claim_name:?} is bound to persistentvolume {pv_name:?}, which does not exist"
                    ));
                    continue;
                };
                let pv_spec = pv.spec.as_ref();
                let terms = pv_spec
                    .and_then(|s| s.node_affinity.as_ref())
                    .and_then(|a| a.required.as_ref())
                    .map(|r| r.node_selector_terms.clone())
                    .unwrap_or_default();
                if !terms.is_empty() {
                    out.pv_terms.push(terms);
                }
                let driver = pv_spec.and_then(|s| {
                    s.csi
                        .as_ref()
                        .map(|c| c.driver.clone())
                        .or_else(|| s.aws_elastic_block_store.as_ref().map(|_| EBS_DRIVER.to_string()))
                });
                if let Some(d) = driver {
                    out.attached.insert((d, format!("pv/{pv_name}")));
                }
                continue;
            }
            let class_name = spec.and_then(|s| s.storage_class_name.as_deref()).unwrap_or_default();
            let class = snapshot
                .storage_classes
                .iter()
                .find(|c| !class_name.is_empty() && c.metadata.name.as_deref() == Some(class_name));
            let Some(class) = class else {
                out.bad.get_or_insert(if class_name.is_empty() {
                    format!("persistentvolumeclaim {claim_name:?} is unbound and has no StorageClass")
                } else {
                    format!("storageclass {class_name:?} of claim {claim_name:?} not found")
                });
                continue;
            };
            if class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
                out.bad.get_or_insert(format!(
                    "persistentvolumeclaim {claim_name:?} is unbound with Immediate binding"
                ));
                continue;
            }
            if let Some(t) = class.allowed_topologies.as_ref().filter(|t| !t.is_empty()) {
                out.topologies.push(t.clone());
            }
            out.attached
                .insert((class.provisioner.clone(), format!("pvc/{ns}/{claim_name}")));
        }
        out
    }

    /// Whether the volumes restrict the nodes at all.
    pub fn restricts(&self) -> bool {
        !self.pv_terms.is_empty() || !self.topologies.is_empty()
    }

    /// Whether a node passes the volumes' node affinity and allowed topologies.
    pub fn node_ok(&self, labels: &Labels, node_name: Option<&str>) -> bool {
        self.pv_terms
            .iter()
            .all(|terms| terms.iter().any(|t| selector::term(t, labels, node_name)))
            && self
                .topologies
                .iter()
                .all(|terms| terms.iter().any(|t| topology_term(t, labels)))
    }
}
