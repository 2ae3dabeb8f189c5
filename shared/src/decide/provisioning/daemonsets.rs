//! DaemonSet overhead: what the DaemonSets that would land on a node take from it.
//!
//! A DaemonSet lands on a node when its pod tolerates the node's taints and its node
//! selector and required node affinity accept the node's labels (Karpenter's
//! `isDaemonPodCompatible`, `pkg/controllers/provisioning/scheduling/scheduler.go`). A new
//! node's startup taints do not count: they are removed once the node is up, and the
//! DaemonSet's pods land then. The labels decided only at launch (zone and zone id,
//! capacity type, hostname, and the values of the NodePool's custom keys) are taken as possible: the
//! overhead errs on the large side, as Karpenter's does. The host ports its pods bind are
//! taken on every node it lands on (Karpenter's `getDaemonHostPortUsage`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::decide::provisioning::pod::HostPort;
use crate::decide::provisioning::taints::untolerated;
use crate::model::pod::PodSpec;
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
    /// Host ports its pod binds.
    pub host_ports: Vec<HostPort>,
}

/// The host ports a pod spec binds: those of its containers and restartable (sidecar) init
/// containers with a `hostPort` (kube-scheduler's `nodeports` plugin, `getContainerPorts`).
pub fn host_ports(spec: &PodSpec) -> Vec<HostPort> {
    spec.containers
        .iter()
        .chain(
            spec.init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always")),
        )
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            p.host_port.filter(|hp| *hp > 0).map(|port| HostPort {
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                port,
                ip: p.host_ip.clone().unwrap_or_default(),
            })
        })
        .collect()
}

impl DaemonSetInfo {
    /// Reads a DaemonSet; the error names it and what is wrong.
    pub fn from_k8s(ds: &DaemonSet) -> Result<Self, DaemonSetError> {
        let name = format!(
            "{}/{}",
            ds.metadata.namespace.as_deref().unwrap_or("default"),
            ds.metadata.name.as_deref().unwrap_or_default()
        );
        let spec = PodSpec::from(
            ds.spec
                .as_ref()
                .and_then(|s| s.template.spec.clone())
                .ok_or_else(|| DaemonSetError::NoPodSpec { name: name.clone() })?,
        );
        let spec = &spec;
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
            host_ports: host_ports(spec),
        })
    }

    /// Whether this DaemonSet's pod would run on a node with these labels and taints. The
    /// labels a node gets only at launch (zone, capacity type, hostname) may be missing: a
    /// requirement on them counts as met when it could be.
    pub fn lands_on(&self, node: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
        self.lands_on_template(node, &Requirements::new(), taints)
    }

    /// [`Self::lands_on`] for a node a NodePool would launch, whose custom keys may take
    /// any value `custom` allows: a requirement on one counts as met when some allowed
    /// value meets it (Karpenter's `Requirements.IsCompatible` against the template).
    pub fn lands_on_template(&self, node: &BTreeMap<String, String>, custom: &Requirements, taints: &[Taint]) -> bool {
        const DECIDED_AT_LAUNCH: [&str; 4] = [wk::ZONE, wk::ZONE_ID, wk::CAPACITY_TYPE, wk::HOSTNAME];
        untolerated(&self.tolerations, taints).is_none()
            && self.branches.iter().any(|b| {
                b.iter().all(|r| match node.get(r.key()) {
                    Some(v) => r.has(v),
                    None => match custom.get(r.key()) {
                        Some(c) => !c.intersection(r).is_empty() || (c.is_empty() && r.allows_absent()),
                        None => DECIDED_AT_LAUNCH.contains(&r.key()) || r.allows_absent(),
                    },
                })
            })
    }
}

/// The DaemonSets that land on a node a NodePool would launch (see
/// [`DaemonSetInfo::lands_on_template`]).
pub fn landing<'a>(
    daemonsets: &'a [DaemonSetInfo],
    node: &'a BTreeMap<String, String>,
    custom: &'a Requirements,
    taints: &'a [Taint],
) -> impl Iterator<Item = &'a DaemonSetInfo> {
    daemonsets
        .iter()
        .filter(move |d| d.lands_on_template(node, custom, taints))
}

/// The total requests of the DaemonSets that land on a node a NodePool would launch.
pub fn overhead(
    daemonsets: &[DaemonSetInfo],
    node: &BTreeMap<String, String>,
    custom: &Requirements,
    taints: &[Taint],
) -> Resources {
    landing(daemonsets, node, custom, taints).fold(Resources::default(), |acc, d| acc.plus(&d.requests))
}
