//! The kubelet settings of an EC2NodeClass (`spec.kubelet`) that change what a node can
//! hold.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::manifest::ManifestError;
use super::quantity::Quantity;

/// `spec.kubelet` of an EC2NodeClass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    /// Cluster DNS addresses.
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    /// Pod cap; overrides the ENI-based default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i32>,
    /// Pods per vCPU cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<i32>,
    /// Reserved for the OS.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, Quantity>,
    /// Reserved for Kubernetes daemons; replaces the EKS formulas per resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, Quantity>,
    /// Hard eviction thresholds, e.g. `memory.available: 100Mi` or `nodefs.available: 10%`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, String>,
    /// Soft eviction thresholds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft: BTreeMap<String, String>,
    /// Grace periods of the soft thresholds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// Longest grace period allowed when evicting under soft pressure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Image GC high threshold, percent.
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Image GC low threshold, percent.
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// CPU CFS quota enforcement.
    #[serde(default, rename = "cpuCFSQuota", skip_serializing_if = "Option::is_none")]
    pub cpu_cfs_quota: Option<bool>,
    /// Any other field of the upstream KubeletConfiguration, which Karpenter v1.15's
    /// EC2NodeClass accepts (its schema preserves unknown fields): passed through as written
    /// to AL2023's NodeConfig, as Karpenter passes it; refused on a family that cannot apply
    /// it ([`crate::model::EC2NodeClass`]'s validation). The planner reads none of them.
    #[serde(default, flatten, skip_serializing_if = "BTreeMap::is_empty")]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// An eviction threshold: an absolute amount or a share of capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    /// An amount in bytes.
    Absolute(i64),
    /// A percentage of capacity.
    Percent(f64),
}

impl Threshold {
    /// Parses `100Mi` or `10%`.
    pub fn parse(s: &str) -> Result<Threshold, String> {
        match s.strip_suffix('%') {
            Some(p) => match p.parse::<f64>() {
                Ok(p) if (0.0..=100.0).contains(&p) => Ok(Threshold::Percent(p)),
                _ => Err(format!("invalid percentage {s:?}")),
            },
            None => s
                .parse::<Quantity>()
                .map(|q| Threshold::Absolute(q.units_ceil()))
                .map_err(|e| e.to_string()),
        }
    }

    /// The amount for a given capacity, rounded up.
    pub fn amount(self, capacity: i64) -> i64 {
        match self {
            Threshold::Absolute(a) => a,
            Threshold::Percent(p) => (capacity as f64 * p / 100.0).ceil() as i64,
        }
    }
}

const RESERVED_KEYS: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];
const SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

impl KubeletConfiguration {
    /// Checks the values the kubelet would refuse.
    pub fn validate(&self, path: &str) -> Result<(), ManifestError> {
        if let Some(n) = self.max_pods.filter(|n| *n < 0) {
            return Err(ManifestError::at(format!("{path}.maxPods"), format!("{n} is negative")));
        }
        if let Some(n) = self.pods_per_core.filter(|n| *n < 0) {
            return Err(ManifestError::at(
                format!("{path}.podsPerCore"),
                format!("{n} is negative"),
            ));
        }
        for (field, map) in [
            ("systemReserved", &self.system_reserved),
            ("kubeReserved", &self.kube_reserved),
        ] {
            for (k, q) in map {
                if !RESERVED_KEYS.contains(&k.as_str()) {
                    return Err(ManifestError::at(
                        format!("{path}.{field}.{k}"),
                        format!("unknown resource; use one of {}", RESERVED_KEYS.join(", ")),
                    ));
                }
                if q.is_negative() {
                    return Err(ManifestError::at(format!("{path}.{field}.{k}"), "must not be negative"));
                }
            }
        }
        for (field, map) in [
            ("evictionHard", &self.eviction_hard),
            ("evictionSoft", &self.eviction_soft),
        ] {
            for (k, v) in map {
                if !SIGNALS.contains(&k.as_str()) {
                    return Err(ManifestError::at(
                        format!("{path}.{field}.{k}"),
                        format!("unknown eviction signal; use one of {}", SIGNALS.join(", ")),
                    ));
                }
                Threshold::parse(v).map_err(|m| ManifestError::at(format!("{path}.{field}.{k}"), m))?;
            }
        }
        if let (Some(hi), Some(lo)) = (
            self.image_gc_high_threshold_percent,
            self.image_gc_low_threshold_percent,
        ) && lo > hi
        {
            return Err(ManifestError::at(
                format!("{path}.imageGCLowThresholdPercent"),
                "must not exceed imageGCHighThresholdPercent",
            ));
        }
        Ok(())
    }

    /// The hard eviction threshold of a signal, if set and valid.
    pub fn eviction_hard(&self, signal: &str) -> Option<Threshold> {
        self.eviction_hard.get(signal).and_then(|v| Threshold::parse(v).ok())
    }
}
