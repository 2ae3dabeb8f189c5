//! The user data of a node: an AL2023 nodeadm `NodeConfig` naming the cluster and giving
//! the kubelet its labels and taints.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use serde_json::json;

/// `--node-labels=` with the labels as `k=v`, comma-separated.
fn node_labels_flag(labels: &BTreeMap<String, String>) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("--node-labels={}", labels.join(","))
}

/// `--register-with-taints=` with the taints as `k=v:Effect` (or `k:Effect`), comma-separated.
fn taints_flag(taints: &[Taint]) -> String {
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
/// taints; flags are left out when there is nothing to pass.
pub fn node_config(
    cluster: &str,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
) -> Result<String, serde_yaml_ng::Error> {
    let mut flags = Vec::new();
    if !labels.is_empty() {
        flags.push(node_labels_flag(labels));
    }
    if !taints.is_empty() {
        flags.push(taints_flag(taints));
    }
    let mut spec = json!({ "cluster": { "name": cluster } });
    if !flags.is_empty() {
        spec["kubelet"] = json!({ "flags": flags });
    }
    serde_yaml_ng::to_string(&json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": spec,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let yaml = node_config("demo", &labels, &taints)?;
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
        let v: serde_json::Value = serde_yaml_ng::from_str(&node_config("demo", &BTreeMap::new(), &[])?)?;
        assert!(v["spec"].get("kubelet").is_none());
        Ok(())
    }
}
