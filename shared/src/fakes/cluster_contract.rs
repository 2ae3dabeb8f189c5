//! The Cluster contract, as one suite every implementation runs: the fake in this crate's
//! tests, the kube adapter against the local stack's apiserver.
//!
//! The port has no way to create pods or nodes, so the suite comes with its scene
//! ([`ClusterScene`]): the caller puts it in the cluster (straight into a
//! [`FakeCluster`](super::FakeCluster), or through the API and waits until kwok runs the
//! pods and the disruption controller has computed the PDBs), then runs
//! [`cluster_contract`].

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, Namespace, Node, NodeSpec, NodeStatus, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeSpec, PodCondition, PodTemplateSpec, Taint, VolumeResourceRequirements,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::storage::v1::{
    CSINode, CSINodeDriver, CSINodeSpec, StorageClass, VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec,
    VolumeNodeResources,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::FakeCluster;
use crate::fixtures::{EC2NodeClassBuilder, NodePoolBuilder};
use crate::model::pod::{Container, Pod, PodSpec, PodStatus};
use crate::model::well_known::TERMINATION_FINALIZER;
use crate::ports::{Cluster, ClusterError, EventReason, Eviction, MetadataPatch, PodEvent, PodRef};

/// The label of the scene's node that every write must keep.
pub const KEEP_LABEL: &str = "example.com/keep";
/// The taint the scene's node starts with, which every write must keep.
pub fn keep_taint() -> Taint {
    Taint {
        key: "example.com/keep".into(),
        value: Some("yes".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

/// The taint the suite adds and removes.
pub fn disrupted_taint() -> Taint {
    Taint {
        key: "carpool.sh/disrupted".into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

/// The objects [`cluster_contract`] expects in the cluster, all named after one unique
/// string (a DNS label, used as the namespace too):
/// - a node `<u>-node` (annotated for kwok) with the label [`KEEP_LABEL`] and the taint
///   [`keep_taint`];
/// - on it, pods `guarded-0`, `guarded-1` (label `app=guarded`) and `free-0`, `free-1`
///   (`app=free`), Running and Ready; and `pending-0` (`app=guarded`), which no node
///   matches, Pending and unbound;
/// - PDBs `guarded` (minAvailable 2: no disruption allowed) and `free` (minAvailable 1:
///   one allowed);
/// - a DaemonSet `agent` that selects no node;
/// - NodePools `<u>-valid` and `<u>-invalid` (a negative limit, which the CRD schema
///   accepts and Carpool does not), and an EC2NodeClass `<u>-valid`;
/// - the namespace `<u>` (label `carpool.sh/contract=<u>`), a StorageClass `<u>-sc`
///   (`WaitForFirstConsumer`, provisioner `ebs.csi.aws.com`), a claim `<u>/data` of that
///   class (unbound), a PersistentVolume `<u>-pv` of no class (so it binds to nothing),
///   and a CSINode `<u>-node` whose `ebs.csi.aws.com` driver allows 25 volumes.
#[derive(Clone, Debug)]
pub struct ClusterScene {
    /// The namespace, and the prefix of the cluster-scoped names.
    pub unique: String,
    /// The node.
    pub node: Node,
    /// The pods, with the status kwok and the scheduler would give them.
    pub pods: Vec<Pod>,
    /// The PDBs (status left for the disruption controller).
    pub pdbs: Vec<PodDisruptionBudget>,
    /// The DaemonSets.
    pub daemonsets: Vec<DaemonSet>,
    /// The NodePools, as JSON.
    pub nodepools: Vec<serde_json::Value>,
    /// The EC2NodeClasses, as JSON.
    pub ec2nodeclasses: Vec<serde_json::Value>,
    /// The NodeOverlays, as JSON: `<u>-valid`, which selects no real instance type (so that
    /// it changes no price other tests on the stack see), and `<u>-invalid`, which the
    /// CRD accepts and Karpenter's runtime validation refuses.
    pub nodeoverlays: Vec<serde_json::Value>,
    /// The CapacityBuffers, as JSON, in the namespace: `<u>-valid`, of two chunks of the
    /// PodTemplate `<u>-chunk`, and `<u>-invalid`, which the CRD accepts and Carpool
    /// refuses (a schedule without its duration and size).
    pub capacity_buffers: Vec<serde_json::Value>,
    /// The PodTemplate `<u>-chunk`.
    pub pod_templates: Vec<k8s_openapi::api::core::v1::PodTemplate>,
    /// The namespace.
    pub namespace: Namespace,
    /// The StorageClass.
    pub storage_class: StorageClass,
    /// The claim.
    pub pvc: PersistentVolumeClaim,
    /// The PersistentVolume.
    pub pv: PersistentVolume,
    /// The node's CSINode.
    pub csinode: CSINode,
    /// A VolumeAttachment of the PersistentVolume to the node.
    pub attachment: VolumeAttachment,
}

/// The CSI driver of the scene's storage objects.
pub const CONTRACT_DRIVER: &str = "ebs.csi.aws.com";
/// The volumes the scene's CSINode allows for [`CONTRACT_DRIVER`].
pub const CONTRACT_VOLUME_LIMIT: i32 = 25;

fn storage_objects(
    unique: &str,
    node_name: &str,
) -> (
    Namespace,
    StorageClass,
    PersistentVolumeClaim,
    PersistentVolume,
    CSINode,
) {
    let namespace = Namespace {
        metadata: meta(None, unique, &[("carpool.sh/contract", unique)]),
        ..Namespace::default()
    };
    let storage_class = StorageClass {
        metadata: meta(None, &format!("{unique}-sc"), &[]),
        provisioner: CONTRACT_DRIVER.into(),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        ..StorageClass::default()
    };
    let storage = BTreeMap::from([("storage".to_string(), Quantity("1Gi".into()))]);
    let pvc = PersistentVolumeClaim {
        metadata: meta(Some(unique), "data", &[]),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: Some(format!("{unique}-sc")),
            resources: Some(VolumeResourceRequirements {
                requests: Some(storage.clone()),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    };
    let pv = PersistentVolume {
        metadata: meta(None, &format!("{unique}-pv"), &[]),
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            capacity: Some(storage),
            csi: Some(CSIPersistentVolumeSource {
                driver: CONTRACT_DRIVER.into(),
                volume_handle: format!("vol-{unique}"),
                ..CSIPersistentVolumeSource::default()
            }),
            storage_class_name: Some(String::new()),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    };
    let csinode = CSINode {
        metadata: meta(None, node_name, &[]),
        spec: CSINodeSpec {
            drivers: vec![CSINodeDriver {
                name: CONTRACT_DRIVER.into(),
                node_id: format!("i-{unique}"),
                allocatable: Some(VolumeNodeResources {
                    count: Some(CONTRACT_VOLUME_LIMIT),
                }),
                topology_keys: None,
            }],
        },
    };
    (namespace, storage_class, pvc, pv, csinode)
}

/// A pod by namespace and name, with no UID precondition.
fn by_name(namespace: &str, name: &str) -> PodRef {
    PodRef {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: None,
    }
}

fn meta(namespace: Option<&str>, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: (!labels.is_empty()).then(|| labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..ObjectMeta::default()
    }
}

fn pod_spec(node: Option<&str>) -> PodSpec {
    PodSpec {
        containers: vec![Container {
            name: "main".into(),
            image: Some("registry.k8s.io/pause:3.10".into()),
            ..Container::default()
        }],
        node_name: node.map(str::to_string),
        // The unbound pod asks for a label no node has, so it stays Pending.
        node_selector: node
            .is_none()
            .then(|| BTreeMap::from([("carpool.sh/contract".to_string(), "nowhere".to_string())])),
        tolerations: None,
        termination_grace_period_seconds: Some(0),
        ..PodSpec::default()
    }
}

/// The DaemonSet's template: the unbound pod's spec, as the API's type.
fn k8s_pod_spec() -> k8s_openapi::api::core::v1::PodSpec {
    let spec = pod_spec(None);
    k8s_openapi::api::core::v1::PodSpec {
        containers: vec![k8s_openapi::api::core::v1::Container {
            name: "main".into(),
            image: spec.containers[0].image.clone(),
            ..Default::default()
        }],
        node_selector: spec.node_selector,
        ..Default::default()
    }
}

fn running() -> PodStatus {
    PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..PodCondition::default()
        }]),
        ..PodStatus::default()
    }
}

fn pdb(namespace: &str, name: &str, app: &str, min_available: i32) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(Some(namespace), name, &[]),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available)),
            selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_string(), app.to_string())])),
                match_expressions: None,
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

fn nodepool(name: &str, cpu_limit: &str) -> serde_json::Value {
    NodePoolBuilder::new(name)
        .limit_cpu(cpu_limit)
        .requirement("karpenter.sh/capacity-type", "In", &["spot"])
        .build()
}

/// A CapacityBuffer of `replicas` chunks of PodTemplate `template` in namespace `ns`.
fn capacity_buffer(ns: &str, name: &str, template: &str, annotations: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"podTemplateRef": {"name": template}, "replicas": 2},
    })
}

/// A NodeOverlay with one requirement, at $0.01/h.
fn nodeoverlay(name: &str, requirement: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {"requirements": [requirement], "price": "0.01", "weight": 1},
    })
}

impl ClusterScene {
    /// The scene named after `unique` (a DNS label of at most 40 characters).
    pub fn new(unique: &str) -> Self {
        let ns = unique;
        let node_name = format!("{unique}-node");
        let node = Node {
            metadata: ObjectMeta {
                annotations: Some(BTreeMap::from([("kwok.x-k8s.io/node".to_string(), "fake".to_string())])),
                ..meta(
                    None,
                    &node_name,
                    &[
                        (KEEP_LABEL, "yes"),
                        ("kubernetes.io/hostname", &node_name),
                        (crate::model::well_known::WAVE_LABEL, &format!("{unique}-w1")),
                    ],
                )
            },
            spec: Some(NodeSpec {
                taints: Some(vec![keep_taint()]),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("4".into())),
                    ("memory".to_string(), Quantity("16Gi".into())),
                    ("pods".to_string(), Quantity("110".into())),
                ])),
                capacity: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("4".into())),
                    ("memory".to_string(), Quantity("16Gi".into())),
                    ("pods".to_string(), Quantity("110".into())),
                ])),
                ..NodeStatus::default()
            }),
        };
        let bound = |name: &str, app: &str| Pod {
            metadata: meta(Some(ns), name, &[("app", app)]),
            spec: Some(pod_spec(Some(&node_name))),
            status: Some(running()),
        };
        let pods = vec![
            bound("guarded-0", "guarded"),
            bound("guarded-1", "guarded"),
            bound("free-0", "free"),
            bound("free-1", "free"),
            Pod {
                metadata: meta(Some(ns), "pending-0", &[("app", "guarded")]),
                spec: Some(pod_spec(None)),
                status: Some(PodStatus {
                    phase: Some("Pending".into()),
                    ..PodStatus::default()
                }),
            },
        ];
        let agent = BTreeMap::from([("app".to_string(), "agent".to_string())]);
        let daemonset = DaemonSet {
            metadata: meta(Some(ns), "agent", &[]),
            spec: Some(DaemonSetSpec {
                selector: LabelSelector {
                    match_labels: Some(agent.clone()),
                    match_expressions: None,
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(agent),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(k8s_pod_spec()),
                },
                ..DaemonSetSpec::default()
            }),
            status: None,
        };
        let ec2nodeclass = EC2NodeClassBuilder::new(&format!("{unique}-valid"))
            .al2023()
            .role("KarpenterNodeRole-carpool-local")
            .discovery("carpool-local")
            .build();
        let (namespace, storage_class, pvc, pv, csinode) = storage_objects(unique, &node_name);
        let attachment = VolumeAttachment {
            metadata: meta(None, &format!("{unique}-va"), &[]),
            spec: VolumeAttachmentSpec {
                attacher: CONTRACT_DRIVER.into(),
                node_name: node_name.clone(),
                source: VolumeAttachmentSource {
                    persistent_volume_name: Some(format!("{unique}-pv")),
                    ..VolumeAttachmentSource::default()
                },
            },
            status: None,
        };
        ClusterScene {
            attachment,
            namespace,
            storage_class,
            pvc,
            pv,
            csinode,
            unique: unique.to_string(),
            node,
            pods,
            pdbs: vec![pdb(ns, "guarded", "guarded", 2), pdb(ns, "free", "free", 1)],
            daemonsets: vec![daemonset],
            nodepools: vec![
                nodepool(&format!("{unique}-valid"), "100"),
                nodepool(&format!("{unique}-invalid"), "-1"),
            ],
            ec2nodeclasses: vec![ec2nodeclass],
            nodeoverlays: vec![
                nodeoverlay(
                    &format!("{unique}-valid"),
                    serde_json::json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [unique]}),
                ),
                nodeoverlay(
                    &format!("{unique}-invalid"),
                    serde_json::json!({"key": "node.kubernetes.io/instance-type", "operator": "Exists", "values": [unique]}),
                ),
            ],
            capacity_buffers: vec![
                capacity_buffer(
                    ns,
                    &format!("{unique}-valid"),
                    &format!("{unique}-chunk"),
                    serde_json::json!({}),
                ),
                capacity_buffer(
                    ns,
                    &format!("{unique}-invalid"),
                    &format!("{unique}-chunk"),
                    serde_json::json!({crate::model::capacity_buffer::SCHEDULE_ANNOTATION: "0 8 * * *"}),
                ),
            ],
            pod_templates: vec![
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("{unique}-chunk"), "namespace": ns},
                    "template": {"metadata": {"labels": {"app": "chunk"}},
                        "spec": {"containers": [{"name": "c", "image": "nginx",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}},
                }))
                .unwrap_or_default(),
            ],
        }
    }

    /// The node's name.
    pub fn node_name(&self) -> String {
        format!("{}-node", self.unique)
    }

    /// Puts the scene into a fake cluster.
    pub fn load_into(&self, fake: &FakeCluster) {
        fake.add_node(self.node.clone());
        self.pods.iter().for_each(|p| fake.add_pod(p.clone()));
        self.pdbs.iter().for_each(|p| fake.add_pdb(p.clone()));
        self.daemonsets.iter().for_each(|d| fake.add_daemonset(d.clone()));
        self.nodepools.iter().for_each(|n| fake.add_nodepool(n.clone()));
        self.ec2nodeclasses
            .iter()
            .for_each(|n| fake.add_ec2nodeclass(n.clone()));
        self.nodeoverlays.iter().for_each(|n| fake.add_nodeoverlay(n.clone()));
        self.capacity_buffers
            .iter()
            .for_each(|b| fake.add_capacity_buffer(b.clone()));
        self.pod_templates.iter().for_each(|t| fake.add_pod_template(t.clone()));
        fake.add_namespace(self.namespace.clone());
        fake.add_storage_class(self.storage_class.clone());
        fake.add_pvc(self.pvc.clone());
        fake.add_pv(self.pv.clone());
        fake.add_csinode(self.csinode.clone());
        if let Some(pv) = &self.attachment.spec.source.persistent_volume_name {
            fake.attach_volume(&self.attachment.spec.node_name, pv);
        }
    }
}

fn pod_names<'a>(pods: &'a [Pod], namespace: &str) -> Vec<&'a str> {
    let mut names: Vec<&str> = pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    names.sort_unstable();
    names
}

async fn node_of<C: Cluster>(cluster: &C, name: &str) -> Node {
    let nodes = cluster.nodes().await;
    let found = nodes
        .as_ref()
        .ok()
        .and_then(|ns| ns.iter().find(|n| n.metadata.name.as_deref() == Some(name)));
    match found {
        Some(n) => n.clone(),
        None => panic!("node {name} is listed: {nodes:?}"),
    }
}

/// The node's taints, without the ones Kubernetes manages itself (`node.kubernetes.io/*`,
/// e.g. `not-ready` while a new node starts), which come and go on a real cluster.
fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| !t.key.starts_with("node.kubernetes.io/"))
        .map(|t| Taint { time_added: None, ..t })
        .collect()
}

fn label(node: &Node, key: &str) -> Option<String> {
    node.metadata.labels.as_ref().and_then(|l| l.get(key).cloned())
}

fn annotation(node: &Node, key: &str) -> Option<String> {
    node.metadata.annotations.as_ref().and_then(|l| l.get(key).cloned())
}

fn not_found<T: std::fmt::Debug>(r: &Result<T, ClusterError>) -> bool {
    matches!(r, Err(ClusterError::NotFound { .. }))
}

fn named<'a, T>(
    items: &'a [T],
    meta: impl Fn(&T) -> &ObjectMeta,
    namespace: Option<&str>,
    name: &str,
) -> Option<&'a T> {
    items
        .iter()
        .find(|o| meta(o).namespace.as_deref() == namespace && meta(o).name.as_deref() == Some(name))
}

/// The storage reads: PersistentVolumes, claims, StorageClasses, CSINodes, Namespaces.
async fn storage_reads<C: Cluster>(cluster: &C, scene: &ClusterScene) {
    let u = scene.unique.as_str();
    let pvs = cluster.persistent_volumes().await;
    let pv_name = format!("{u}-pv");
    let driver = |pv: &PersistentVolume| pv.spec.as_ref().and_then(|s| s.csi.as_ref()).map(|c| c.driver.clone());
    assert!(
        matches!(&pvs, Ok(l) if named(l, |o| &o.metadata, None, &pv_name).and_then(driver).as_deref() == Some(CONTRACT_DRIVER)),
        "persistent_volumes lists the volume with its CSI driver: {pvs:?}"
    );
    let pvcs = cluster.persistent_volume_claims().await;
    let class_name = format!("{u}-sc");
    let class_of = |c: &PersistentVolumeClaim| c.spec.as_ref().and_then(|s| s.storage_class_name.clone());
    assert!(
        matches!(&pvcs, Ok(l) if named(l, |o| &o.metadata, Some(u), "data").and_then(class_of).as_deref() == Some(class_name.as_str())),
        "persistent_volume_claims lists the claim in its namespace: {pvcs:?}"
    );
    let classes = cluster.storage_classes().await;
    assert!(
        matches!(&classes, Ok(l) if named(l, |o| &o.metadata, None, &class_name)
            .is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") && c.provisioner == CONTRACT_DRIVER)),
        "storage_classes lists the class with its binding mode: {classes:?}"
    );
    let csinodes = cluster.csinodes().await;
    let node = scene.node_name();
    let limit = |c: &CSINode| {
        c.spec
            .drivers
            .iter()
            .find(|d| d.name == CONTRACT_DRIVER)
            .and_then(|d| d.allocatable.as_ref())
            .and_then(|a| a.count)
    };
    assert!(
        matches!(&csinodes, Ok(l) if named(l, |o| &o.metadata, None, &node).and_then(limit) == Some(CONTRACT_VOLUME_LIMIT)),
        "csinodes lists the node's drivers with their limits: {csinodes:?}"
    );
    let attached = cluster.attached_volumes(&node).await;
    assert!(
        matches!(&attached, Ok(pvs) if pvs == &vec![format!("{}-pv", scene.unique)]),
        "attached_volumes names the PersistentVolume attached to the node: {attached:?}"
    );
    let attached = cluster.attached_volumes(&format!("{}-elsewhere", scene.unique)).await;
    assert!(
        matches!(&attached, Ok(pvs) if pvs.is_empty()),
        "attached_volumes of another node is empty: {attached:?}"
    );
    let namespaces = cluster.namespaces().await;
    let label = |n: &Namespace| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("carpool.sh/contract").cloned())
    };
    assert!(
        matches!(&namespaces, Ok(l) if named(l, |o| &o.metadata, None, u).and_then(label).as_deref() == Some(u)),
        "namespaces lists the namespace with its labels: {namespaces:?}"
    );
}

/// `write_status` merges into the status of a NodePool and of an EC2NodeClass through the
/// status subresource, leaves their spec alone, and is `NotFound` for a missing object.
async fn statuses<C: Cluster>(cluster: &C, name: &str) {
    use crate::ports::StatusOf;
    let ready = serde_json::json!([{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
    let pool_status = serde_json::json!({"nodes": 3, "resources": {"cpu": "12", "nodes": "3"}, "conditions": ready});
    let r = cluster.write_status(StatusOf::NodePool, name, &pool_status).await;
    assert!(r.is_ok(), "write_status NodePool: {r:?}");
    let pools = cluster.nodepools().await.map(|v| v.valid).unwrap_or_default();
    let pool = pools.iter().find(|p| p.name() == name);
    assert!(
        pool.and_then(|p| p.status.as_ref())
            .is_some_and(|s| s["nodes"] == 3 && s["resources"]["cpu"] == "12" && s["conditions"][0]["type"] == "Ready"),
        "the NodePool's status reads back: {pool:?}"
    );
    assert!(
        pool.is_some_and(|p| p.spec.limits.contains_key("cpu")),
        "and its spec is as it was: {pool:?}"
    );
    let class_status = serde_json::json!({"subnets": [{"id": "subnet-1", "zone": "us-east-1a"}],
        "securityGroups": [{"id": "sg-1"}], "conditions": ready});
    let r = cluster.write_status(StatusOf::EC2NodeClass, name, &class_status).await;
    assert!(r.is_ok(), "write_status EC2NodeClass: {r:?}");
    let classes = cluster.ec2nodeclasses().await.map(|v| v.valid).unwrap_or_default();
    let class = classes.iter().find(|c| c.name() == name);
    assert!(
        class
            .and_then(|c| c.status.as_ref())
            .is_some_and(|s| s["subnets"][0]["id"] == "subnet-1" && s["securityGroups"][0]["id"] == "sg-1"),
        "the class's status reads back: {class:?}"
    );
    // A second write of some fields keeps the others.
    let r = cluster
        .write_status(StatusOf::NodePool, name, &serde_json::json!({"nodes": 4}))
        .await;
    assert!(r.is_ok(), "write_status NodePool again: {r:?}");
    let pools = cluster.nodepools().await.map(|v| v.valid).unwrap_or_default();
    let status = pools.iter().find(|p| p.name() == name).and_then(|p| p.status.clone());
    assert!(
        status
            .as_ref()
            .is_some_and(|s| s["nodes"] == 4 && s["resources"]["cpu"] == "12"),
        "a merge keeps the fields not given: {status:?}"
    );
    let missing = cluster
        .write_status(StatusOf::NodePool, &format!("{name}-missing"), &pool_status)
        .await;
    assert!(
        matches!(missing, Err(ClusterError::NotFound { .. })),
        "a missing NodePool is NotFound: {missing:?}"
    );
}

/// Runs the Cluster contract (see [`Cluster`]) against `cluster`, which holds `scene`
/// settled: the bound pods Running and Ready, the PDBs computed (for a real cluster,
/// `status.observedGeneration` current). Panics on the first breach, naming it. It
/// evicts pods, changes the node and deletes it last.
pub async fn cluster_contract<C: Cluster>(cluster: &C, scene: &ClusterScene) {
    let ns = scene.unique.as_str();
    let node = scene.node_name();

    // Reads.
    let pending = cluster.pending_pods().await;
    assert!(
        matches!(&pending, Ok(p) if pod_names(p, ns) == ["pending-0"]),
        "pending_pods lists the unbound pod only: {pending:?}"
    );
    let scheduled = cluster.scheduled_pods().await;
    assert!(
        matches!(&scheduled, Ok(p) if pod_names(p, ns) == ["free-0", "free-1", "guarded-0", "guarded-1"]),
        "scheduled_pods lists the bound pods, not the pending one: {scheduled:?}"
    );
    let on_node = cluster.pods_on_node(&node).await;
    assert!(
        matches!(&on_node, Ok(p) if pod_names(p, ns) == ["free-0", "free-1", "guarded-0", "guarded-1"]),
        "pods_on_node lists the bound pods: {on_node:?}"
    );
    let elsewhere = cluster.pods_on_node(&format!("{}-missing", scene.unique)).await;
    assert!(
        matches!(&elsewhere, Ok(p) if p.is_empty()),
        "an unknown node has no pods: {elsewhere:?}"
    );
    let listed = node_of(cluster, &node).await;
    assert_eq!(
        label(&listed, KEEP_LABEL).as_deref(),
        Some("yes"),
        "the node's labels are read"
    );
    let names = |nodes: Result<Vec<Node>, ClusterError>| -> Vec<String> {
        nodes
            .unwrap_or_default()
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .filter(|n| n.starts_with(ns))
            .collect()
    };
    let waves = [format!("{ns}-w0"), format!("{ns}-w1")];
    assert_eq!(
        names(cluster.nodes_of_waves(&waves).await),
        vec![node.clone()],
        "nodes_of_waves lists the node labelled with one of the waves"
    );
    assert!(
        names(cluster.nodes_of_waves(&[format!("{ns}-w2")]).await).is_empty(),
        "nodes_of_waves leaves out a node of another wave"
    );
    let ds = cluster.daemonsets().await;
    assert!(
        matches!(&ds, Ok(d) if d.iter().any(|d| d.metadata.namespace.as_deref() == Some(ns) && d.metadata.name.as_deref() == Some("agent"))),
        "daemonsets lists the DaemonSet: {ds:?}"
    );
    let pdbs = cluster.pdbs().await;
    let allowed = |name: &str| {
        pdbs.as_ref().ok().and_then(|ps| {
            ps.iter()
                .find(|p| p.metadata.namespace.as_deref() == Some(ns) && p.metadata.name.as_deref() == Some(name))
                .and_then(|p| p.status.as_ref())
                .map(|s| s.disruptions_allowed)
        })
    };
    assert_eq!(
        (allowed("guarded"), allowed("free")),
        (Some(0), Some(1)),
        "pdbs lists both with their status: {pdbs:?}"
    );
    let nodepools = cluster.nodepools().await;
    let valid_name = format!("{}-valid", scene.unique);
    let invalid_name = format!("{}-invalid", scene.unique);
    assert!(
        matches!(&nodepools, Ok(v) if v.valid.iter().any(|n| n.metadata.name.as_deref() == Some(valid_name.as_str()))
            && !v.valid.iter().any(|n| n.metadata.name.as_deref() == Some(invalid_name.as_str()))
            && v.invalid.iter().any(|i| i.name == invalid_name && i.reason.contains("spec.limits.cpu"))),
        "nodepools reads the valid one and names the invalid one's field: {nodepools:?}"
    );
    let classes = cluster.ec2nodeclasses().await;
    assert!(
        matches!(&classes, Ok(v) if v.valid.iter().any(|n| n.metadata.name.as_deref() == Some(valid_name.as_str()))),
        "ec2nodeclasses reads the valid one: {classes:?}"
    );
    let overlays = cluster.nodeoverlays().await;
    assert!(
        matches!(&overlays, Ok(v) if v.valid.iter().any(|o| o.name() == valid_name)
            && !v.valid.iter().any(|o| o.name() == invalid_name)
            && v.invalid.iter().any(|i| i.name == invalid_name && i.reason.contains("spec.requirements[0]"))),
        "nodeoverlays reads the valid one and names the invalid one's field: {overlays:?}"
    );
    let buffers = cluster.capacity_buffers().await;
    assert!(
        matches!(&buffers, Ok(v) if v.valid.iter().any(|b| b.name() == valid_name)
            && !v.valid.iter().any(|b| b.name() == invalid_name)
            && v.invalid.iter().any(|i| i.name == invalid_name && i.reason.contains("carpool.sh/buffer-schedule"))),
        "capacity_buffers reads the valid one and names the invalid one's annotation: {buffers:?}"
    );
    let templates = cluster.pod_templates().await;
    let chunk = format!("{}-chunk", scene.unique);
    assert!(
        matches!(&templates, Ok(v) if v.iter().any(|t| t.metadata.name.as_deref() == Some(chunk.as_str())
            && t.template.is_some())),
        "pod_templates reads the buffer's template: {templates:?}"
    );

    statuses(cluster, &valid_name).await;

    storage_reads(cluster, scene).await;

    // A pending pod handed a wave: the toleration is added once, the others kept.
    let wave = crate::decide::waves::wave::wave_toleration(&format!("{ns}-w0"));
    let listed = cluster.pending_pods().await.unwrap_or_default();
    let pod = listed.iter().find(|p| p.metadata.namespace.as_deref() == Some(ns));
    assert!(pod.is_some(), "the pending pod is listed: {listed:?}");
    if let Some(pod) = pod {
        let before = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default();
        let r = cluster.tolerate(pod, &wave).await;
        assert!(r.is_ok(), "tolerate: {r:?}");
        let again = cluster.pending_pods().await.unwrap_or_default();
        let after = again
            .iter()
            .find(|p| p.metadata.namespace.as_deref() == Some(ns))
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default();
        let mut expected = before.clone();
        expected.push(wave.clone());
        assert_eq!(after, expected, "tolerate adds the toleration and keeps the others");
        if let Some(tolerated) = again.iter().find(|p| p.metadata.namespace.as_deref() == Some(ns)) {
            let r = cluster.tolerate(tolerated, &wave).await;
            assert!(r.is_ok(), "tolerating again is a no-op: {r:?}");
        }
        let mut gone = pod.clone();
        gone.metadata.name = Some("no-such-pod".into());
        let r = cluster.tolerate(&gone, &wave).await;
        assert!(not_found(&r), "tolerate of a missing pod: {r:?}");
    }

    // Evictions.
    let r = cluster.evict(&by_name(ns, "guarded-0")).await;
    assert!(
        matches!(&r, Ok(Eviction::Blocked { .. })),
        "a PDB with no disruption allowed blocks: {r:?}"
    );
    let r = cluster.evict(&by_name(ns, "free-0")).await;
    assert!(
        matches!(&r, Ok(Eviction::Evicted)),
        "a PDB with a disruption allowed lets one pod go: {r:?}"
    );
    let r = cluster.evict(&by_name(ns, "free-1")).await;
    assert!(
        matches!(&r, Ok(Eviction::Blocked { .. })),
        "the eviction used the PDB's one disruption: {r:?}"
    );
    let pending = PodRef {
        namespace: ns.to_string(),
        name: "pending-0".into(),
        uid: Some("not-the-pods-uid".into()),
    };
    let r = cluster.evict(&pending).await;
    assert!(
        matches!(&r, Err(ClusterError::Conflict(_))),
        "an eviction whose UID precondition fails is a conflict: {r:?}"
    );
    let r = cluster.evict(&by_name(ns, "pending-0")).await;
    assert!(
        matches!(&r, Ok(Eviction::Evicted)),
        "a Pending pod is evicted whatever its PDB: {r:?}"
    );
    let r = cluster.evict(&by_name(ns, "never-was")).await;
    assert!(matches!(&r, Ok(Eviction::Gone)), "a missing pod is gone: {r:?}");

    // Node writes keep what they do not change.
    let r = cluster.cordon(&node).await;
    assert!(r.is_ok(), "cordon: {r:?}");
    assert!(cluster.cordon(&node).await.is_ok(), "cordon again");
    let after = node_of(cluster, &node).await;
    assert_eq!(
        after.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "cordon sets unschedulable"
    );
    assert_eq!(label(&after, KEEP_LABEL).as_deref(), Some("yes"), "cordon keeps labels");
    assert_eq!(taints(&after), [keep_taint()], "cordon keeps taints");

    let r = cluster.taint(&node, &disrupted_taint()).await;
    assert!(r.is_ok(), "taint: {r:?}");
    let r = cluster.taint(&node, &disrupted_taint()).await;
    assert!(r.is_ok(), "taint again: {r:?}");
    let after = node_of(cluster, &node).await;
    assert_eq!(
        taints(&after),
        [keep_taint(), disrupted_taint()],
        "taint adds once and keeps the others"
    );
    assert_eq!(label(&after, KEEP_LABEL).as_deref(), Some("yes"), "taint keeps labels");
    assert_eq!(
        after.spec.as_ref().and_then(|s| s.unschedulable),
        Some(true),
        "taint keeps unschedulable"
    );

    let patch_labels: MetadataPatch = BTreeMap::from([("carpool.sh/contract".to_string(), Some("1".to_string()))]);
    let patch_annotations: MetadataPatch =
        BTreeMap::from([("carpool.sh/note".to_string(), Some("contract".to_string()))]);
    let r = cluster
        .patch_labels_annotations(&node, &patch_labels, &patch_annotations)
        .await;
    assert!(r.is_ok(), "patch_labels_annotations: {r:?}");
    let after = node_of(cluster, &node).await;
    assert_eq!(label(&after, "carpool.sh/contract").as_deref(), Some("1"), "label set");
    assert_eq!(
        annotation(&after, "carpool.sh/note").as_deref(),
        Some("contract"),
        "annotation set"
    );
    assert_eq!(label(&after, KEEP_LABEL).as_deref(), Some("yes"), "other labels kept");
    assert_eq!(
        annotation(&after, "kwok.x-k8s.io/node").as_deref(),
        Some("fake"),
        "other annotations kept"
    );
    let remove: MetadataPatch = BTreeMap::from([("carpool.sh/contract".to_string(), None)]);
    let r = cluster
        .patch_labels_annotations(&node, &remove, &MetadataPatch::new())
        .await;
    assert!(r.is_ok(), "patch_labels_annotations removing: {r:?}");
    let after = node_of(cluster, &node).await;
    assert_eq!(label(&after, "carpool.sh/contract"), None, "label removed");
    assert_eq!(label(&after, KEEP_LABEL).as_deref(), Some("yes"), "other labels kept");
    assert_eq!(
        taints(&after),
        [keep_taint(), disrupted_taint()],
        "patching keeps taints"
    );

    let r = cluster.untaint(&node, &disrupted_taint()).await;
    assert!(r.is_ok(), "untaint: {r:?}");
    let r = cluster.untaint(&node, &disrupted_taint()).await;
    assert!(r.is_ok(), "untaint again: {r:?}");
    let after = node_of(cluster, &node).await;
    assert_eq!(taints(&after), [keep_taint()], "untaint removes only its taint");

    // A missing node.
    let missing = format!("{}-missing", scene.unique);
    let r = cluster.cordon(&missing).await;
    assert!(not_found(&r), "cordon of a missing node: {r:?}");
    let r = cluster.taint(&missing, &disrupted_taint()).await;
    assert!(not_found(&r), "taint of a missing node: {r:?}");
    let r = cluster.untaint(&missing, &disrupted_taint()).await;
    assert!(not_found(&r), "untaint of a missing node: {r:?}");
    let r = cluster
        .patch_labels_annotations(&missing, &patch_labels, &MetadataPatch::new())
        .await;
    assert!(not_found(&r), "patch of a missing node: {r:?}");
    let r = cluster.delete_node(&missing, "no-such-uid").await;
    assert!(r.is_ok(), "deleting a missing node succeeds: {r:?}");

    // An Event about a pod of the scene (evicted by now: the pod need not exist).
    let event = PodEvent::new(
        PodRef {
            namespace: ns.to_string(),
            name: "pending-0".into(),
            uid: None,
        },
        EventReason::FailedScheduling,
        "Failed to schedule pod, contract",
    );
    let r = cluster.publish_event(&event).await;
    assert!(r.is_ok(), "publish_event: {r:?}");

    // Delete with the UID as read: a stale UID (a Node re-created under the same name)
    // is a conflict and deletes nothing; then delete, twice.
    let uid = cluster
        .nodes()
        .await
        .ok()
        .and_then(|nodes| {
            nodes
                .into_iter()
                .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
        })
        .and_then(|n| n.metadata.uid)
        .unwrap_or_default();
    let r = cluster.delete_node(&node, "0b7f1c9e-0000-4000-8000-000000000000").await;
    assert!(
        matches!(r, Err(ClusterError::Conflict(_))),
        "delete with a stale UID: {r:?}"
    );
    // With Carpool's finalizer, a delete marks the node and leaves it; removing the
    // finalizer lets it go. Adding twice keeps one.
    let finalizers = |nodes: &[Node]| {
        nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))
            .map(|n| {
                (
                    n.metadata.finalizers.clone().unwrap_or_default(),
                    n.metadata.deletion_timestamp.is_some(),
                )
            })
    };
    assert!(cluster.add_finalizer(&node).await.is_ok());
    assert!(cluster.add_finalizer(&node).await.is_ok());
    let listed = cluster.nodes().await.unwrap_or_default();
    assert_eq!(
        finalizers(&listed),
        Some((vec![TERMINATION_FINALIZER.to_string()], false)),
        "add_finalizer adds it once"
    );
    let r = cluster.delete_node(&node, &uid).await;
    assert!(r.is_ok(), "delete_node: {r:?}");
    let listed = cluster.nodes().await.unwrap_or_default();
    assert_eq!(
        finalizers(&listed),
        Some((vec![TERMINATION_FINALIZER.to_string()], true)),
        "a node with Carpool's finalizer is marked for deletion and stays"
    );
    assert!(cluster.remove_finalizer(&node).await.is_ok());
    let r = cluster.delete_node(&node, &uid).await;
    assert!(r.is_ok(), "delete_node again: {r:?}");
    assert!(
        cluster.remove_finalizer(&node).await.is_ok(),
        "removing it from a node gone is success"
    );
    let nodes = cluster.nodes().await;
    assert!(
        matches!(&nodes, Ok(n) if !n.iter().any(|n| n.metadata.name.as_deref() == Some(node.as_str()))),
        "a deleted node is not listed: {nodes:?}"
    );
}
