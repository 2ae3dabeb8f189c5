//! The DaemonSet pods a new node will run, read from the DaemonSets themselves.
//!
//! A DaemonSet's pod lands on a node when its template's node selector and required node
//! affinity match the node's labels and its tolerations tolerate the node's taints
//! (kube's daemon controller `NodeShouldRunDaemonPod`, with the tolerations it adds to
//! every daemon pod, `util.AddOrUpdateDaemonPodTolerations`: `not-ready` and `unreachable`
//! `NoExecute`, `disk-pressure`, `memory-pressure`, `pid-pressure` and `unschedulable`
//! `NoSchedule`, and `network-unavailable` for host-network pods). For a new node the
//! taints are the NodePool's `spec.taints` only: Karpenter's `isDaemonPodCompatible`
//! ignores startup taints, which an agent removes. Its requests are the template's (see
//! [`super::requests`]) and its host ports are taken on the node.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::ports::HostPort;
use super::selector::Labels;
use super::{node_affinity, ports, requests, tolerations};
use crate::model::Resources;
use crate::model::pod::PodSpec;

/// A DaemonSet, read.
pub(crate) struct Daemon {
    /// The template's pod spec, as Carpool holds a pod's.
    spec: PodSpec,
    tolerations: Vec<Toleration>,
    /// Its pod's requests, with the pod slot.
    pub requests: Resources,
    /// Its pod's host ports.
    pub host_ports: Vec<HostPort>,
}

fn toleration(key: &str, effect: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Toleration::default()
    }
}

impl Daemon {
    /// Reads the DaemonSets that can be read (a DaemonSet whose requests do not parse is
    /// left out: the planner reports it as skipped).
    pub fn all(daemonsets: &[DaemonSet]) -> Vec<Daemon> {
        daemonsets
            .iter()
            .filter_map(|d| {
                let spec = PodSpec::from(d.spec.as_ref()?.template.spec.clone()?);
                let requests = requests::pod_requests(&spec).ok()?;
                let mut tols = spec.tolerations.clone().unwrap_or_default();
                for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
                    tols.push(toleration(key, "NoExecute"));
                }
                for key in [
                    "node.kubernetes.io/disk-pressure",
                    "node.kubernetes.io/memory-pressure",
                    "node.kubernetes.io/pid-pressure",
                    "node.kubernetes.io/unschedulable",
                ] {
                    tols.push(toleration(key, "NoSchedule"));
                }
                if spec.host_network == Some(true) {
                    tols.push(toleration("node.kubernetes.io/network-unavailable", "NoSchedule"));
                }
                Some(Daemon {
                    tolerations: tols,
                    requests,
                    host_ports: ports::of_spec(&spec),
                    spec,
                })
            })
            .collect()
    }

    /// Whether its pod lands on a node with these labels and taints.
    pub fn lands_on(&self, labels: &Labels, taints: &[Taint]) -> bool {
        node_affinity::matches(&self.spec, labels, None)
            && tolerations::untolerated(&self.tolerations, taints).is_none()
    }
}

/// What the DaemonSets that land on a node request, and the host ports they take.
pub(crate) fn overhead(daemons: &[Daemon], labels: &Labels, taints: &[Taint]) -> (Resources, Vec<HostPort>) {
    let mut r = Resources::default();
    let mut p = Vec::new();
    for d in daemons.iter().filter(|d| d.lands_on(labels, taints)) {
        r = r.plus(&d.requests);
        p.extend(d.host_ports.iter().cloned());
    }
    (r, p)
}
