//! The Node a kubelet registers for an instance: name, provider id, labels, taints,
//! capacity and allocatable, and the annotation that hands it to kwok.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use carpool::catalog::Catalog;
use carpool::model::Resources;
use carpool::model::well_known as wk;
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::instance::Instance;
use crate::tags;

/// The annotation kwok's `--manage-nodes-with-annotation-selector` selects on.
pub const KWOK_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// The Node for `instance` in `region`, its resources from the embedded catalog.
///
/// Labels: the instance type's (`node.kubernetes.io/instance-type`, arch, os and the
/// `karpenter.k8s.aws/*` ones), zone, region, capacity type, hostname,
/// `carpool.sh/managed=true`, the NodePool and EC2NodeClass from the tags, and the
/// `carpool.sh/labels` tag. Taints: `carpool.sh/taints` then `carpool.sh/startup-taints`.
pub fn for_instance(instance: &Instance, region: &str) -> Result<Node> {
    let it = Catalog::embedded()?.get(&instance.instance_type).with_context(|| {
        format!(
            "{}: instance type {} is not in the catalog",
            instance.id, instance.instance_type
        )
    })?;
    let name = instance.node_name();

    let mut labels = it.labels();
    let mut put = |k: &str, v: &str| {
        labels.insert(k.to_string(), v.to_string());
    };
    put(wk::ZONE, &instance.zone);
    put(wk::REGION, region);
    put(wk::CAPACITY_TYPE, instance.capacity_type.label());
    put(wk::HOSTNAME, &name);
    put(wk::CARPOOL_MANAGED, "true");
    let nodepool = instance
        .tags
        .get(tags::KARPENTER_NODEPOOL)
        .or(instance.tags.get(tags::CARPOOL_NODEPOOL));
    if let Some(nodepool) = nodepool {
        put(wk::NODEPOOL, nodepool);
    }
    if let Some(class) = instance.tags.get(tags::EC2NODECLASS) {
        put(wk::EC2NODECLASS, class);
    }
    labels.extend(tags::decode_labels(&instance.tags)?);

    let taints: Vec<_> = tags::decode_taints(&instance.tags, tags::TAINTS)?
        .into_iter()
        .chain(tags::decode_taints(&instance.tags, tags::STARTUP_TAINTS)?)
        .map(|t| t.to_k8s())
        .collect();

    let mut addresses = vec![NodeAddress {
        type_: "Hostname".into(),
        address: name.clone(),
    }];
    if let Some(ip) = &instance.private_ip {
        addresses.insert(
            0,
            NodeAddress {
                type_: "InternalIP".into(),
                address: ip.clone(),
            },
        );
    }

    Ok(Node {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(KWOK_ANNOTATION.to_string(), "fake".to_string())])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(instance.provider_id()),
            taints: (!taints.is_empty()).then_some(taints),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(quantities(&it.capacity)),
            allocatable: Some(quantities(&it.allocatable)),
            addresses: Some(addresses),
            ..NodeStatus::default()
        }),
    })
}

/// Adds the kubelet's `--node-labels` and `--register-with-taints` to a Node.
pub fn apply_kubelet_flags(node: &mut Node, flags: &crate::user_data::KubeletFlags) {
    node.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(flags.labels.clone());
    if flags.taints.is_empty() {
        return;
    }
    let spec = node.spec.get_or_insert_with(NodeSpec::default);
    let taints = spec.taints.get_or_insert_with(Vec::new);
    for t in &flags.taints {
        if !taints.iter().any(|have| have.key == t.key && have.effect == t.effect) {
            taints.push(t.clone());
        }
    }
}

/// A Kubernetes resource list: cpu in millicores, memory and storage in Ki when whole.
pub fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    r.to_k8s()
}

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::types::InstanceStateName;
    use carpool::model::CapacityType;

    use super::*;
    use crate::tags::TagTaint;

    fn instance(instance_type: &str, capacity_type: CapacityType, tags: &[(&str, &str)]) -> Instance {
        Instance {
            id: "i-0123456789abcdef0".into(),
            state: InstanceStateName::Running,
            instance_type: instance_type.into(),
            zone: "us-east-1b".into(),
            private_dns_name: Some("ip-10-20-64-7.ec2.internal".into()),
            private_ip: Some("10.20.64.7".into()),
            capacity_type,
            tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn a_spot_graviton_node_has_the_launch_labels_and_catalog_resources() {
        let taints = tags::encode_taints(&[TagTaint::new("dedicated", "batch", "NoSchedule")]).unwrap();
        let startup = tags::encode_taints(&[TagTaint::new("example.com/agent", "missing", "NoExecute")]).unwrap();
        let i = instance(
            "m7g.xlarge",
            CapacityType::Spot,
            &[
                (tags::CLUSTER, "carpool-local"),
                (tags::KARPENTER_NODEPOOL, "batch"),
                (tags::EC2NODECLASS, "default"),
                (tags::LABELS, r#"{"team":"data"}"#),
                (tags::TAINTS, &taints),
                (tags::STARTUP_TAINTS, &startup),
            ],
        );
        let node = for_instance(&i, "us-east-1").unwrap();

        assert_eq!(node.metadata.name.as_deref(), Some("ip-10-20-64-7.ec2.internal"));
        assert_eq!(node.metadata.annotations.unwrap()[KWOK_ANNOTATION], "fake");
        let labels = node.metadata.labels.unwrap();
        for (k, v) in [
            ("node.kubernetes.io/instance-type", "m7g.xlarge"),
            ("topology.kubernetes.io/zone", "us-east-1b"),
            ("topology.kubernetes.io/region", "us-east-1"),
            ("karpenter.sh/capacity-type", "spot"),
            ("karpenter.sh/nodepool", "batch"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("kubernetes.io/arch", "arm64"),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/hostname", "ip-10-20-64-7.ec2.internal"),
            ("karpenter.k8s.aws/instance-family", "m7g"),
            ("karpenter.k8s.aws/instance-cpu", "4"),
            ("carpool.sh/managed", "true"),
            ("team", "data"),
        ] {
            assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
        }

        let spec = node.spec.unwrap();
        assert_eq!(
            spec.provider_id.as_deref(),
            Some("aws:///us-east-1b/i-0123456789abcdef0")
        );
        let taints: Vec<_> = spec.taints.unwrap().into_iter().map(|t| (t.key, t.effect)).collect();
        assert_eq!(
            taints,
            vec![
                ("dedicated".to_string(), "NoSchedule".to_string()),
                ("example.com/agent".to_string(), "NoExecute".to_string()),
            ]
        );

        let it = Catalog::embedded().unwrap().get("m7g.xlarge").unwrap();
        let status = node.status.unwrap();
        assert_eq!(status.capacity.unwrap()["cpu"].0, "4000m");
        let allocatable = status.allocatable.unwrap();
        assert_eq!(Resources::from_k8s(&allocatable).unwrap(), it.allocatable);
        assert_eq!(status.addresses.unwrap()[0].address, "10.20.64.7");
    }

    #[test]
    fn an_untagged_on_demand_node_has_no_taints_and_no_nodepool() {
        let node = for_instance(&instance("m5.large", CapacityType::OnDemand, &[]), "us-east-1").unwrap();
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert!(!labels.contains_key("karpenter.sh/nodepool"));
        assert_eq!(node.spec.unwrap().taints, None);
    }

    #[test]
    fn an_unknown_instance_type_is_an_error() {
        let err = for_instance(&instance("x99.huge", CapacityType::OnDemand, &[]), "us-east-1").unwrap_err();
        assert!(err.to_string().contains("x99.huge"), "{err}");
    }
}
