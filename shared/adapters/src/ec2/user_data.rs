//! The user data of a node: an AL2023 nodeadm `NodeConfig` that joins the cluster (name,
//! endpoint, CA, service CIDR), gives the kubelet its labels and taints (`spec.kubelet.flags`)
//! and the EC2NodeClass's kubelet settings (`spec.kubelet.config`), and with
//! `instanceStorePolicy: RAID0` has nodeadm stripe the instance store into the node's
//! ephemeral storage (`spec.instance.localStorage.strategy: RAID0`); merged with the
//! EC2NodeClass's own `userData` into one MIME multipart document, as Karpenter does for
//! AL2023 (`Nodeadm.getNodeConfigYAML` in `pkg/providers/amifamily/bootstrap/nodeadm.go`):
//!
//! - `spec.kubelet.config` holds only the fields the class sets, under their
//!   KubeletConfiguration names (`maxPods`, `podsPerCore`, `kubeReserved`,
//!   `systemReserved`, `evictionHard`, `evictionSoft`, `evictionSoftGracePeriod`,
//!   `evictionMaxPodGracePeriod`, `imageGCHighThresholdPercent`,
//!   `imageGCLowThresholdPercent`, `cpuCFSQuota`, `clusterDNS`), as Karpenter passes the
//!   class's `spec.kubelet` through (`generateInlineKubeletConfiguration`): nodeadm
//!   computes the EKS defaults of the rest (max pods from the ENIs, kube-reserved), as the
//!   planner does (`carpool::catalog::allocatable`).
//!
//! - Carpool's NodeConfig is the first part; nodeadm merges NodeConfigs in document order,
//!   later values winning, so the user's NodeConfig can refine it.
//! - The user's data follows: the parts of a MIME multipart document as they are; a
//!   NodeConfig YAML as an `application/node.eks.aws` part; anything else as a
//!   `text/x-shellscript` part.
//! - Without user data the document has Carpool's part alone (nodeadm reads MIME).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use serde_json::json;

use super::mime::{self, MimeError, Part};
use crate::cluster_info::ClusterInfo;
use carpool::catalog::allocatable::INSTANCE_STORE_RAID0;
use carpool::model::kubelet::KubeletConfiguration;

/// The content type nodeadm reads NodeConfigs from.
pub const NODE_CONFIG_CONTENT_TYPE: &str = "application/node.eks.aws";
/// The content type of a shell script part.
pub const SHELL_SCRIPT_CONTENT_TYPE: &str = "text/x-shellscript";

/// User data that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum UserDataError {
    /// The NodeConfig could not be written.
    #[error("writing the NodeConfig")]
    Yaml(#[source] serde_yaml_ng::Error),
    /// The EC2NodeClass's user data is MIME that cannot be read.
    #[error("the EC2NodeClass userData")]
    Mime(#[source] MimeError),
}

/// `--node-labels=` with the labels as `k=v`, comma-separated.
pub(crate) fn node_labels_flag(labels: &BTreeMap<String, String>) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("--node-labels={}", labels.join(","))
}

/// `--register-with-taints=` with the taints as `k=v:Effect` (or `k:Effect`), comma-separated.
pub(crate) fn taints_flag(taints: &[Taint]) -> String {
    let taints: Vec<String> = taints
        .iter()
        .map(|t| match t.value.as_deref() {
            Some(v) if !v.is_empty() => format!("{}={}:{}", t.key, v, t.effect),
            _ => format!("{}:{}", t.key, t.effect),
        })
        .collect();
    format!("--register-with-taints={}", taints.join(","))
}

/// The NodeConfig YAML (not yet base64) for a node of `cluster` with these labels and
/// taints, the class's kubelet settings and its `instanceStorePolicy`; flags, kubelet
/// settings and the local storage strategy are left out when there is nothing to pass.
pub fn node_config(
    cluster: &ClusterInfo,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    kubelet: Option<&KubeletConfiguration>,
    instance_store_policy: Option<&str>,
) -> Result<String, serde_yaml_ng::Error> {
    let mut flags = Vec::new();
    if !labels.is_empty() {
        flags.push(node_labels_flag(labels));
    }
    if !taints.is_empty() {
        flags.push(taints_flag(taints));
    }
    // The model serializes under the KubeletConfiguration names and skips what is unset.
    let config = match kubelet {
        Some(k) => serde_json::to_value(k).map_err(<serde_yaml_ng::Error as serde::ser::Error>::custom)?,
        None => serde_json::Value::Null,
    };
    let mut spec = json!({
        "cluster": {
            "name": cluster.name,
            "apiServerEndpoint": cluster.endpoint,
            "certificateAuthority": cluster.ca_base64,
            "cidr": cluster.service_cidr,
        }
    });
    let mut kubelet = serde_json::Map::new();
    if config.as_object().is_some_and(|c| !c.is_empty()) {
        kubelet.insert("config".into(), config);
    }
    if !flags.is_empty() {
        kubelet.insert("flags".into(), json!(flags));
    }
    if !kubelet.is_empty() {
        spec["kubelet"] = serde_json::Value::Object(kubelet);
    }
    if instance_store_policy == Some(INSTANCE_STORE_RAID0) {
        spec["instance"] = json!({ "localStorage": { "strategy": INSTANCE_STORE_RAID0 } });
    }
    serde_yaml_ng::to_string(&json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": spec,
    }))
}

/// Whether `text` is a NodeConfig (YAML of kind `NodeConfig` in `node.eks.aws`).
fn is_node_config(text: &str) -> bool {
    serde_yaml_ng::from_str::<serde_json::Value>(text).is_ok_and(|v| {
        v["kind"] == "NodeConfig" && v["apiVersion"].as_str().is_some_and(|a| a.starts_with("node.eks.aws/"))
    })
}

/// The parts of the EC2NodeClass's user data.
fn user_parts(user_data: &str) -> Result<Vec<Part>, MimeError> {
    if mime::is_mime(user_data) {
        return mime::parts(user_data);
    }
    let content_type = if is_node_config(user_data) {
        NODE_CONFIG_CONTENT_TYPE
    } else {
        SHELL_SCRIPT_CONTENT_TYPE
    };
    Ok(vec![Part::New {
        content_type: content_type.into(),
        body: user_data.to_string(),
    }])
}

/// The whole user data (not yet base64): a MIME multipart document of Carpool's NodeConfig
/// ([`node_config`]) and then the parts of `user_data` (the EC2NodeClass's), if any.
pub fn user_data(
    cluster: &ClusterInfo,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    kubelet: Option<&KubeletConfiguration>,
    instance_store_policy: Option<&str>,
    user_data: Option<&str>,
) -> Result<String, UserDataError> {
    let mut parts = vec![Part::New {
        content_type: NODE_CONFIG_CONTENT_TYPE.into(),
        body: node_config(cluster, labels, taints, kubelet, instance_store_policy).map_err(UserDataError::Yaml)?,
    }];
    if let Some(own) = user_data.filter(|u| !u.trim().is_empty()) {
        parts.extend(user_parts(own).map_err(UserDataError::Mime)?);
    }
    Ok(mime::document(&parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> ClusterInfo {
        ClusterInfo::new("demo", "https://demo.example", "Q0E=", "10.100.0.0/16")
    }

    /// The (content type, body) of each part of a document.
    fn parsed(doc: &str) -> Vec<(String, String)> {
        let mail = mailparse::parse_mail(doc.as_bytes()).unwrap();
        assert_eq!(mail.ctype.mimetype, "multipart/mixed");
        mail.subparts
            .iter()
            .map(|p| (p.ctype.mimetype.clone(), p.get_body().unwrap()))
            .collect()
    }

    #[test]
    fn without_user_data_the_document_has_the_node_config_alone() {
        let parts = parsed(&user_data(&cluster(), &BTreeMap::new(), &[], None, None, None).unwrap());
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].0, NODE_CONFIG_CONTENT_TYPE);
        let v: serde_json::Value = serde_yaml_ng::from_str(&parts[0].1).unwrap();
        assert_eq!(v["spec"]["cluster"]["apiServerEndpoint"], "https://demo.example");
        assert_eq!(v["spec"]["cluster"]["certificateAuthority"], "Q0E=");
        assert_eq!(v["spec"]["cluster"]["cidr"], "10.100.0.0/16");
    }

    #[test]
    fn a_shell_script_and_a_node_config_become_their_parts_after_carpools() {
        let script = "#!/bin/bash\necho hello\n";
        let parts = parsed(&user_data(&cluster(), &BTreeMap::new(), &[], None, None, Some(script)).unwrap());
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].0, NODE_CONFIG_CONTENT_TYPE);
        assert_eq!(parts[1].0, SHELL_SCRIPT_CONTENT_TYPE);
        assert!(parts[1].1.contains("echo hello"));

        let config =
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 110\n";
        let parts = parsed(&user_data(&cluster(), &BTreeMap::new(), &[], None, None, Some(config)).unwrap());
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1].0, NODE_CONFIG_CONTENT_TYPE);
        let v: serde_json::Value = serde_yaml_ng::from_str(&parts[1].1).unwrap();
        assert_eq!(v["spec"]["kubelet"]["config"]["maxPods"], 110);
    }

    #[test]
    fn a_mime_document_keeps_its_parts() {
        let user = "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"//\"\r\n\r\n--//\r\nContent-Type: text/x-shellscript\r\n\r\n#!/bin/bash\necho one\r\n--//\r\nContent-Type: text/cloud-config\r\n\r\npackages: [jq]\r\n--//--\r\n";
        let parts = parsed(&user_data(&cluster(), &BTreeMap::new(), &[], None, None, Some(user)).unwrap());
        let types: Vec<&str> = parts.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(
            types,
            vec![NODE_CONFIG_CONTENT_TYPE, SHELL_SCRIPT_CONTENT_TYPE, "text/cloud-config"]
        );
        assert!(parts[1].1.contains("echo one"));
        assert!(parts[2].1.contains("packages: [jq]"));
    }

    #[test]
    fn mime_that_is_not_multipart_is_an_error() {
        let user = "MIME-Version: 1.0\nContent-Type: text/plain\n\nhello\n";
        assert!(matches!(
            user_data(&cluster(), &BTreeMap::new(), &[], None, None, Some(user)),
            Err(UserDataError::Mime(_))
        ));
    }

    #[test]
    fn node_config_names_the_cluster_and_passes_labels_and_taints() -> Result<(), serde_yaml_ng::Error> {
        let labels = BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            ("team".to_string(), "a".to_string()),
        ]);
        let taints = vec![
            Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            },
            Taint {
                key: "startup".into(),
                value: None,
                effect: "NoExecute".into(),
                time_added: None,
            },
        ];
        let yaml = node_config(&cluster(), &labels, &taints, None, None)?;
        let v: serde_json::Value = serde_yaml_ng::from_str(&yaml)?;
        assert_eq!(v["apiVersion"], "node.eks.aws/v1alpha1");
        assert_eq!(v["kind"], "NodeConfig");
        assert_eq!(v["spec"]["cluster"]["name"], "demo");
        assert_eq!(
            v["spec"]["kubelet"]["flags"],
            json!([
                "--node-labels=karpenter.sh/nodepool=default,team=a",
                "--register-with-taints=dedicated=gpu:NoSchedule,startup:NoExecute"
            ])
        );
        Ok(())
    }

    #[test]
    fn no_flags_without_labels_or_taints() -> Result<(), serde_yaml_ng::Error> {
        let v: serde_json::Value =
            serde_yaml_ng::from_str(&node_config(&cluster(), &BTreeMap::new(), &[], None, None)?)?;
        assert!(v["spec"].get("kubelet").is_none());
        assert!(v["spec"].get("instance").is_none());
        Ok(())
    }

    /// Karpenter v1.15's `spec.kubelet` takes any upstream KubeletConfiguration field, and
    /// its AL2023 family passes the ones it does not read through to the NodeConfig
    /// (`generateInlineKubeletConfiguration`); so does Carpool.
    #[test]
    fn a_kubelet_field_the_model_does_not_name_reaches_the_node_config() -> Result<(), serde_yaml_ng::Error> {
        let kubelet: KubeletConfiguration = serde_json::from_value(json!({
            "maxPods": 58,
            "containerLogMaxSize": "50Mi",
            "shutdownGracePeriod": "30s"
        }))
        .map_err(<serde_yaml_ng::Error as serde::de::Error>::custom)?;
        let yaml = node_config(&cluster(), &BTreeMap::new(), &[], Some(&kubelet), None)?;
        let v: serde_json::Value = serde_yaml_ng::from_str(&yaml)?;
        assert_eq!(
            v["spec"]["kubelet"]["config"],
            json!({"maxPods": 58, "containerLogMaxSize": "50Mi", "shutdownGracePeriod": "30s"})
        );
        Ok(())
    }

    /// A kubelet section setting every field the model has.
    fn every_kubelet_field() -> KubeletConfiguration {
        let q = |s: &str| s.parse::<carpool::model::Quantity>().unwrap();
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        KubeletConfiguration {
            cluster_dns: vec!["10.0.0.10".into()],
            max_pods: Some(58),
            pods_per_core: Some(20),
            system_reserved: BTreeMap::from([("cpu".into(), q("100m")), ("memory".into(), q("200Mi"))]),
            kube_reserved: BTreeMap::from([
                ("cpu".into(), q("250m")),
                ("memory".into(), q("1Gi")),
                ("ephemeral-storage".into(), q("2Gi")),
            ]),
            eviction_hard: map(&[("memory.available", "200Mi"), ("nodefs.available", "15%")]),
            eviction_soft: map(&[("memory.available", "500Mi")]),
            eviction_soft_grace_period: map(&[("memory.available", "1m30s")]),
            eviction_max_pod_grace_period: Some(60),
            image_gc_high_threshold_percent: Some(80),
            image_gc_low_threshold_percent: Some(60),
            cpu_cfs_quota: Some(false),
            other: Default::default(),
        }
    }

    // Karpenter's `Nodeadm.getNodeConfigYAML` (bootstrap/nodeadm.go) sets
    // `spec.kubelet.config` from `generateInlineKubeletConfiguration`, the class's
    // `spec.kubelet` passed through under its KubeletConfiguration names; the labels stay
    // a flag (`nodeLabelArg`). Carpool keeps its taints a flag too.
    #[test]
    fn the_class_kubelet_settings_become_the_node_configs_kubelet_config_beside_the_flags()
    -> Result<(), serde_yaml_ng::Error> {
        let labels = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "default".to_string())]);
        let taints = [Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }];
        let yaml = node_config(&cluster(), &labels, &taints, Some(&every_kubelet_field()), None)?;
        let v: serde_json::Value = serde_yaml_ng::from_str(&yaml)?;
        assert_eq!(
            v["spec"]["kubelet"]["config"],
            json!({
                "clusterDNS": ["10.0.0.10"],
                "maxPods": 58,
                "podsPerCore": 20,
                "systemReserved": {"cpu": "100m", "memory": "200Mi"},
                "kubeReserved": {"cpu": "250m", "ephemeral-storage": "2Gi", "memory": "1Gi"},
                "evictionHard": {"memory.available": "200Mi", "nodefs.available": "15%"},
                "evictionSoft": {"memory.available": "500Mi"},
                "evictionSoftGracePeriod": {"memory.available": "1m30s"},
                "evictionMaxPodGracePeriod": 60,
                "imageGCHighThresholdPercent": 80,
                "imageGCLowThresholdPercent": 60,
                "cpuCFSQuota": false,
            }),
            "{yaml}"
        );
        assert_eq!(
            v["spec"]["kubelet"]["flags"],
            json!([
                "--node-labels=karpenter.sh/nodepool=default",
                "--register-with-taints=dedicated=gpu:NoSchedule"
            ])
        );
        // The whole kubelet config reads back as the class's section.
        let back: KubeletConfiguration = serde_json::from_value(v["spec"]["kubelet"]["config"].clone()).unwrap();
        assert_eq!(back, every_kubelet_field());
        Ok(())
    }

    // Only what the class sets: nodeadm computes the EKS defaults of the rest, as the
    // planner does; an empty section writes no config.
    #[test]
    fn only_the_fields_the_class_sets_are_written() -> Result<(), serde_yaml_ng::Error> {
        let max_pods = KubeletConfiguration {
            max_pods: Some(58),
            ..KubeletConfiguration::default()
        };
        let v: serde_json::Value =
            serde_yaml_ng::from_str(&node_config(&cluster(), &BTreeMap::new(), &[], Some(&max_pods), None)?)?;
        assert_eq!(v["spec"]["kubelet"], json!({"config": {"maxPods": 58}}));
        let empty = KubeletConfiguration::default();
        let v: serde_json::Value =
            serde_yaml_ng::from_str(&node_config(&cluster(), &BTreeMap::new(), &[], Some(&empty), None)?)?;
        assert!(v["spec"].get("kubelet").is_none(), "{v}");
        Ok(())
    }

    // `Nodeadm.getNodeConfigYAML`: `InstanceStorePolicy == RAID0` sets
    // `Spec.Instance.LocalStorage.Strategy = LocalStorageRAID0`.
    #[test]
    fn raid0_has_nodeadm_stripe_the_instance_store() -> Result<(), serde_yaml_ng::Error> {
        let v: serde_json::Value = serde_yaml_ng::from_str(&node_config(
            &cluster(),
            &BTreeMap::new(),
            &[],
            None,
            Some(INSTANCE_STORE_RAID0),
        )?)?;
        assert_eq!(v["spec"]["instance"], json!({"localStorage": {"strategy": "RAID0"}}));
        let doc = user_data(&cluster(), &BTreeMap::new(), &[], None, Some("RAID0"), None).unwrap();
        let parts = parsed(&doc);
        let v: serde_json::Value = serde_yaml_ng::from_str(&parts[0].1)?;
        assert_eq!(v["spec"]["instance"]["localStorage"]["strategy"], "RAID0");
        Ok(())
    }
}
