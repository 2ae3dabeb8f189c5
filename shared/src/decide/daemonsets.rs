//! DaemonSet overhead: what the DaemonSets that would land on a node take from it.
//!
//! A DaemonSet lands on a node when its pod tolerates the node's taints (startup taints
//! included) and its node selector and required node affinity accept the node's labels.
//! The labels decided only at launch (zone, capacity type, hostname) are taken as
//! possible: the overhead errs on the large side.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::taints::untolerated;
use crate::model::pod_requests::{RequestsError, effective_requests};
use crate::model::pod_requirements::{PodRequirementError, pod_requirement_branches};
use crate::model::well_known as wk;
use crate::model::{Requirements, Resources};

/// A DaemonSet that cannot be read; each reason names it (`namespace/name`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DaemonSetError {
    /// It has no pod template spec.
    #[error("DaemonSet {name} has no pod template spec")]
    NoPodSpec {
        /// `namespace/name`.
        name: String,
    },
    /// Its pod's resource requests cannot be read.
    #[error("DaemonSet {name}")]
    Requests {
        /// `namespace/name`.
        name: String,
        /// The bad requests.
        #[source]
        source: RequestsError,
    },
    /// Its pod's node requirements cannot be read.
    #[error("DaemonSet {name}")]
    Requirements {
        /// `namespace/name`.
        name: String,
        /// The bad requirement.
        #[source]
        source: PodRequirementError,
    },
}

/// A DaemonSet's pod, read for placement.
#[derive(Clone, Debug)]
pub struct DaemonSetInfo {
    /// `namespace/name`.
    pub name: String,
    /// Requests of one pod, with its pod slot.
    pub requests: Resources,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Node requirement branches.
    pub branches: Vec<Requirements>,
}

impl DaemonSetInfo {
    /// Reads a DaemonSet; the error names it and what is wrong.
    pub fn from_k8s(ds: &DaemonSet) -> Result<Self, DaemonSetError> {
        let name = format!(
            "{}/{}",
            ds.metadata.namespace.as_deref().unwrap_or("default"),
            ds.metadata.name.as_deref().unwrap_or_default()
        );
        let spec = ds
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .ok_or_else(|| DaemonSetError::NoPodSpec { name: name.clone() })?;
        let mut requests = effective_requests(spec).map_err(|source| DaemonSetError::Requests {
            name: name.clone(),
            source,
        })?;
        requests.pods += 1;
        let branches = pod_requirement_branches(spec).map_err(|source| DaemonSetError::Requirements {
            name: name.clone(),
            source,
        })?;
        Ok(DaemonSetInfo {
            name,
            requests,
            tolerations: spec.tolerations.clone().unwrap_or_default(),
            branches,
        })
    }

    /// Whether this DaemonSet's pod would run on a node with these labels and taints. The
    /// labels a node gets only at launch (zone, capacity type, hostname) may be missing: a
    /// requirement on them counts as met when it could be.
    pub fn lands_on(&self, node: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
        const DECIDED_AT_LAUNCH: [&str; 3] = [wk::ZONE, wk::CAPACITY_TYPE, wk::HOSTNAME];
        untolerated(&self.tolerations, taints).is_none()
            && self.branches.iter().any(|b| {
                b.iter().all(|r| match node.get(r.key()) {
                    Some(v) => r.has(v),
                    None => DECIDED_AT_LAUNCH.contains(&r.key()) || r.allows_absent(),
                })
            })
    }
}

/// The total requests of the DaemonSets that land on a node.
pub fn overhead(daemonsets: &[DaemonSetInfo], node: &BTreeMap<String, String>, taints: &[Taint]) -> Resources {
    daemonsets
        .iter()
        .filter(|d| d.lands_on(node, taints))
        .fold(Resources::default(), |acc, d| acc.plus(&d.requests))
}
