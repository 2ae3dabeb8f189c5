//! The EC2 instance tags the harness reads: what a launch asks of the node it becomes.
//!
//! A real node learns its labels and taints from the launch's user data (nodeadm), which a
//! later issue writes. Until then, and in tests, the launch states them in instance tags:
//!
//! | tag | value | the node gets |
//! | --- | --- | --- |
//! | `carpool.sh/cluster` | the cluster name | (only tagged instances register) |
//! | `karpenter.sh/nodepool` (or `carpool.sh/nodepool`) | the NodePool | the `karpenter.sh/nodepool` label |
//! | `karpenter.k8s.aws/ec2nodeclass` | the EC2NodeClass | the same label |
//! | `carpool.sh/labels` | JSON object `{"name": "value"}` | these labels (the NodePool's template labels) |
//! | `carpool.sh/taints` | JSON array `[{"key", "value", "effect"}]` (`value` optional) | these taints |
//! | `carpool.sh/startup-taints` | the same format | these taints too, as the kubelet registers startup taints |
//! | `carpool.sh/never-register` | `true` | no Node: the instance never joins (tests the registration TTL) |
//!
//! EC2 tag values hold at most 256 characters, which is enough for a few taints.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};

/// Ownership: the instance belongs to this cluster's Carpool.
pub const CLUSTER: &str = "carpool.sh/cluster";
/// The NodePool, as Carpool tags it.
pub const CARPOOL_NODEPOOL: &str = "carpool.sh/nodepool";
/// The NodePool, as Karpenter tags it (preferred when both are present).
pub const KARPENTER_NODEPOOL: &str = "karpenter.sh/nodepool";
/// The EC2NodeClass, as Karpenter tags it.
pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// Extra node labels, a JSON object.
pub const LABELS: &str = "carpool.sh/labels";
/// Node taints, a JSON array of taints.
pub const TAINTS: &str = "carpool.sh/taints";
/// Startup taints, a JSON array of taints.
pub const STARTUP_TAINTS: &str = "carpool.sh/startup-taints";
/// `true`: the harness never registers a Node for the instance.
pub const NEVER_REGISTER: &str = "carpool.sh/never-register";

/// A taint as the tags spell it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagTaint {
    /// The taint key.
    pub key: String,
    /// The taint value, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl TagTaint {
    /// A taint with a value.
    pub fn new(key: &str, value: &str, effect: &str) -> Self {
        TagTaint {
            key: key.to_string(),
            value: Some(value.to_string()),
            effect: effect.to_string(),
        }
    }

    /// The Kubernetes taint.
    pub fn to_k8s(&self) -> Taint {
        Taint {
            key: self.key.clone(),
            value: self.value.clone(),
            effect: self.effect.clone(),
            time_added: None,
        }
    }
}

/// The value of a taints tag.
pub fn encode_taints(taints: &[TagTaint]) -> Result<String> {
    serde_json::to_string(taints).context("encoding taints")
}

/// Reads a taints tag; a missing tag is no taints.
pub fn decode_taints(tags: &BTreeMap<String, String>, tag: &str) -> Result<Vec<TagTaint>> {
    match tags.get(tag) {
        None => Ok(Vec::new()),
        Some(v) => serde_json::from_str(v).with_context(|| format!("tag {tag}={v}: not a JSON array of taints")),
    }
}

/// Reads the labels tag; a missing tag is no labels.
pub fn decode_labels(tags: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>> {
    match tags.get(LABELS) {
        None => Ok(BTreeMap::new()),
        Some(v) => serde_json::from_str(v).with_context(|| format!("tag {LABELS}={v}: not a JSON object of labels")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_round_trip_through_a_tag_and_value_is_optional() {
        let taints = vec![
            TagTaint::new("dedicated", "gpu", "NoSchedule"),
            TagTaint {
                key: "example.com/booting".into(),
                value: None,
                effect: "NoExecute".into(),
            },
        ];
        let value = encode_taints(&taints).unwrap();
        assert_eq!(
            value,
            r#"[{"key":"dedicated","value":"gpu","effect":"NoSchedule"},{"key":"example.com/booting","effect":"NoExecute"}]"#
        );
        let tags = BTreeMap::from([(TAINTS.to_string(), value)]);
        assert_eq!(decode_taints(&tags, TAINTS).unwrap(), taints);
        assert_eq!(decode_taints(&tags, STARTUP_TAINTS).unwrap(), vec![]);
    }

    #[test]
    fn a_bad_tag_is_an_error_naming_it() {
        let tags = BTreeMap::from([(TAINTS.to_string(), "dedicated=gpu:NoSchedule".to_string())]);
        let err = decode_taints(&tags, TAINTS).unwrap_err().to_string();
        assert!(err.contains("carpool.sh/taints"), "{err}");
    }
}
