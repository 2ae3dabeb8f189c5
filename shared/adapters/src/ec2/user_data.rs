//! The user data of a node: an AL2023 nodeadm `NodeConfig` that joins the cluster (name,
//! endpoint, CA, service CIDR) and gives the kubelet its labels and taints, merged with
//! the EC2NodeClass's own `userData` into one MIME multipart document, as Karpenter does
//! for AL2023:
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
/// taints; flags are left out when there is nothing to pass.
pub fn node_config(
    cluster: &ClusterInfo,
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
    let mut spec = json!({
        "cluster": {
            "name": cluster.name,
            "apiServerEndpoint": cluster.endpoint,
            "certificateAuthority": cluster.ca_base64,
            "cidr": cluster.service_cidr,
        }
    });
    if !flags.is_empty() {
        spec["kubelet"] = json!({ "flags": flags });
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
/// and then the parts of `user_data` (the EC2NodeClass's), if any.
pub fn user_data(
    cluster: &ClusterInfo,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    user_data: Option<&str>,
) -> Result<String, UserDataError> {
    let mut parts = vec![Part::New {
        content_type: NODE_CONFIG_CONTENT_TYPE.into(),
        body: node_config(cluster, labels, taints).map_err(UserDataError::Yaml)?,
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
        let parts = parsed(&user_data(&cluster(), &BTreeMap::new(), &[], None).unwrap());
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
        let parts = parsed(&user_data(&cluster(), &BTreeMap::new(), &[], Some(script)).unwrap());
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].0, NODE_CONFIG_CONTENT_TYPE);
        assert_eq!(parts[1].0, SHELL_SCRIPT_CONTENT_TYPE);
        assert!(parts[1].1.contains("echo hello"));

        let config =
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 110\n";
        let parts = parsed(&user_data(&cluster(), &BTreeMap::new(), &[], Some(config)).unwrap());
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1].0, NODE_CONFIG_CONTENT_TYPE);
        let v: serde_json::Value = serde_yaml_ng::from_str(&parts[1].1).unwrap();
        assert_eq!(v["spec"]["kubelet"]["config"]["maxPods"], 110);
    }

    #[test]
    fn a_mime_document_keeps_its_parts() {
        let user = "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"//\"\r\n\r\n--//\r\nContent-Type: text/x-shellscript\r\n\r\n#!/bin/bash\necho one\r\n--//\r\nContent-Type: text/cloud-config\r\n\r\npackages: [jq]\r\n--//--\r\n";
        let parts = parsed(&user_data(&cluster(), &BTreeMap::new(), &[], Some(user)).unwrap());
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
            user_data(&cluster(), &BTreeMap::new(), &[], Some(user)),
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
        let yaml = node_config(&cluster(), &labels, &taints)?;
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
        let v: serde_json::Value = serde_yaml_ng::from_str(&node_config(&cluster(), &BTreeMap::new(), &[])?)?;
        assert!(v["spec"].get("kubelet").is_none());
        Ok(())
    }
}
