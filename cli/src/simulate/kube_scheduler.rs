//! The simulated kube-scheduler: it binds pending pods to Ready nodes as kube-scheduler's
//! default profile would, not where any autoscaler planned them.
//!
//! Queue (`queuesort/priority_sort.go`, `Less`): by priority, then age; every pod here has
//! priority 0, so by creation time, then name.
//!
//! Filters, for each node (`pkg/scheduler/framework/plugins`):
//! - `NodeUnschedulable` and readiness: the node is Ready and not cordoned;
//! - `TaintToleration`: every `NoSchedule` and `NoExecute` taint is tolerated;
//! - `NodeAffinity`: `nodeSelector` and the required node affinity hold;
//! - `NodeResourcesFit`: the pod's requests fit in what the node's pods leave of its
//!   allocatable (cpu, memory, GPUs, a pod slot);
//! - `InterPodAffinity`: the required anti-affinity to the workload's own pods holds
//!   over its topology key;
//! - `PodTopologySpread`: each `DoNotSchedule` spread keeps its skew, over the domains of
//!   the nodes that pass the pod's node selector and affinity (the default
//!   `nodeAffinityPolicy: Honor`, `nodeTaintsPolicy: Ignore`).
//!
//! Scores, of the nodes that pass (the default plugin weights, `apis/config/v1/
//! default_plugins.go`):
//! - `NodeResourcesFit` with `LeastAllocated` (weight 1, `noderesources/least_allocated.go`,
//!   `leastRequestedScore`): per resource `(allocatable - requested) * 100 / allocatable`,
//!   cpu and memory weighted 1 each, `requested` counting a container without requests
//!   as 100m and 200 MiB (`schedutil.GetNonzeroRequests`);
//! - `NodeResourcesBalancedAllocation` (weight 1, `noderesources/balanced_allocation.go`,
//!   `balancedResourceScorer`): `(1 - std(cpu share, memory share)) * 100`, which for two
//!   resources is `(1 - |f_cpu - f_mem| / 2) * 100`;
//! - `PodTopologySpread` (weight 2, `podtopologyspread/scoring.go`): for `ScheduleAnyway`
//!   spreads, fewer matching pods in the node's domain score higher, normalised to 0-100.
//!
//! The best score wins; ties are broken at random (`schedule_one.go`, `selectHost`), here
//! from the run's seed. Not modelled: preemption, the default system spread, preferred
//! affinities, image locality, `PreferNoSchedule` taints.

use std::collections::HashMap;

use carpool::decide::kube_scheduler::scores::{self, DEFAULT_CPU_MILLIS, DEFAULT_MEMORY, MAX_SCORE};
use carpool::model::Resources;

use super::node::SimNode;
use super::rng::Rng;
use super::scenario::{Requirement, Toleration};
use super::workload::{Shape, SimPod};

struct NodeState {
    used: Resources,
    /// cpu and memory as the scores count them (non-zero defaults).
    scored: (i64, i64),
    /// Pods per shape.
    apps: HashMap<usize, i64>,
}

fn tolerates(tols: &[Toleration], key: &str, value: Option<&str>, effect: &str) -> bool {
    tols.iter().any(|t| {
        let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == effect);
        let exists = t.operator.as_deref() == Some("Exists");
        let key_ok = (t.key.is_empty() && exists) || t.key == key;
        let value_ok = exists || t.value.as_deref().unwrap_or("") == value.unwrap_or("");
        effect_ok && key_ok && value_ok
    })
}

/// `NodeAffinity`: the node selector and the required terms.
pub fn selects(shape: &Shape, node: &SimNode) -> bool {
    let t = &shape.template;
    t.node_selector.iter().all(|(k, v)| node.labels.get(k) == Some(v))
        && t.node_affinity.iter().all(|r| requirement(r, node))
}

fn requirement(r: &Requirement, node: &SimNode) -> bool {
    let v = node.labels.get(&r.key);
    match r.operator.as_str() {
        "In" => v.is_some_and(|v| r.values.contains(v)),
        "NotIn" => v.is_none_or(|v| !r.values.contains(v)),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        _ => false,
    }
}

/// `TaintToleration`: every `NoSchedule` and `NoExecute` taint tolerated.
pub fn tolerated(shape: &Shape, node: &SimNode) -> bool {
    node.taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| tolerates(&shape.template.tolerations, &t.key, t.value.as_deref(), &t.effect))
}

/// The filters a pod's shape passes on a node, room aside.
pub fn admits(shape: &Shape, node: &SimNode) -> bool {
    node.usable() && tolerated(shape, node) && selects(shape, node)
}

fn nonzero(r: &Resources) -> (i64, i64) {
    (
        if r.cpu_millis == 0 {
            DEFAULT_CPU_MILLIS
        } else {
            r.cpu_millis
        },
        if r.memory == 0 { DEFAULT_MEMORY } else { r.memory },
    )
}

/// Binds what it can of `pending` (in queue order) to `nodes`, given the pods already
/// `bound`: the bindings, as (pod key, node index).
pub fn schedule(
    pending: &[&SimPod],
    bound: &[&SimPod],
    nodes: &[SimNode],
    shapes: &[Shape],
    rng: &mut Rng,
) -> Vec<(String, usize)> {
    let index: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut state: Vec<NodeState> = nodes
        .iter()
        .map(|_| NodeState {
            used: Resources::default(),
            scored: (0, 0),
            apps: HashMap::new(),
        })
        .collect();
    for p in bound {
        let Some(i) = p.node.as_deref().and_then(|n| index.get(n)) else {
            continue;
        };
        let r = &shapes[p.shape].requests;
        let s = &mut state[*i];
        s.used = s.used.plus(r);
        let (c, m) = nonzero(r);
        s.scored.0 += c;
        s.scored.1 += m;
        *s.apps.entry(p.shape).or_insert(0) += 1;
    }
    let mut queue: Vec<&&SimPod> = pending.iter().collect();
    queue.sort_by(|a, b| a.created.total_cmp(&b.created).then(a.key.cmp(&b.key)));
    let mut out = Vec::new();
    for pod in queue {
        let shape = &shapes[pod.shape];
        let req = &shape.requests;
        let (cpu, mem) = nonzero(req);
        // Per spread: the count of the workload's pods per domain over eligible nodes.
        let eligible: Vec<usize> = (0..nodes.len()).filter(|&i| selects(shape, &nodes[i])).collect();
        let domain_counts = |key: &str, state: &[NodeState]| -> HashMap<String, i64> {
            let mut counts: HashMap<String, i64> = HashMap::new();
            for &i in &eligible {
                if let Some(d) = nodes[i].labels.get(key) {
                    *counts.entry(d.clone()).or_insert(0) += state[i].apps.get(&pod.shape).copied().unwrap_or(0);
                }
            }
            counts
        };
        let spreads: Vec<(String, i64, bool, HashMap<String, i64>)> = shape
            .template
            .spread
            .iter()
            .map(|s| {
                (
                    s.topology_key.clone(),
                    i64::from(s.max_skew),
                    s.when_unsatisfiable == "DoNotSchedule",
                    domain_counts(&s.topology_key, &state),
                )
            })
            .collect();
        let anti_counts = shape
            .template
            .anti_affinity
            .as_ref()
            .map(|key| (key.clone(), domain_counts(key, &state)));
        let mut feasible: Vec<(usize, i64)> = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            if !admits(shape, n) {
                continue;
            }
            if req.plus(&state[i].used).fits_in(&n.allocatable).is_err() {
                continue;
            }
            if let Some((key, counts)) = &anti_counts {
                if key == "kubernetes.io/hostname" {
                    if state[i].apps.get(&pod.shape).copied().unwrap_or(0) > 0 {
                        continue;
                    }
                } else if n
                    .labels
                    .get(key)
                    .is_none_or(|d| counts.get(d).copied().unwrap_or(0) > 0)
                {
                    continue;
                }
            }
            let spread_ok = spreads.iter().filter(|s| s.2).all(|(key, skew, _, counts)| {
                let min = counts.values().copied().min().unwrap_or(0);
                n.labels
                    .get(key)
                    .is_some_and(|d| counts.get(d).copied().unwrap_or(0) + 1 - min <= *skew)
            });
            if !spread_ok {
                continue;
            }
            let s = &state[i];
            let score = scores::least_allocated((s.scored.0 + cpu, s.scored.1 + mem), &n.allocatable)
                + scores::balanced_allocation(
                    (s.used.cpu_millis + req.cpu_millis, s.used.memory + req.memory),
                    &n.allocatable,
                );
            feasible.push((i, score));
        }
        // PodTopologySpread's score for ScheduleAnyway spreads, weight 2.
        for (key, _, hard, counts) in &spreads {
            if *hard {
                continue;
            }
            let raw: Vec<i64> = feasible
                .iter()
                .map(|(i, _)| {
                    nodes[*i]
                        .labels
                        .get(key)
                        .map_or(0, |d| counts.get(d).copied().unwrap_or(0))
                })
                .collect();
            let (lo, hi) = (
                raw.iter().copied().min().unwrap_or(0),
                raw.iter().copied().max().unwrap_or(0),
            );
            for (f, r) in feasible.iter_mut().zip(raw) {
                let s = if hi > lo {
                    MAX_SCORE * (hi - r) / (hi - lo)
                } else {
                    MAX_SCORE
                };
                f.1 += 2 * s;
            }
        }
        let Some(best) = feasible.iter().map(|f| f.1).max() else {
            continue;
        };
        let ties: Vec<usize> = feasible.iter().filter(|f| f.1 == best).map(|f| f.0).collect();
        let i = ties[rng.below(ties.len())];
        let s = &mut state[i];
        s.used = s.used.plus(req);
        s.scored.0 += cpu;
        s.scored.1 += mem;
        *s.apps.entry(pod.shape).or_insert(0) += 1;
        out.push((pod.key.clone(), i));
    }
    out
}

/// Whether the `moving` pods would all be bound to `nodes`, given the pods `bound`
/// there, by this scheduler's own filters (spreads and anti-affinity included): the
/// baselines' scheduling simulation before they remove a node.
pub fn fits(moving: &[&SimPod], bound: &[&SimPod], nodes: &[SimNode], shapes: &[Shape]) -> bool {
    let pending: Vec<SimPod> = moving
        .iter()
        .map(|p| SimPod {
            node: None,
            bound_at: None,
            ..(*p).clone()
        })
        .collect();
    let refs: Vec<&SimPod> = pending.iter().collect();
    schedule(&refs, bound, nodes, shapes, &mut Rng::new(0)).len() == moving.len()
}
