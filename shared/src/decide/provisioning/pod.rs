//! What the scheduler needs to know of a pod, read once: requests, node requirements,
//! tolerations, topology spread, pod (anti-)affinity, host ports and volume zones.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PodAffinityTerm, Toleration, WeightedPodAffinityTerm};

use crate::decide::provisioning::namespaces::Namespaces;
use crate::decide::provisioning::node_inclusion::{NodeInclusion, Tolerations};
use crate::decide::provisioning::selector::Selector;
pub use crate::decide::provisioning::unschedulable::PodError;
pub use crate::decide::provisioning::volumes::{VolumeUse, Volumes};
use crate::model::pod::Pod;
use crate::model::pod_requests::effective_requests;
use crate::model::pod_requirements::{from_k8s as requirement_from_k8s, pod_requirement_branches};
use crate::model::{Requirements, Resources};

/// A topology spread constraint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Spread {
    /// The topology key: zone, hostname or capacity type.
    pub key: String,
    /// `maxSkew`.
    pub max_skew: i32,
    /// `minDomains`.
    pub min_domains: Option<i32>,
    /// `whenUnsatisfiable: DoNotSchedule`.
    pub hard: bool,
    /// The pods counted (with `matchLabelKeys` folded in).
    pub selector: Selector,
    /// The namespace the pods counted are in (the pod's own).
    pub namespace: String,
    /// The nodes it counts, by `nodeAffinityPolicy` and `nodeTaintsPolicy`.
    pub inclusion: NodeInclusion,
}

impl Spread {
    /// Whether the pod that owns the spread is counted by it: kube-scheduler adds the
    /// incoming pod to a domain's count only when it matches the constraint's selector
    /// (podtopologyspread `Filter`: `selfMatchNum`).
    pub fn counts_itself(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }
}

/// A pod (anti-)affinity term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    /// The topology key: hostname or zone.
    pub key: String,
    /// The pods it refers to.
    pub selector: Selector,
    /// Their namespaces; `None` means all.
    pub namespaces: Option<BTreeSet<String>>,
    /// The preference weight; 0 for a required term.
    pub weight: i32,
}

impl AffinityTerm {
    /// Whether the term refers to a pod with these labels in this namespace.
    pub fn matches(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.as_ref().is_none_or(|ns| ns.contains(namespace)) && self.selector.matches(labels)
    }
}

/// A host port a pod binds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// TCP, UDP or SCTP.
    pub protocol: String,
    /// The port.
    pub port: i32,
    /// The host IP; empty means all.
    pub ip: String,
}

impl HostPort {
    /// The first of `ours` that collides with one of `theirs`.
    pub fn any_conflict<'a>(ours: &'a [HostPort], theirs: &[HostPort]) -> Option<&'a HostPort> {
        ours.iter().find(|a| theirs.iter().any(|b| a.conflicts(b)))
    }

    /// Whether two host ports collide (same protocol and port, overlapping IPs).
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let any = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.protocol == other.protocol
            && self.port == other.port
            && (any(&self.ip) || any(&other.ip) || self.ip == other.ip)
    }
}

/// A pod, read for scheduling.
#[derive(Clone, Debug, PartialEq)]
pub struct PodInfo {
    /// `namespace/name`.
    pub key: String,
    /// The namespace.
    pub namespace: String,
    /// The pod's labels.
    pub labels: BTreeMap<String, String>,
    /// Effective requests, with one pod slot.
    pub requests: Resources,
    /// Required node requirements, as OR branches (nodeSelector, affinity, volume zones).
    pub branches: Vec<Requirements>,
    /// Preferred node affinity terms, heaviest first.
    pub preferred: Vec<(i32, Requirements)>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Topology spread constraints.
    pub spreads: Vec<Spread>,
    /// Required pod affinity.
    pub affinity: Vec<AffinityTerm>,
    /// Required pod anti-affinity.
    pub anti_affinity: Vec<AffinityTerm>,
    /// Preferred pod affinity.
    pub preferred_affinity: Vec<AffinityTerm>,
    /// Preferred pod anti-affinity.
    pub preferred_anti_affinity: Vec<AffinityTerm>,
    /// Host ports.
    pub host_ports: Vec<HostPort>,
    /// The volumes it attaches, per CSI driver (see [`crate::decide::provisioning::volumes`]).
    pub volumes: Vec<VolumeUse>,
}

/// Whether a pod is one Carpool should provision for: Pending, unbound, not terminating,
/// not a DaemonSet's, not preempting (kube-scheduler has nominated a node for it, where it
/// waits for victims to leave: Karpenter's `IsProvisionable` skips `IsPreempting`), and
/// either marked `PodScheduled=False/Unschedulable` or not yet looked at by the scheduler.
pub fn is_provisionable(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() || is_daemonset_pod(pod) || is_preempting(pod) {
        return false;
    }
    if pod
        .spec
        .as_ref()
        .is_none_or(|s| s.node_name.as_deref().is_some_and(|n| !n.is_empty()))
    {
        return false;
    }
    let Some(status) = &pod.status else { return true };
    if status.phase.as_deref().is_some_and(|p| p != "Pending") {
        return false;
    }
    match status.conditions.iter().flatten().find(|c| c.type_ == "PodScheduled") {
        None => true,
        Some(c) => c.status == "False" && c.reason.as_deref() == Some("Unschedulable"),
    }
}

/// Whether kube-scheduler has nominated a node for the pod (`status.nominatedNodeName`):
/// it preempted pods there and waits for them to go.
pub fn is_preempting(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// Whether a DaemonSet owns the pod.
pub fn is_daemonset_pod(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet")
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> String {
    key_of(&pod.metadata)
}

/// `namespace/name` of an object's metadata, as [`pod_key`] gives a pod's.
pub fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or("<unnamed>")
    )
}

fn affinity_term(
    t: &PodAffinityTerm,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    weight: i32,
    known: &Namespaces,
) -> Result<AffinityTerm, PodError> {
    let mut selector = match &t.label_selector {
        Some(s) => Selector::from_k8s(s)?,
        // A term without a selector matches no pod.
        None => Selector::default().with_label("carpool.sh/matches-nothing", "\u{0}"),
    };
    for key in t.match_label_keys.iter().flatten() {
        if let Some(v) = labels.get(key) {
            selector = selector.with_label(key, v);
        }
    }
    // kube-scheduler's `newAffinityTerm` and Karpenter's `buildNamespaceList`: neither a
    // list nor a selector means the pod's own namespace; otherwise the list together with
    // what the selector matches, and the empty selector matches every namespace.
    let list: BTreeSet<String> = t.namespaces.iter().flatten().cloned().collect();
    let namespaces = match &t.namespace_selector {
        None if list.is_empty() => Some(BTreeSet::from([namespace.to_string()])),
        None => Some(list),
        Some(sel) => {
            let sel = Selector::from_k8s(sel)?;
            if sel == Selector::default() {
                None
            } else {
                let mut all = known.matching(&sel);
                all.extend(list);
                Some(all)
            }
        }
    };
    Ok(AffinityTerm {
        key: t.topology_key.clone(),
        selector,
        namespaces,
        weight,
    })
}

fn weighted(
    terms: &[WeightedPodAffinityTerm],
    ns: &str,
    labels: &BTreeMap<String, String>,
    known: &Namespaces,
) -> Result<Vec<AffinityTerm>, PodError> {
    terms
        .iter()
        .map(|w| affinity_term(&w.pod_affinity_term, ns, labels, w.weight, known))
        .collect()
}

impl PodInfo {
    /// At most this many pods like this one fit on one node, whatever its size: one when it
    /// is anti-affine to itself by hostname or binds host ports, `maxSkew` under a hostname
    /// spread over its own pods (new nodes are new domains, so the minimum count is 0).
    pub fn per_node_cap(&self) -> u32 {
        let mut cap = u32::MAX;
        for s in self
            .spreads
            .iter()
            .filter(|s| s.key == crate::model::well_known::HOSTNAME && s.selector.matches(&self.labels))
        {
            cap = cap.min(u32::try_from(s.max_skew).unwrap_or(1));
        }
        let self_anti = self
            .anti_affinity
            .iter()
            .any(|t| t.key == crate::model::well_known::HOSTNAME && t.matches(&self.namespace, &self.labels));
        if self_anti || !self.host_ports.is_empty() {
            cap = 1;
        }
        cap
    }

    /// Reads a pod; the error says what makes it unreadable. `namespaces` resolves the
    /// namespace selectors of its pod affinity terms.
    pub fn from_pod(pod: &Pod, volumes: &Volumes<'_>, namespaces: &Namespaces) -> Result<PodInfo, PodError> {
        let spec = pod.spec.as_ref().ok_or(PodError::NoSpec)?;
        let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let mut requests = effective_requests(spec)?;
        if let Some(bad) = requests.any_negative() {
            return Err(PodError::NegativeRequest {
                resource: bad.to_string(),
            });
        }
        requests.pods += 1;

        let pod_branches = pod_requirement_branches(spec)?;
        let volume_branches = volumes.branches(pod, &namespace)?;
        let branches = pod_branches
            .iter()
            .flat_map(|a| volume_branches.iter().map(move |b| a.intersection(b)))
            .collect();

        let affinity = spec.affinity.as_ref();
        let mut preferred = Vec::new();
        for (i, p) in affinity
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| n.preferred_during_scheduling_ignored_during_execution.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
        {
            let mut r = Requirements::new();
            for e in p.preference.match_expressions.iter().flatten() {
                r.add(requirement_from_k8s(e).map_err(|source| PodError::PreferredNodeAffinity { index: i, source })?);
            }
            preferred.push((p.weight, r));
        }
        preferred.sort_by_key(|(w, _)| -w);

        let mut spreads = Vec::new();
        for c in spec.topology_spread_constraints.iter().flatten() {
            let mut selector = match &c.label_selector {
                Some(s) => Selector::from_k8s(s)?,
                None => Selector::default().with_label("carpool.sh/matches-nothing", "\u{0}"),
            };
            for key in c.match_label_keys.iter().flatten() {
                if let Some(v) = labels.get(key) {
                    selector = selector.with_label(key, v);
                }
            }
            if c.max_skew < 1 {
                return Err(PodError::MaxSkew { max_skew: c.max_skew });
            }
            // kube-scheduler's `filterTopologySpreadConstraints`: nodeAffinityPolicy
            // defaults to Honor, nodeTaintsPolicy to Ignore.
            let honor_affinity = c.node_affinity_policy.as_deref() != Some("Ignore");
            let has_affinity = pod_branches.iter().any(|b| !b.is_empty());
            let inclusion = NodeInclusion {
                affinity: (honor_affinity && has_affinity).then(|| pod_branches.clone()),
                taints: (c.node_taints_policy.as_deref() == Some("Honor"))
                    .then(|| Tolerations::new(spec.tolerations.clone().unwrap_or_default())),
            };
            spreads.push(Spread {
                key: c.topology_key.clone(),
                max_skew: c.max_skew,
                min_domains: c.min_domains,
                hard: c.when_unsatisfiable == "DoNotSchedule",
                selector,
                namespace: namespace.clone(),
                inclusion,
            });
        }

        let pa = affinity.and_then(|a| a.pod_affinity.as_ref());
        let paa = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let required = |terms: Option<&Vec<PodAffinityTerm>>| -> Result<Vec<AffinityTerm>, PodError> {
            terms
                .into_iter()
                .flatten()
                .map(|t| affinity_term(t, &namespace, &labels, 0, namespaces))
                .collect()
        };
        let host_ports = spec
            .containers
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
            .collect();
        let attached = volumes.uses(pod, &namespace);
        Ok(PodInfo {
            key: pod_key(pod),
            affinity: required(pa.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()))?,
            anti_affinity: required(paa.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()))?,
            preferred_affinity: weighted(
                pa.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_deref())
                    .unwrap_or_default(),
                &namespace,
                &labels,
                namespaces,
            )?,
            preferred_anti_affinity: weighted(
                paa.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_deref())
                    .unwrap_or_default(),
                &namespace,
                &labels,
                namespaces,
            )?,
            namespace,
            labels,
            requests,
            branches,
            preferred,
            tolerations: spec.tolerations.clone().unwrap_or_default(),
            spreads,
            host_ports,
            volumes: attached,
        })
    }
}
