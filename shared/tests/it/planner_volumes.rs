//! The planner and the volumes pods mount, ephemeral storage and extended resources: each
//! test builds a small cluster dump, plans it, runs the independent checker on the plan,
//! and asserts what a user sees. Each names the upstream rule it follows.

use carpool::catalog::Catalog;
use carpool::decide::provisioning::unschedulable::{Reason, VolumeProblem};
use carpool::decide::{ProvisioningPlan, provisioning_plan_with_bound};
use carpool::fixtures::{EC2NodeClassBuilder, NodeBuilder, NodePoolBuilder, PodBuilder};
use serde_json::{Value, json};

use crate::support::{node_of, plan, pod};

/// A pod mounting the claims named.
fn with_claims(p: PodBuilder, claims: &[&str]) -> Value {
    let volumes: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    p.spec("volumes", json!(volumes)).build()
}

/// A StorageClass of the EBS CSI driver.
fn storage_class(name: &str, binding: &str, allowed_zones: Option<&[&str]>) -> Value {
    let mut sc = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": binding});
    if let Some(zones) = allowed_zones {
        sc["allowedTopologies"] =
            json!([{"matchLabelExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "values": zones}]}]);
    }
    sc
}

/// An unbound claim of a class.
fn claim(name: &str, class: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class, "resources": {"requests": {"storage": "10Gi"}}},
        "status": {"phase": "Pending"}})
}

/// A claim bound to an EBS volume in a zone, with the volume.
fn bound_claim(name: &str, zone: &str) -> [Value; 2] {
    let pv = format!("pv-{name}");
    [
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                     "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": format!("vol-{name}")},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": [zone]}]}]}}},
            "status": {"phase": "Bound"}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3", "volumeName": pv,
                     "resources": {"requests": {"storage": "10Gi"}}},
            "status": {"phase": "Bound"}}),
    ]
}

fn existing_node(name: &str, zone: &str) -> Value {
    NodeBuilder::new(name)
        .zone(zone)
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/os", "linux")
        .label("karpenter.sh/capacity-type", "on-demand")
        .instance_type("m5.xlarge")
        .provider_id(&format!("aws:///{zone}/i-0{name}"))
        .allocatable("cpu", "4")
        .allocatable("memory", "16Gi")
        .allocatable("pods", "58")
        .ready(true)
        .build()
}

fn csinode(node: &str, ebs_limit: i32) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": node},
        "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": format!("i-0{node}"),
                              "allocatable": {"count": ebs_limit}, "topologyKeys": ["topology.ebs.csi.aws.com/zone"]}]}})
}

fn volume_reason(p: &ProvisioningPlan, pod: &str) -> (String, VolumeProblem) {
    let u = p
        .unschedulable
        .iter()
        .find(|u| u.pod == format!("default/{pod}"))
        .unwrap_or_else(|| panic!("{pod} is not unschedulable: {p:#?}"));
    match u.reasons.as_slice() {
        [Reason::Volume { claim, problem }] => (claim.clone(), problem.clone()),
        other => panic!("{pod}: {other:?}"),
    }
}

#[test]
fn an_unbound_wait_for_first_consumer_claim_launches_in_a_zone_its_storage_class_allows() {
    // kube-scheduler: volumebinding (*volumeBinder).checkVolumeProvisions,
    // MatchTopologySelectorTerms(class.AllowedTopologies, node labels); Karpenter:
    // VolumeTopology.getStorageClassRequirements. The EBS CSI zone key reads as the zone.
    let p = plan(vec![
        storage_class("gp3-d", "WaitForFirstConsumer", Some(&["us-east-1d"])),
        claim("data", "gp3-d"),
        with_claims(pod("db-0", "1", "2Gi"), &["data"]),
    ]);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(node_of(&p, "db-0").zone, "us-east-1d");
}

#[test]
fn an_unbound_claim_of_a_class_without_allowed_topologies_launches_in_any_zone() {
    // kube-scheduler: MatchTopologySelectorTerms with no terms matches every node.
    let p = plan(vec![
        storage_class("gp3", "WaitForFirstConsumer", None),
        claim("data", "gp3"),
        with_claims(pod("db-0", "1", "2Gi"), &["data"]),
    ]);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(p.nodes.len(), 1);
}

#[test]
fn a_pod_whose_claim_is_missing_is_not_launched_for() {
    // kube-scheduler: volumebinding PreFilter, GetPodVolumes -> UnschedulableAndUnresolvable
    // "persistentvolumeclaim not found"; Karpenter: ValidatePersistentVolumeClaims.
    let p = plan(vec![with_claims(pod("db-0", "1", "2Gi"), &["gone"])]);
    assert!(p.nodes.is_empty(), "{:?}", p.nodes);
    assert_eq!(
        volume_reason(&p, "db-0"),
        ("default/gone".to_string(), VolumeProblem::ClaimNotFound)
    );
}

#[test]
fn a_pod_whose_claim_is_unbound_with_immediate_binding_is_not_launched_for() {
    // kube-scheduler: volumebinding PreFilter, "pod has unbound immediate
    // PersistentVolumeClaims" (UnschedulableAndUnresolvable); Karpenter:
    // ValidatePersistentVolumeClaims, "pvc with immediate volume binding mode must be bound".
    let p = plan(vec![
        storage_class("gp3-now", "Immediate", None),
        claim("data", "gp3-now"),
        with_claims(pod("db-0", "1", "2Gi"), &["data"]),
        pod("web-0", "1", "2Gi").build(),
    ]);
    assert_eq!(
        volume_reason(&p, "db-0"),
        ("default/data".to_string(), VolumeProblem::UnboundImmediate)
    );
    assert_eq!(p.nodes.len(), 1, "only web-0 gets a node");
    node_of(&p, "web-0");
}

#[test]
fn a_pod_whose_unbound_claim_names_a_missing_storage_class_is_not_launched_for() {
    // kube-scheduler: volume.IsDelayBindingMode reads a missing class as Immediate, so the
    // claim is unbound immediate; Karpenter: ValidatePersistentVolumeClaims, "failed to get
    // storage class".
    let p = plan(vec![
        claim("data", "nowhere"),
        with_claims(pod("db-0", "1", "2Gi"), &["data"]),
    ]);
    assert!(p.nodes.is_empty());
    assert_eq!(
        volume_reason(&p, "db-0"),
        (
            "default/data".to_string(),
            VolumeProblem::StorageClassNotFound {
                storage_class: "nowhere".into()
            }
        )
    );
}

#[test]
fn a_pod_whose_claim_is_bound_to_a_missing_volume_is_not_launched_for() {
    // kube-scheduler: (*volumeBinder).checkBoundClaims, ErrReasonPVNotExist on every node;
    // Karpenter: validateVolume.
    let [_, pvc] = bound_claim("data", "us-east-1a");
    let p = plan(vec![pvc, with_claims(pod("db-0", "1", "2Gi"), &["data"])]);
    assert!(p.nodes.is_empty());
    assert_eq!(
        volume_reason(&p, "db-0"),
        (
            "default/data".to_string(),
            VolumeProblem::VolumeNotFound {
                volume: "pv-data".into()
            }
        )
    );
}

#[test]
fn a_pod_that_would_exceed_an_existing_nodes_volume_limit_goes_to_another_node() {
    // kube-scheduler: nodevolumelimits (*CSILimits).Filter, the CSINode's
    // spec.drivers[].allocatable.count against the node's attached volumes plus the pod's
    // new ones; Karpenter: ExistingNode.CanAdd, VolumeUsage.ExceedsLimits.
    let [pv, pvc] = bound_claim("old-data", "us-east-1a");
    let bound = PodBuilder::new("old-0")
        .requests("100m", "128Mi")
        .spec("nodeName", json!("n1"))
        .spec(
            "volumes",
            json!([{"name": "d", "persistentVolumeClaim": {"claimName": "old-data"}}]),
        )
        .running()
        .build();
    let items = vec![
        existing_node("n1", "us-east-1a"),
        csinode("n1", 1),
        pv,
        pvc,
        bound,
        storage_class("gp3", "WaitForFirstConsumer", None),
        claim("new-data", "gp3"),
        with_claims(pod("db-0", "500m", "1Gi"), &["new-data"]),
        pod("web-0", "500m", "1Gi").build(),
    ];
    let p = plan(items.clone());
    let on_n1: Vec<&String> = p
        .existing
        .iter()
        .filter(|e| e.node == "n1")
        .flat_map(|e| &e.pods)
        .collect();
    assert_eq!(on_n1, ["default/web-0"], "a pod without volumes still fits n1");
    node_of(&p, "db-0");

    // With room for a second volume, db-0 stays on n1.
    let mut roomy = items;
    roomy[1] = csinode("n1", 2);
    let p = plan(roomy);
    assert!(p.nodes.is_empty(), "{:?}", p.nodes);
}

#[test]
fn pods_whose_ebs_volumes_exceed_a_new_nodes_attach_limit_are_spread_over_more_nodes() {
    // The new node's limit is what the EBS CSI driver will put in its CSINode
    // (aws-ebs-csi-driver (*NodeService).getVolumesLimit: m5.xlarge attaches 27, less the
    // root volume: 26), which kube-scheduler's CSILimits enforces once the node is up.
    // Karpenter v1.15 sets none before a CSINode exists (VolumeUsage limits come from
    // state.Cluster.populateVolumeLimits alone); kube-scheduler decides, so Carpool plans
    // with the driver's.
    let pool = NodePoolBuilder::new("m5")
        .requirement("node.kubernetes.io/instance-type", "In", &["m5.xlarge"])
        .build();
    let mut items = vec![pool, storage_class("gp3", "WaitForFirstConsumer", None)];
    for i in 0..30 {
        let name = format!("data-{i}");
        items.push(claim(&name, "gp3"));
        items.push(with_claims(pod(&format!("db-{i}"), "10m", "16Mi"), &[&name]));
    }
    let p = plan(items);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    assert_eq!(p.nodes.len(), 2, "30 volumes, 26 per m5.xlarge");
    assert!(p.nodes.iter().all(|n| n.pods.len() <= 26), "{:?}", p.nodes);
}

#[test]
fn an_instance_store_raid0_class_gives_a_pod_the_instance_store_as_ephemeral_storage() {
    // Karpenter: pkg/providers/instancetype/types.go ephemeralStorage: with
    // instanceStorePolicy RAID0, InstanceStorageInfo.TotalSizeInGB is the node's
    // ephemeral-storage.
    let class = EC2NodeClassBuilder::standard()
        .set("instanceStorePolicy", json!("RAID0"))
        .build();
    let big_scratch = pod("etl-0", "1", "2Gi").request("ephemeral-storage", "200Gi").build();
    let p = plan(vec![class.clone(), big_scratch.clone()]);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let node = node_of(&p, "etl-0");
    let catalog = Catalog::embedded().unwrap();
    for t in &node.instance_types {
        let it = catalog.get(t).unwrap();
        assert!(
            it.local_storage_gb >= 200,
            "{t} has {} GB of instance store",
            it.local_storage_gb
        );
    }
    assert!(node.allocatable.ephemeral_storage >= 200 << 30, "{node:?}");

    // Without RAID0 the root volume (20 GiB) is the ephemeral storage: nothing fits.
    let p = plan(vec![EC2NodeClassBuilder::standard().build(), big_scratch]);
    assert!(p.nodes.is_empty(), "{:?}", p.nodes);
}

#[test]
fn a_pod_requesting_efa_gets_a_type_with_efa_interfaces() {
    // Karpenter: pkg/providers/instancetype/types.go efas(): capacity
    // vpc.amazonaws.com/efa is NetworkInfo.EfaInfo.MaximumEfaInterfaces.
    let p = plan(vec![
        pod("train-0", "4", "16Gi")
            .request("vpc.amazonaws.com/efa", "1")
            .build(),
    ]);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    let node = node_of(&p, "train-0");
    let catalog = Catalog::embedded().unwrap();
    for t in &node.instance_types {
        assert!(catalog.get(t).unwrap().efa > 0, "{t} has no EFA");
    }
}

// Karpenter's scheduler reads these objects from the API server, so the snapshot must too:
// pkg/controllers/provisioning/scheduling/volumetopology.go `VolumeTopology.Inject` (now
// `GetRequirements`) calls `getRequirements`, which gets each volume's PVC, then its PV
// (`getPersistentVolumeRequirements`) or its StorageClass (`getStorageClassRequirements`);
// pkg/scheduling/volumeusage.go `GetVolumes` and `ResolveDriver` read the PVC, PV and
// StorageClass to count volumes per CSI driver; pkg/controllers/state/cluster.go
// `Cluster.populateVolumeLimits` reads each node's CSINode (`spec.drivers[].allocatable
// .count`); scheduling/topology.go `Topology.buildNamespaceList` lists the Namespaces a
// term's namespaceSelector matches.
#[test]
fn the_lambdas_snapshot_reads_claims_volumes_classes_csinodes_and_namespaces() {
    // The provisioner plans on what run::observe::read_snapshot reads through
    // the Cluster port: a WaitForFirstConsumer claim's zone, from its StorageClass, reaches
    // the plan.
    use carpool::fakes::FakeCluster;
    use carpool::run::observe::read_snapshot;
    let cluster = FakeCluster::new();
    fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }
    cluster.add_storage_class(from(storage_class(
        "gp3-f",
        "WaitForFirstConsumer",
        Some(&["us-east-1f"]),
    )));
    cluster.add_pvc(from(claim("data", "gp3-f")));
    let [pv, pvc] = bound_claim("other", "us-east-1a");
    cluster.add_pv(from(pv));
    cluster.add_pvc(from(pvc));
    cluster.add_csinode(from(csinode("n1", 3)));
    cluster.add_namespace(from(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"team": "a"}}}),
    ));
    cluster.add_pod(from(with_claims(pod("db-0", "1", "2Gi"), &["data"])));
    let snapshot = pollster::block_on(read_snapshot(&cluster)).unwrap();
    assert_eq!(
        (
            snapshot.pvs.len(),
            snapshot.pvcs.len(),
            snapshot.storage_classes.len(),
            snapshot.csinodes.len(),
            snapshot.namespaces.len()
        ),
        (1, 2, 1, 1, 1)
    );
    assert_eq!(
        snapshot.namespace_labels("default").get("team").map(String::as_str),
        Some("a")
    );
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let p = provisioning_plan_with_bound(&snapshot, &region);
    assert_eq!(node_of(&p, "db-0").zone, "us-east-1f");
}
