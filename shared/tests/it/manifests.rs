//! NodePool and EC2NodeClass manifests, as Karpenter users write them, read by Carpool.

use std::time::Duration;

use carpool::catalog::Catalog;
use carpool::catalog::allocatable::{self, NodeSettings};
use carpool::model::duration::NillableDuration;
use carpool::model::manifest::{ManifestError, from_yaml};
use carpool::model::nodepool::{BudgetNodes, ConsolidationPolicy};
use carpool::model::{EC2NodeClass, NodePool, well_known as wk};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/manifests/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn nodepool_error(yaml: &str) -> ManifestError {
    from_yaml::<NodePool>(yaml).unwrap_err()
}

#[test]
fn the_getting_started_nodepool_reads_with_its_defaults() {
    let np: NodePool = from_yaml(&fixture("nodepool-default.yaml")).unwrap();
    assert_eq!(np.name(), "default");
    assert_eq!(np.weight(), 0);
    assert_eq!(np.spec.template.spec.node_class_ref.name, "default");
    assert_eq!(
        np.spec.template.spec.expire_after,
        NillableDuration::After(Duration::from_secs(720 * 3600))
    );
    assert_eq!(np.spec.limits["cpu"].millis_ceil(), 1_000_000);
    assert_eq!(
        np.spec.disruption.consolidate_after,
        NillableDuration::After(Duration::from_secs(60))
    );
    assert_eq!(
        np.spec.disruption.budgets[0].parsed_nodes(),
        Ok(BudgetNodes::Percent(10)),
        "default budget"
    );
    let reqs = np.requirements().unwrap();
    assert!(reqs.get(wk::INSTANCE_GENERATION).unwrap().has("3"));
    assert!(!reqs.get(wk::INSTANCE_GENERATION).unwrap().has("2"));
    assert_eq!(
        reqs.get(wk::NODEPOOL).unwrap().any(),
        Some("default"),
        "the pool names itself"
    );
}

#[test]
fn a_gpu_nodepool_keeps_taints_labels_weight_and_extended_limits() {
    let np: NodePool = from_yaml(&fixture("nodepool-gpu.yaml")).unwrap();
    assert_eq!(np.weight(), 50);
    assert_eq!(np.spec.template.spec.taints[0].key, "nvidia.com/gpu");
    assert_eq!(np.spec.limits["nvidia.com/gpu"].units_ceil(), 32);
    assert_eq!(np.spec.limits["memory"].units_ceil(), 2 << 40);
    assert_eq!(np.spec.disruption.consolidation_policy, ConsolidationPolicy::WhenEmpty);
    let reqs = np.requirements().unwrap();
    assert_eq!(
        reqs.get("workload").unwrap().any(),
        Some("inference"),
        "template labels become requirements"
    );
    let gpu = reqs.get(wk::INSTANCE_GPU_COUNT).unwrap();
    assert!(gpu.has("4") && !gpu.has("8"));
}

#[test]
fn every_v1_field_reads_and_unknown_fields_are_ignored() {
    let np: NodePool = from_yaml(&fixture("nodepool-full.yaml")).unwrap();
    let spec = &np.spec.template.spec;
    assert_eq!(spec.expire_after, NillableDuration::Never);
    assert_eq!(
        spec.termination_grace_period,
        Some(NillableDuration::After(Duration::from_secs(48 * 3600)))
    );
    assert_eq!(spec.startup_taints.len(), 1);
    assert_eq!(spec.requirements[0].min_values, Some(2));
    assert_eq!(np.spec.limits["nodes"].units_ceil(), 50);
    let budgets = &np.spec.disruption.budgets;
    assert_eq!(budgets.len(), 3);
    assert_eq!(budgets[1].parsed_nodes(), Ok(BudgetNodes::Count(5)));
    assert_eq!(budgets[2].schedule.as_deref(), Some("@daily"));
    assert!(np.status.is_some(), "status is kept");
    let reqs = np.requirements().unwrap();
    assert!(reqs.get(wk::INSTANCE_CPU).unwrap().has("4"), "Gte includes its bound");
    assert!(
        !reqs.get(wk::INSTANCE_MEMORY).unwrap().has("262145"),
        "Lt excludes its bound"
    );
}

#[test]
fn nodepool_errors_name_the_field_path() {
    let base = fixture("nodepool-default.yaml");
    let cases: &[(&str, &str, &str)] = &[
        (
            "operator: Gt",
            "operator: GreaterThan",
            "spec.template.spec.requirements[4].operator",
        ),
        (
            "values: [\"2\"]",
            "values: [\"two\"]",
            "spec.template.spec.requirements[4].values",
        ),
        (
            "values: [\"linux\"]",
            "values: []",
            "spec.template.spec.requirements[1].values",
        ),
        ("cpu: 1000", "cpu: lots", "spec.limits.cpu"),
        (
            "consolidateAfter: 1m",
            "consolidateAfter: soon",
            "spec.disruption.consolidateAfter",
        ),
        (
            "consolidationPolicy: WhenEmptyOrUnderutilized",
            "consolidationPolicy: Always",
            "spec.disruption.consolidationPolicy",
        ),
        (
            "apiVersion: karpenter.sh/v1",
            "apiVersion: karpenter.sh/v1beta1",
            "apiVersion",
        ),
        (
            "        name: default",
            "        name: \"\"",
            "spec.template.spec.nodeClassRef.name",
        ),
        ("  limits:", "  weight: 101\n  limits:", "spec.weight"),
        (
            "key: kubernetes.io/os",
            "key: karpenter.sh/nodepool",
            "spec.template.spec.requirements[1].key",
        ),
        (
            "consolidateAfter: 1m",
            "consolidateAfter: 1m\n    budgets: [{nodes: \"110%\"}]",
            "spec.disruption.budgets[0].nodes",
        ),
        (
            "consolidateAfter: 1m",
            "consolidateAfter: 1m\n    budgets: [{nodes: \"1\", schedule: \"@daily\"}]",
            "spec.disruption.budgets[0]",
        ),
    ];
    for (from, to, path) in cases {
        assert!(base.contains(from), "fixture lacks {from:?}");
        let err = nodepool_error(&base.replacen(from, to, 1));
        assert_eq!(&err.path, path, "changing {from:?} to {to:?}: {err}");
    }
    let err = nodepool_error(&base.replace(
        "          values: [\"c\", \"m\", \"r\"]",
        "          values: [\"c\"]\n          minValues: 3",
    ));
    assert_eq!(err.path, "spec.template.spec.requirements[3].minValues");
    assert!(err.to_string().contains("more than the 1 values"), "{err}");
    let err = nodepool_error(&base.replace(
        "      expireAfter: 720h # 30 * 24h = 720h\n",
        "      taints: [{key: a, effect: Sometimes}]\n",
    ));
    assert_eq!(err.path, "spec.template.spec.taints[0].effect");
}

#[test]
fn a_nodepool_without_a_template_is_an_error_at_spec() {
    let err = nodepool_error("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec: {}\n");
    assert_eq!(err.path, "spec");
    assert!(err.message.contains("template"), "{err}");
}

#[test]
fn the_getting_started_ec2nodeclass_reads() {
    let nc: EC2NodeClass = from_yaml(&fixture("ec2nodeclass-default.yaml")).unwrap();
    assert_eq!(nc.name(), "default");
    assert_eq!(nc.spec.ami_selector_terms[0].alias.as_deref(), Some("al2023@latest"));
    assert_eq!(
        nc.spec.subnet_selector_terms[0].tags["karpenter.sh/discovery"],
        "my-cluster"
    );
    assert_eq!(nc.root_volume_bytes(), None);
}

#[test]
fn an_ec2nodeclass_with_every_field_reads_and_its_kubelet_changes_allocatable() {
    let nc: EC2NodeClass = from_yaml(&fixture("ec2nodeclass-full.yaml")).unwrap();
    let s = &nc.spec;
    assert_eq!(
        s.instance_profile.as_deref(),
        Some("KarpenterNodeInstanceProfile-my-cluster")
    );
    assert_eq!(s.ami_selector_terms.len(), 4);
    assert_eq!(
        s.block_device_mappings[0].ebs.as_ref().unwrap().kms_key_id.as_deref(),
        Some("1234abcd-12ab-34cd-56ef-1234567890ab")
    );
    assert_eq!(
        s.metadata_options.as_ref().unwrap().http_put_response_hop_limit,
        Some(1)
    );
    assert!(s.user_data.as_deref().unwrap().contains("NodeConfig"));
    assert_eq!(nc.root_volume_bytes(), Some(100 << 30));
    // Spelled as Karpenter's API spells them (`associatePublicIPAddress`, not `...Ip...`).
    assert_eq!(s.associate_public_ip_address, Some(false));
    assert_eq!(s.detailed_monitoring, Some(true));
    assert_eq!(s.instance_store_policy.as_deref(), Some("RAID0"));
    assert!(s.context.as_deref().is_some_and(|c| c.ends_with("fleet-context/abc")));

    let kubelet = s.kubelet.clone().unwrap();
    assert_eq!(kubelet.image_gc_high_threshold_percent, Some(85));
    let settings = NodeSettings {
        kubelet,
        root_volume_bytes: nc.root_volume_bytes(),
        ..NodeSettings::default()
    };
    let m5 = Catalog::embedded().unwrap().get("m5.xlarge").unwrap();
    let custom = allocatable::with_settings(m5, &settings);
    assert_eq!(custom.capacity.pods, 8, "podsPerCore 2 × 4 vCPU caps maxPods 20");
    assert_eq!(
        custom.allocatable.cpu_millis,
        4000 - 200 - 100,
        "kubeReserved and systemReserved replace the formula"
    );
    assert_eq!(custom.capacity.ephemeral_storage, 100 << 30);
    // memory: the 5% hard threshold of capacity beats the 500Mi soft one.
    let cap = custom.capacity.memory;
    let evict = (cap as f64 * 0.05).ceil() as i64;
    assert_eq!(custom.allocatable.memory, cap - (100 << 20) - (100 << 20) - evict);
}

#[test]
fn ec2nodeclass_errors_name_the_field_path() {
    let base = fixture("ec2nodeclass-default.yaml");
    let cases: &[(&str, &str, &str)] = &[
        ("  role: \"KarpenterNodeRole-my-cluster\"\n", "", "spec.role"),
        (
            "alias: \"al2023@latest\"",
            "alias: \"ubuntu@latest\"",
            "spec.amiSelectorTerms[0].alias",
        ),
        ("alias: \"al2023@latest\"", "id: ami-1", "spec.amiFamily"),
        (
            "alias: \"al2023@latest\"",
            "alias: \"windows2022@latest\"",
            "spec.amiSelectorTerms[0].alias",
        ),
        (
            "  subnetSelectorTerms:\n    - tags:\n        karpenter.sh/discovery: \"my-cluster\"\n",
            "  subnetSelectorTerms: []\n",
            "spec.subnetSelectorTerms",
        ),
        (
            "  role: \"KarpenterNodeRole-my-cluster\"",
            "  role: r\n  instanceProfile: p",
            "spec.instanceProfile",
        ),
        (
            "  role: \"KarpenterNodeRole-my-cluster\"",
            "  role: r\n  metadataOptions: {httpTokens: maybe}",
            "spec.metadataOptions.httpTokens",
        ),
        (
            "  role: \"KarpenterNodeRole-my-cluster\"",
            "  role: r\n  kubelet: {maxPods: many}",
            "spec.kubelet.maxPods",
        ),
        (
            "  role: \"KarpenterNodeRole-my-cluster\"",
            "  role: r\n  kubelet: {evictionHard: {memory.free: 1Gi}}",
            "spec.kubelet.evictionHard.memory.free",
        ),
        (
            "  role: \"KarpenterNodeRole-my-cluster\"",
            "  role: r\n  blockDeviceMappings: [{ebs: {volumeType: gp9}}]",
            "spec.blockDeviceMappings[0].ebs.volumeType",
        ),
        (
            "  role: \"KarpenterNodeRole-my-cluster\"",
            "  role: r\n  tags: {carpool.sh/cluster: other}",
            "spec.tags[carpool.sh/cluster]",
        ),
    ];
    for (from, to, path) in cases {
        assert!(base.contains(from), "fixture lacks {from:?}");
        let err = from_yaml::<EC2NodeClass>(&base.replacen(from, to, 1)).unwrap_err();
        assert_eq!(&err.path, path, "changing {from:?} to {to:?}: {err}");
    }
}

// Karpenter's `IsRestrictedLabel` (kubernetes-sigs/karpenter `pkg/apis/v1/labels.go`): a
// key in `kubernetes.io`, `k8s.io`, `karpenter.sh` (or the AWS provider's
// `karpenter.k8s.aws`) that is not a well-known label is refused, in requirements and in
// the template's labels; `node.kubernetes.io`, `node-restriction.kubernetes.io` and
// `kops.k8s.io` are excepted. The kubelet, the cloud provider or another tool sets those.
#[test]
fn a_nodepool_that_sets_or_requires_a_label_of_a_restricted_domain_is_refused() {
    let base = fixture("nodepool-default.yaml");
    for key in [
        "kubernetes.io/role",
        "karpenter.sh/team",
        "foo.k8s.io/x",
        "karpenter.k8s.aws/mine",
    ] {
        let err = nodepool_error(&base.replacen("key: kubernetes.io/os", &format!("key: {key}"), 1));
        assert_eq!(err.path, "spec.template.spec.requirements[1].key", "{key}: {err}");
        assert!(err.to_string().contains("is restricted"), "{key}: {err}");
    }
    let with_label = |key: &str| {
        base.replacen(
            "  template:\n",
            &format!("  template:\n    metadata:\n      labels:\n        {key}: \"x\"\n"),
            1,
        )
    };
    let err = nodepool_error(&with_label("kubernetes.io/role"));
    assert_eq!(err.path, "spec.template.metadata.labels[kubernetes.io/role]", "{err}");
    for key in [
        "node.kubernetes.io/lifecycle",
        "node-restriction.kubernetes.io/team",
        "kops.k8s.io/group",
        "karpenter.k8s.aws/instance-family",
        "topology.k8s.aws/zone-id",
        "example.com/team",
    ] {
        let read = from_yaml::<NodePool>(&with_label(key));
        assert!(read.is_ok(), "{key}: {:?}", read.err());
    }
}
