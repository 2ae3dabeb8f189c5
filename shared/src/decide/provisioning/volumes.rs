//! The volumes a pod mounts, read for scheduling: the zones they bind it to, the claims
//! that keep it off every node, and the volumes it attaches, per CSI driver.
//!
//! - **Zones** (kube-scheduler's volumebinding `FindPodVolumes`; Karpenter's
//!   `volumetopology.go`): a bound claim's PersistentVolume `nodeAffinity`; an unbound
//!   claim of a `WaitForFirstConsumer` class, its StorageClass's `allowedTopologies`
//!   (`checkVolumeProvisions`, `getStorageClassRequirements`). The EBS CSI driver's zone
//!   key `topology.ebs.csi.aws.com/zone` (and the old beta zone key) is read as
//!   `topology.kubernetes.io/zone`, which new nodes carry.
//! - **Claims that block** (volumebinding PreFilter, `GetPodVolumes`; Karpenter's
//!   `ValidatePersistentVolumeClaims`): a claim that is missing, being deleted or `Lost`; a
//!   bound claim whose volume is missing; an unbound claim whose class binds `Immediate`,
//!   is missing or is not set. A claim is bound when it names a volume and carries
//!   `pv.kubernetes.io/bind-completed`; one that names a volume without it is "prebound",
//!   which kube-scheduler treats as unbound immediate.
//! - **Attachments** (kube-scheduler's nodevolumelimits `CSILimits`; Karpenter's
//!   `VolumeUsage`): each claim counts once per node, under its driver: the bound
//!   volume's CSI driver (an in-tree `awsElasticBlockStore` volume as `ebs.csi.aws.com`),
//!   else the class's provisioner (`kubernetes.io/aws-ebs` as `ebs.csi.aws.com`). Claims
//!   without a driver (no class, a non-CSI volume) count against nothing.
//!
//! Generic ephemeral volumes use the claim `<pod>-<volume>`, as both do.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use crate::decide::provisioning::unschedulable::PodError;
use crate::decide::provisioning::unschedulable::VolumeProblem;
use crate::model::Requirements;
use crate::model::pod::{Pod, Volume};
use crate::model::pod_requirements::from_k8s as requirement_from_k8s;
use crate::model::requirements::Requirement;
use crate::model::well_known::BIND_COMPLETED;
use crate::model::well_known::ZONE;
use crate::snapshot::Snapshot;

/// The EBS CSI driver.
pub const EBS_CSI_DRIVER: &str = crate::catalog::allocatable::EBS_CSI_DRIVER;
/// The in-tree EBS provisioner, migrated to [`EBS_CSI_DRIVER`].
const IN_TREE_EBS: &str = "kubernetes.io/aws-ebs";
/// The beta annotation that names a claim's class before `spec.storageClassName`.
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// A volume a pod attaches: its driver and the claim (`namespace/name`) that names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeUse {
    /// The CSI driver, e.g. `ebs.csi.aws.com`.
    pub driver: String,
    /// The claim, `namespace/name`: one claim is one volume, however many pods mount it.
    pub claim: String,
}

/// A claim that keeps a pod off every node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// The claim, `namespace/name`.
    pub claim: String,
    /// Why.
    pub problem: VolumeProblem,
}

/// The claims, volumes and classes of a snapshot, indexed.
#[derive(Default)]
pub struct Volumes<'a> {
    claims: HashMap<(String, String), &'a PersistentVolumeClaim>,
    volumes: HashMap<String, &'a PersistentVolume>,
    /// `None` when the classes are not known (see [`Volumes::new`]).
    classes: Option<HashMap<String, &'a StorageClass>>,
}

/// The zone key a volume's topology term names, as new nodes carry it.
fn zone_key(key: &str) -> &str {
    match key {
        "topology.ebs.csi.aws.com/zone" | "failure-domain.beta.kubernetes.io/zone" => ZONE,
        other => other,
    }
}

/// The claim a pod volume names: its `persistentVolumeClaim`, or the claim of a generic
/// ephemeral volume (`<pod>-<volume>`).
fn claim_name(pod: &Pod, volume: &Volume) -> Option<String> {
    if let Some(c) = &volume.persistent_volume_claim {
        return Some(c.claim_name.clone());
    }
    volume
        .ephemeral
        .as_ref()
        .map(|_| format!("{}-{}", pod.metadata.name.as_deref().unwrap_or_default(), volume.name))
}

/// The class a claim names: the beta annotation, else `spec.storageClassName`; empty for
/// none (`GetPersistentVolumeClaimClass`).
fn class_name(pvc: &PersistentVolumeClaim) -> String {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_CLASS_ANNOTATION).cloned())
        .or_else(|| pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()))
        .unwrap_or_default()
}

fn volume_name(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Bound: names a volume and the volume controller finished binding (`isPVCFullyBound`:
/// the annotation; the controller sets it before the `Bound` phase, which is read as bound
/// too).
fn fully_bound(pvc: &PersistentVolumeClaim) -> bool {
    volume_name(pvc).is_some()
        && (pvc
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(BIND_COMPLETED))
            || pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
}

/// A provisioner's CSI driver: in-tree EBS is migrated to the EBS CSI driver.
fn csi_name(provisioner: &str) -> &str {
    if provisioner == IN_TREE_EBS {
        EBS_CSI_DRIVER
    } else {
        provisioner
    }
}

impl<'a> Volumes<'a> {
    /// Indexes claims by namespace and name, volumes by name. Without the StorageClasses,
    /// an unbound claim binds the pod to no zone and blocks nothing.
    pub fn new(pvcs: &'a [PersistentVolumeClaim], pvs: &'a [PersistentVolume]) -> Self {
        let claims = pvcs
            .iter()
            .filter_map(|c| Some(((c.metadata.namespace.clone()?, c.metadata.name.clone()?), c)))
            .collect();
        let volumes = pvs.iter().filter_map(|v| Some((v.metadata.name.clone()?, v))).collect();
        Volumes {
            claims,
            volumes,
            classes: None,
        }
    }

    /// Adds the StorageClasses.
    pub fn with_classes(mut self, classes: &'a [StorageClass]) -> Self {
        self.classes = Some(
            classes
                .iter()
                .filter_map(|c| Some((c.metadata.name.clone()?, c)))
                .collect(),
        );
        self
    }

    /// The claims, volumes and classes of a snapshot.
    pub fn of(snapshot: &'a Snapshot) -> Self {
        Volumes::new(&snapshot.pvcs, &snapshot.pvs).with_classes(&snapshot.storage_classes)
    }

    /// The claims a pod mounts, with their names; `None` for a claim not found.
    fn pod_claims<'p>(
        &'p self,
        pod: &'p Pod,
        namespace: &'p str,
    ) -> impl Iterator<Item = (String, Option<&'a PersistentVolumeClaim>)> + 'p {
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(move |v| claim_name(pod, v))
            .map(move |name| {
                let pvc = self.claims.get(&(namespace.to_string(), name.clone())).copied();
                (name, pvc)
            })
    }

    fn class(&self, pvc: &PersistentVolumeClaim) -> Option<&'a StorageClass> {
        self.classes.as_ref()?.get(&class_name(pvc)).copied()
    }

    /// The first claim that keeps the pod off every node, if any (see the module doc).
    pub fn blocked(&self, pod: &Pod) -> Option<Blocked> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        for (name, pvc) in self.pod_claims(pod, namespace) {
            let claim = format!("{namespace}/{name}");
            let blocked = |problem| Some(Blocked { claim, problem });
            let Some(pvc) = pvc else {
                return blocked(VolumeProblem::ClaimNotFound);
            };
            if pvc.metadata.deletion_timestamp.is_some() {
                return blocked(VolumeProblem::ClaimDeleting);
            }
            if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
                return blocked(VolumeProblem::ClaimLost);
            }
            if fully_bound(pvc) {
                if let Some(volume) = volume_name(pvc)
                    && !self.volumes.contains_key(volume)
                {
                    return blocked(VolumeProblem::VolumeNotFound {
                        volume: volume.to_string(),
                    });
                }
                continue;
            }
            // Unbound: only a claim of a WaitForFirstConsumer class, naming no volume yet,
            // waits for the scheduler. Without the classes, nothing is known.
            let Some(classes) = &self.classes else { continue };
            let class = class_name(pvc);
            let delayed = match classes.get(&class) {
                Some(sc) => sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"),
                None if class.is_empty() => false,
                None => {
                    return blocked(VolumeProblem::StorageClassNotFound { storage_class: class });
                }
            };
            if !delayed || volume_name(pvc).is_some() {
                return blocked(VolumeProblem::UnboundImmediate);
            }
        }
        None
    }

    /// The node requirement branches of the volumes a pod mounts: the zones of bound
    /// volumes, and the `allowedTopologies` of the classes of unbound ones.
    pub(super) fn branches(&self, pod: &Pod, namespace: &str) -> Result<Vec<Requirements>, PodError> {
        let mut out = vec![Requirements::new()];
        for (name, pvc) in self.pod_claims(pod, namespace) {
            let Some(pvc) = pvc else { continue };
            let volume_branches = match volume_name(pvc) {
                Some(v) => match self.volumes.get(v) {
                    Some(pv) => pv_branches(pv, &name)?,
                    None => continue,
                },
                None => match self.class(pvc) {
                    Some(sc) => class_branches(sc),
                    None => continue,
                },
            };
            if volume_branches.is_empty() {
                continue;
            }
            out = out
                .iter()
                .flat_map(|a| volume_branches.iter().map(move |b| a.intersection(b)))
                .collect();
        }
        Ok(out)
    }

    /// The volumes a pod attaches, per driver, sorted, each claim once.
    pub fn uses(&self, pod: &Pod, namespace: &str) -> Vec<VolumeUse> {
        let mut out: Vec<VolumeUse> = self
            .pod_claims(pod, namespace)
            .filter_map(|(name, pvc)| {
                let driver = self.driver(pvc?)?;
                Some(VolumeUse {
                    driver,
                    claim: format!("{namespace}/{name}"),
                })
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The driver of a claim's volume (Karpenter's `ResolveDriver`): the bound volume's,
    /// else the class's provisioner.
    fn driver(&self, pvc: &PersistentVolumeClaim) -> Option<String> {
        if let Some(v) = volume_name(pvc) {
            let spec = self.volumes.get(v)?.spec.as_ref()?;
            if let Some(csi) = &spec.csi {
                return Some(csi.driver.clone());
            }
            return spec
                .aws_elastic_block_store
                .as_ref()
                .map(|_| EBS_CSI_DRIVER.to_string());
        }
        let sc = self.class(pvc)?;
        Some(csi_name(&sc.provisioner).to_string())
    }
}

/// A bound volume's `nodeAffinity` terms, as branches.
fn pv_branches(pv: &PersistentVolume, claim: &str) -> Result<Vec<Requirements>, PodError> {
    let terms = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    let mut branches = Vec::new();
    for term in terms {
        let mut r = Requirements::new();
        for e in term.match_expressions.iter().flatten() {
            let mut e = e.clone();
            e.key = zone_key(&e.key).to_string();
            r.add(requirement_from_k8s(&e).map_err(|source| PodError::Volume {
                claim: claim.to_string(),
                source,
            })?);
        }
        branches.push(r);
    }
    Ok(branches)
}

/// A class's `allowedTopologies` terms, as branches (`MatchTopologySelectorTerms`: the
/// terms are ORed, a term's expressions ANDed, each an `In`); none means anywhere.
fn class_branches(sc: &StorageClass) -> Vec<Requirements> {
    sc.allowed_topologies
        .iter()
        .flatten()
        .map(|term| {
            let mut r = Requirements::new();
            for e in term.match_label_expressions.iter().flatten() {
                r.add(Requirement::in_values(zone_key(&e.key), e.values.iter().cloned()));
            }
            r
        })
        .filter(|r| !r.is_empty())
        .collect()
}

/// The volume attach limits of existing nodes: per node name, per driver, the CSINode's
/// `spec.drivers[].allocatable.count` (kube-scheduler's `CSILimits`; a driver without one
/// has no limit).
pub fn csinode_limits(csinodes: &[CSINode]) -> HashMap<String, BTreeMap<String, u32>> {
    csinodes
        .iter()
        .filter_map(|c| {
            let limits = c
                .spec
                .drivers
                .iter()
                .filter_map(|d| {
                    let count = d.allocatable.as_ref()?.count?;
                    Some((d.name.clone(), u32::try_from(count).unwrap_or(0)))
                })
                .collect();
            Some((c.metadata.name.clone()?, limits))
        })
        .collect()
}

/// The volumes attached to one node, per driver.
#[derive(Clone, Debug, Default)]
pub struct VolumeUsage {
    used: BTreeMap<String, BTreeSet<String>>,
}

impl VolumeUsage {
    /// Records a pod's volumes on the node.
    pub fn add(&mut self, uses: &[VolumeUse]) {
        for u in uses {
            self.used.entry(u.driver.clone()).or_default().insert(u.claim.clone());
        }
    }

    /// The volumes of `driver` the node would attach with `uses` added.
    pub fn count_with(&self, driver: &str, uses: &[VolumeUse]) -> usize {
        let attached = self.used.get(driver);
        let new = uses
            .iter()
            .filter(|u| u.driver == driver && attached.is_none_or(|a| !a.contains(&u.claim)))
            .count();
        attached.map_or(0, BTreeSet::len) + new
    }

    /// The first driver whose limit `uses` would exceed (Karpenter's `ExceedsLimits`;
    /// kube-scheduler's `CSILimits`: attached + new > limit).
    pub fn exceeds<'u>(&self, uses: &'u [VolumeUse], limit: impl Fn(&str) -> Option<u32>) -> Option<&'u str> {
        uses.iter()
            .map(|u| u.driver.as_str())
            .find(|&driver| limit(driver).is_some_and(|l| self.count_with(driver, uses) > l as usize))
    }
}
