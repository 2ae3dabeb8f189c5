//! kube-scheduler's own placement of a plan's pods, replayed: where the scheduler, not
//! the planner, would bind each pending pod once the plan's nodes are up together (as a
//! launch wave releases them, [`crate::decide::waves::wave`]), and which pods it would strand.
//!
//! The plan says which node each pod is for, but kube-scheduler does not read plans. It
//! takes the pending pods one at a time, by priority and then by age (the `PrioritySort`
//! queue-sort plugin, `pkg/scheduler/framework/plugins/queuesort/priority_sort.go`
//! `Less`), keeps the nodes its filters accept, and binds the pod to the best-scoring one
//! (`pkg/scheduler/schedule_one.go`, `selectHost`; a tie is broken at random there, and
//! in a shuffled replay, by node order in the queue-order one). With the default profile (`pkg/scheduler/apis/config/v1/
//! default_plugins.go`, `getDefaultPlugins`), the scores that tell apart nodes of a
//! launch are `NodeResourcesFit` with its default `LeastAllocated` strategy (weight 1)
//! and `NodeResourcesBalancedAllocation` (weight 1):
//!
//! - least allocated (`noderesources/least_allocated.go`, `leastResourceScorer` and
//!   `leastRequestedScore`): per resource, `(allocatable - requested) * 100 /
//!   allocatable` in integers, averaged over cpu and memory with weight 1 each, where
//!   `requested` is the node's pods' with this one;
//! - balanced allocation (`noderesources/balanced_allocation.go`,
//!   `balancedResourceScorer`): with `f` the requested share of cpu and of memory (at
//!   most 1), `(1 - |f_cpu - f_mem| / 2) * 100`;
//! - both count a container without a request as 100m cpu and 200 MiB
//!   (`schedutil.GetNonzeroRequests`).
//!
//! So kube-scheduler spreads pods over the emptiest nodes, where the planner packs them:
//! the big nodes of a wave fill with the first, small pods, and the last, big ones can
//! find no room that is left in one piece. The replay says which.
//!
//! Filters replayed, with the checker's own reading of the objects: the node is usable,
//! the pod fits in what its pods leave (a pod slot included), its `NoSchedule` and
//! `NoExecute` taints are tolerated, its node selector and required node affinity hold,
//! its volumes allow it, and each `DoNotSchedule` spread keeps its skew (the domains
//! are the nodes that exist then, the wave's included: kube-scheduler knows no node to
//! come). Scored as well: the spread score, the pod's soft spreads or the system
//! defaults by its controller ([`crate::decide::kube_scheduler::spread_score`], weight 2), which spreads the pods
//! of one Deployment over zones and nodes. Not replayed, so that the replay never strands
//! a pod the scheduler would place: inter-pod affinity, host ports, and the affinity
//! scores.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use super::scores::{self, DEFAULT_CPU_MILLIS, DEFAULT_MEMORY};
use super::spread_score;
use crate::catalog::RegionCatalog;
use crate::decide::checker::NodeRef;
use crate::decide::checker::daemonsets::Daemon;
use crate::decide::checker::nodepools::{self, Pool};
use crate::decide::checker::pending::{Standing, key, namespace, standing};
use crate::decide::checker::requests::pod_requests;
use crate::decide::checker::selector::{self, Labels};
use crate::decide::checker::state::{self, FinalState, Placed};
use crate::decide::checker::volumes::PodVolumes;
use crate::decide::checker::{node_affinity, spread, tolerations};
use crate::decide::provisioning::plan::ProvisioningPlan;
use crate::decide::waves::hand_tiers;
use crate::model::pod::Pod;
use crate::model::{InstanceType, Resources};
use crate::snapshot::Snapshot;

/// Where the replay put the plan's pods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replay {
    /// Each pod the plan places, in the scheduler's order, and the node it was bound to.
    pub bound: Vec<(String, NodeRef)>,
    /// The pods no node took, in the scheduler's order.
    pub stranded: Vec<Stranded>,
}

/// A pod the replay could not bind.
#[derive(Clone, Debug, PartialEq)]
pub struct Stranded {
    /// `namespace/name`.
    pub pod: String,
    /// Its requests (a pod slot included).
    pub requests: Resources,
    /// The plan's new nodes that every filter but room accepts, each grown to the
    /// cheapest of its alternatives that would take the pod as well.
    pub upgrades: Vec<Upgrade>,
}

/// A new node of the plan grown to another of its alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct Upgrade {
    /// Its index in the plan.
    pub node: usize,
    /// The type it grows to.
    pub instance_type: String,
    /// Its alternatives that are big enough, cheapest first (starting with it).
    pub alternatives: Vec<String>,
    /// The price of `instance_type` in the node's zone and capacity type.
    pub price_per_hour: f64,
    /// Its allocatable.
    pub allocatable: Resources,
}

/// The order the replay takes the pods in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// kube-scheduler's queue order for pods that enter it together: higher priority
    /// first, then the older, then by name.
    Queue,
    /// The pods of each priority shuffled with this seed. Once a wave is released, the
    /// pods come back from the scheduler's backoff queue by when each last failed, not
    /// by age; shuffles stand for that order, which no one can know beforehand.
    Shuffled(u64),
    /// The order a wave is handed to its pods ([`crate::decide::waves::hand_tiers`]): tier by
    /// tier, the biggest first, the pods of each tier shuffled with this seed (they are
    /// handed together, and requeued in no known order).
    Tiered(u64),
}

/// xorshift64*: a deterministic random sequence, so that a plan's replay is a pure
/// function of its input (the crate takes no dependency for a dozen lines).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The pods of the plan in `order`.
fn queue_order<'a>(pods: &mut [(&'a str, &'a Pod)], order: Order) {
    let priority = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    pods.sort_by_key(|(k, p)| {
        let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0.as_millisecond());
        (Reverse(priority(p)), created, *k)
    });
    // The pods are shuffled within each run of equal `groups`.
    let (seed, groups): (u64, Vec<i64>) = match order {
        Order::Queue => return,
        // Within each run of equal priority.
        Order::Shuffled(seed) => (seed, pods.iter().map(|(_, p)| i64::from(priority(p))).collect()),
        // Within each tier.
        Order::Tiered(seed) => {
            let tiers = hand_tiers::tiers(pods.iter().copied());
            let tier = |k: &str| tiers.get(k).map_or(i64::MAX, |&t| t as i64);
            pods.sort_by_key(|(k, _)| tier(k));
            (seed, pods.iter().map(|(k, _)| tier(k)).collect())
        }
    };
    // Fisher-Yates within each group.
    let mut rng = Rng::new(seed);
    let mut next = || rng.next();
    let mut start = 0;
    while start < pods.len() {
        let end = groups[start..]
            .iter()
            .position(|g| *g != groups[start])
            .map_or(pods.len(), |n| start + n);
        for i in (start + 1..end).rev() {
            let j = start + (next() % ((i - start + 1) as u64)) as usize;
            pods.swap(i, j);
        }
        start = end;
    }
}

/// The requests kube-scheduler scores with: a container's missing cpu or memory request
/// counts as the defaults.
fn nonzero(p: &Pod, requests: &Resources) -> (i64, i64) {
    let missing = |name: &str| {
        p.spec.as_ref().map_or(0, |s| {
            s.containers
                .iter()
                .filter(|c| {
                    c.resources
                        .as_ref()
                        .and_then(|r| r.requests.as_ref())
                        .is_none_or(|r| !r.contains_key(name))
                })
                .count() as i64
        })
    };
    (
        requests.cpu_millis + missing("cpu") * DEFAULT_CPU_MILLIS,
        requests.memory + missing("memory") * DEFAULT_MEMORY,
    )
}

/// Per hard spread of the pod, the counts per domain over the nodes that count, and
/// the global minimum: kube-scheduler's `calPreFilterState`, over what exists.
struct SpreadView {
    key: String,
    max_skew: i32,
    self_match: i32,
    counts: BTreeMap<String, i32>,
    min: i32,
}

fn spread_views(pod: &Pod, state: &FinalState<'_>) -> Vec<SpreadView> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let own: Labels = pod.metadata.labels.clone().unwrap_or_default();
    let tols = spec.tolerations.clone().unwrap_or_default();
    let hard = spread::constraints(pod);
    let keys: Vec<&str> = hard.iter().map(|h| h.c.topology_key.as_str()).collect();
    let ns = namespace(pod);
    let no_labels = Labels::new();
    hard.iter()
        .map(|h| {
            let (c, sel, honor_affinity, honor_taints) = (h.c, &h.selector, h.honor_affinity, h.honor_taints);
            let eligible: Vec<bool> = state
                .nodes
                .iter()
                .map(|n| {
                    keys.iter().all(|k| n.labels.contains_key(*k))
                        && (!honor_affinity || node_affinity::matches(spec, &n.labels, n.node_name.as_deref()))
                        && (!honor_taints || tolerations::untolerated(&tols, &n.taints).is_none())
                })
                .collect();
            let mut counts: BTreeMap<String, i32> = BTreeMap::new();
            for (i, n) in state.nodes.iter().enumerate() {
                if eligible[i]
                    && let Some(d) = n.labels.get(&c.topology_key)
                {
                    counts.entry(d.clone()).or_insert(0);
                }
            }
            for q in &state.placed {
                if !eligible[q.node] || q.terminating || namespace(q.pod) != ns {
                    continue;
                }
                let labels = q.pod.metadata.labels.as_ref().unwrap_or(&no_labels);
                if selector::label_selector(sel.as_ref(), labels)
                    && let Some(d) = state.nodes[q.node].labels.get(&c.topology_key)
                {
                    *counts.entry(d.clone()).or_insert(0) += 1;
                }
            }
            let min = if (counts.len() as i32) < c.min_domains.unwrap_or(1) {
                0
            } else {
                counts.values().copied().min().unwrap_or(0)
            };
            SpreadView {
                key: c.topology_key.clone(),
                max_skew: c.max_skew,
                self_match: i32::from(selector::label_selector(sel.as_ref(), &own)),
                counts,
                min,
            }
        })
        .collect()
}

/// Replays kube-scheduler over the plan, taking the pods in `order`: the snapshot's
/// nodes and the plan's new ones, all up, and the pods the plan places; see the module
/// doc.
pub fn replay(snapshot: &Snapshot, region: &RegionCatalog<'_>, plan: &ProvisioningPlan, order: Order) -> Replay {
    replay_with(snapshot, region, plan, order, true)
}

/// [`replay`] without the upgrades of the pods it strands (left empty): which pods
/// strand, at a fraction of the cost.
pub fn stranded_pods(snapshot: &Snapshot, region: &RegionCatalog<'_>, plan: &ProvisioningPlan, order: Order) -> Replay {
    replay_with(snapshot, region, plan, order, false)
}

fn replay_with(
    snapshot: &Snapshot,
    region: &RegionCatalog<'_>,
    plan: &ProvisioningPlan,
    order: Order,
    with_upgrades: bool,
) -> Replay {
    let pools: Vec<Pool> = nodepools::pools(&snapshot.nodepools, &snapshot.nodeclasses, &snapshot.nodes);
    let daemons = Daemon::all(&snapshot.daemonsets);
    let planned: Vec<&str> = plan
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter())
        .chain(plan.existing.iter().flat_map(|e| e.pods.iter()))
        .map(String::as_str)
        .collect();
    let by_key: HashMap<String, &Pod> = snapshot
        .pods
        .iter()
        .filter(|p| matches!(standing(p), Standing::Pending | Standing::Preempting))
        .map(|p| (key(p), p))
        .collect();
    let mut pods: Vec<(&str, &Pod)> = planned.iter().filter_map(|k| Some((*k, *by_key.get(*k)?))).collect();
    queue_order(&mut pods, order);

    // The plan's nodes, empty of the pods the replay places.
    let mut empty = plan.clone();
    empty.existing.clear();
    for n in &mut empty.nodes {
        n.pods.clear();
    }
    let none: HashMap<String, &Pod> = HashMap::new();
    let mut state = state::build(snapshot, region, &empty, &pools, &daemons, &none);
    // What each node's pods request as the scheduler scores it (nonzero defaults).
    let mut scored: Vec<(i64, i64)> = state.nodes.iter().map(|n| (n.used.cpu_millis, n.used.memory)).collect();
    for q in &state.placed {
        if let Some(r) = q.pod.spec.as_ref().and_then(|s| pod_requests(s).ok()) {
            let (c, m) = nonzero(q.pod, &r);
            scored[q.node].0 += c - r.cpu_millis;
            scored[q.node].1 += m - r.memory;
        }
    }

    // kube-scheduler breaks a tie between the best-scoring nodes at random
    // (schedule_one.go `selectHost`, reservoir sampling); a shuffled replay does too, the
    // queue-order one takes the first.
    let mut ties = match order {
        Order::Queue => None,
        Order::Shuffled(seed) | Order::Tiered(seed) => Some(Rng::new(seed ^ 0x5DEE_CE66)),
    };
    let mut out = Replay::default();
    let mut types_by_name: Option<HashMap<&str, &InstanceType>> = None;
    // Each new node's alternatives with their allocatable, worked out once per replay.
    let mut shaped: HashMap<usize, Vec<(&InstanceType, Resources)>> = HashMap::new();
    for (k, pod) in pods {
        let Some(spec) = pod.spec.as_ref() else { continue };
        let Ok(mut requests) = pod_requests(spec) else { continue };
        requests.pods = requests.pods.max(1);
        let (cpu, memory) = nonzero(pod, &requests);
        let tols = spec.tolerations.clone().unwrap_or_default();
        let volumes = PodVolumes::of(pod, snapshot);
        let spreads = spread_views(pod, &state);
        let mut feasible: Vec<(usize, i64)> = Vec::new();
        let mut short_of_room = Vec::new();
        for (i, n) in state.nodes.iter().enumerate() {
            let admits = n.usable
                && tolerations::untolerated(&tols, &n.taints).is_none()
                && node_affinity::matches(spec, &n.labels, n.node_name.as_deref())
                && volumes.node_ok(&n.labels, n.node_name.as_deref())
                && spreads.iter().all(|s| {
                    n.labels
                        .get(&s.key)
                        .is_some_and(|d| s.counts.get(d).copied().unwrap_or(0) + s.self_match - s.min <= s.max_skew)
                });
            if !admits {
                continue;
            }
            if requests.plus(&n.used).fits_in(&n.allocatable).is_err() {
                if let Some((index, pool, _)) = n.new {
                    short_of_room.push((index, pool, n.used.clone()));
                }
                continue;
            }
            let used = scored[i];
            feasible.push((i, scores::resources((used.0 + cpu, used.1 + memory), &n.allocatable)));
        }
        let nodes: Vec<usize> = feasible.iter().map(|(i, _)| *i).collect();
        let spread = spread_score::scores(pod, &state, &nodes);
        let mut best: Option<(i64, usize)> = None;
        let mut tied = 0u64;
        for ((i, fit), spread) in feasible.into_iter().zip(spread) {
            let s = fit + spread_score::WEIGHT * spread;
            match best {
                Some((b, _)) if s < b => {}
                Some((b, _)) if s == b => {
                    tied += 1;
                    if let Some(rng) = ties.as_mut()
                        && rng.next() % tied == 0
                    {
                        best = Some((s, i));
                    }
                }
                _ => {
                    best = Some((s, i));
                    tied = 1;
                }
            }
        }
        match best {
            Some((_, i)) => {
                state.nodes[i].used = state.nodes[i].used.plus(&requests);
                scored[i].0 += cpu;
                scored[i].1 += memory;
                state.placed.push(Placed {
                    pod,
                    key: k.to_string(),
                    node: i,
                    pending: true,
                    terminating: false,
                });
                out.bound.push((k.to_string(), state.nodes[i].name.clone()));
            }
            None => {
                let upgrades = if with_upgrades {
                    let by_name = types_by_name
                        .get_or_insert_with(|| region.types().iter().map(|t| (t.name.as_str(), *t)).collect());
                    short_of_room
                        .iter()
                        .filter_map(|(index, pool, used)| {
                            let alternatives = shaped
                                .entry(*index)
                                .or_insert_with(|| shaped_alternatives(plan, by_name, &pools[*pool], *index));
                            upgrade(plan, region, alternatives, *index, used, &requests)
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                out.stranded.push(Stranded {
                    pod: k.to_string(),
                    requests,
                    upgrades,
                });
            }
        }
    }
    out
}

/// The cheapest type among a new node's alternatives that holds what the replay left on
/// it (`used`, its DaemonSets' included) and the pod, and also the pods the plan put on
/// it: the node grown so that the scheduler's own placement strands nothing.
fn upgrade(
    plan: &ProvisioningPlan,
    region: &RegionCatalog<'_>,
    alternatives: &[(&InstanceType, Resources)],
    index: usize,
    used: &Resources,
    requests: &Resources,
) -> Option<Upgrade> {
    let pn = plan.nodes.get(index)?;
    let need = used
        .plus(requests)
        .max(&pn.daemonset_overhead.plus(&pn.requests).plus(requests));
    let fits: Vec<&(&InstanceType, Resources)> = alternatives
        .iter()
        .filter(|(_, allocatable)| need.fits_in(allocatable).is_ok())
        .collect();
    let (it, allocatable) = fits.first()?;
    let price = region.prices().price(it, &pn.zone, pn.capacity_type)?;
    Some(Upgrade {
        node: index,
        instance_type: it.name.clone(),
        alternatives: fits.iter().map(|(t, _)| t.name.clone()).collect(),
        price_per_hour: price,
        allocatable: allocatable.clone(),
    })
}

/// The alternatives of the plan's new node `index`, in its order, with the allocatable
/// `pool` gives each.
fn shaped_alternatives<'t>(
    plan: &ProvisioningPlan,
    by_name: &HashMap<&str, &'t InstanceType>,
    pool: &Pool,
    index: usize,
) -> Vec<(&'t InstanceType, Resources)> {
    plan.nodes.get(index).map_or_else(Vec::new, |pn| {
        pn.instance_types
            .iter()
            .filter_map(|name| by_name.get(name.as_str()).copied())
            .map(|it| (it, pool.shaped(it).allocatable))
            .collect()
    })
}
