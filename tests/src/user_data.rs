//! What nodeadm on the instance would read: the kubelet's labels and taints in the
//! NodeConfig of the user data, which is either a NodeConfig document or a MIME
//! multipart document holding one or more (`Content-Type: application/node.eks.aws`).
//! The harness registers Nodes with them, as the kubelet would.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use aws_sdk_ec2::types::InstanceAttributeName;
use base64::Engine as _;
use k8s_openapi::api::core::v1::Taint;

/// The kubelet settings nodeadm passes on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeletFlags {
    /// `--node-labels`.
    pub labels: BTreeMap<String, String>,
    /// `--register-with-taints`.
    pub taints: Vec<Taint>,
}

/// The NodeConfig documents in user data: the whole text, or each MIME part that
/// holds one.
pub fn node_configs(text: &str) -> Vec<serde_json::Value> {
    let boundary = text.lines().take_while(|l| !l.trim().is_empty()).find_map(|l| {
        let lower = l.to_ascii_lowercase();
        let at = lower.find("boundary=")?;
        Some(l[at + "boundary=".len()..].trim().trim_matches('"').to_string())
    });
    let documents: Vec<&str> = match &boundary {
        Some(b) => {
            let delimiter = format!("--{b}");
            text.split(delimiter.as_str())
                .skip(1)
                .filter(|part| !part.starts_with("--"))
                .filter_map(|part| {
                    let part = part.trim_start_matches(['\r', '\n']);
                    let (headers, body) = part.split_once("\n\n").or_else(|| part.split_once("\r\n\r\n"))?;
                    headers
                        .to_ascii_lowercase()
                        .contains("application/node.eks.aws")
                        .then_some(body)
                })
                .collect()
        }
        None => vec![text],
    };
    documents
        .into_iter()
        .filter_map(|d| serde_yaml_ng::from_str::<serde_json::Value>(d).ok())
        .filter(|v| v["kind"] == "NodeConfig")
        .collect()
}

fn parse_taint(text: &str) -> Option<Taint> {
    let (kv, effect) = text.rsplit_once(':')?;
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (kv, None),
    };
    Some(Taint {
        key: key.to_string(),
        value,
        effect: effect.to_string(),
        time_added: None,
    })
}

/// The labels and taints of the kubelet flags in the user data's NodeConfigs.
pub fn kubelet_flags(text: &str) -> KubeletFlags {
    let mut out = KubeletFlags::default();
    for config in node_configs(text) {
        for flag in config["spec"]["kubelet"]["flags"].as_array().into_iter().flatten() {
            let Some(flag) = flag.as_str() else { continue };
            if let Some(list) = flag.strip_prefix("--node-labels=") {
                for kv in list.split(',').filter(|s| !s.is_empty()) {
                    if let Some((k, v)) = kv.split_once('=') {
                        out.labels.insert(k.to_string(), v.to_string());
                    }
                }
            } else if let Some(list) = flag.strip_prefix("--register-with-taints=") {
                out.taints.extend(list.split(',').filter_map(parse_taint));
            }
        }
    }
    out
}

/// The instance's user data, decoded; `None` when it has none.
pub async fn read(ec2: &aws_sdk_ec2::Client, instance_id: &str) -> Result<Option<String>> {
    let out = ec2
        .describe_instance_attribute()
        .instance_id(instance_id)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .with_context(|| format!("DescribeInstanceAttribute userData of {instance_id}"))?;
    let Some(encoded) = out.user_data().and_then(|v| v.value()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .with_context(|| format!("user data of {instance_id} is not base64"))?;
    // The launch template holds base64 user data; EC2 encodes it once more for this call.
    let bytes = match base64::engine::general_purpose::STANDARD.decode(&bytes) {
        Ok(inner) if std::str::from_utf8(&inner).is_ok() => inner,
        _ => bytes,
    };
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODECONFIG: &str = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: c\n  kubelet:\n    flags:\n    - --node-labels=karpenter.sh/nodepool=general,team=a\n    - --register-with-taints=dedicated=batch:NoSchedule,gpu:NoExecute\n";

    #[test]
    fn a_plain_nodeconfig_gives_its_labels_and_taints() {
        let flags = kubelet_flags(NODECONFIG);
        assert_eq!(flags.labels["karpenter.sh/nodepool"], "general");
        assert_eq!(flags.labels["team"], "a");
        assert_eq!(flags.taints.len(), 2);
        assert_eq!(flags.taints[0].value.as_deref(), Some("batch"));
        assert_eq!(flags.taints[1].key, "gpu");
        assert_eq!(flags.taints[1].effect, "NoExecute");
    }

    #[test]
    fn a_mime_document_gives_the_flags_of_its_nodeconfig_parts() {
        let mime = format!(
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho hi\n\n--//\nContent-Type: application/node.eks.aws\n\n{NODECONFIG}\n--//--\n"
        );
        let flags = kubelet_flags(&mime);
        assert_eq!(flags.labels["team"], "a");
        assert_eq!(flags.taints.len(), 2);
    }
}
