//! The nodes the disruption methods may act on, and why the others may not.
//!
//! Karpenter's `disruption/types.go` `NewCandidate` and `pkg/utils/disruption`: a node is a
//! candidate when a NodePool manages it, it is not already being disrupted, and neither it
//! nor a pod on it says `do-not-disrupt`; a pod whose PodDisruptionBudget allows no
//! disruption now blocks its node (`pdb.Limits.CanEvictPods`). Carpool adds: a pod that
//! no controller owns (a bare pod, which nothing would recreate) blocks its node unless the
//! NodePool opts in (annotation `carpool.sh/disrupt-bare-pods: "true"`).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node as K8sNode;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::{Deserialize, Serialize};

use super::cost::{eviction_cost, lifetime_remaining};
use super::pod_events::last_pod_event;
use crate::catalog::RegionCatalog;
use crate::decide::disruption::pdb::covering;
use crate::decide::disruption::replacement::moves;
use crate::decide::disruption::surge::{may_surge, pool_opted_in};
use crate::decide::provisioning::pod::pod_key;
use crate::model::pod::Pod;
use crate::model::well_known as wk;
use crate::model::well_known::{DISRUPTED_TAINT, DO_NOT_DISRUPT};
use crate::model::{CapacityType, NillableDuration, NodePool};

/// Why a node is not disrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// A pod's PodDisruptionBudget allows no disruption now.
    Pdb,
    /// The node or one of its pods carries `do-not-disrupt`.
    DoNotDisrupt,
    /// The NodePool's disruption budget is used up.
    Budget,
    /// No NodePool that Carpool reads manages the node.
    NotManaged,
    /// A pod no controller owns would be lost.
    BarePod,
    /// The node or its pods changed less than `consolidateAfter` ago.
    ConsolidateAfter,
    /// What it would save is below the NodePool's threshold (or `Balanced`'s score).
    BelowThreshold,
    /// Its pods fit nowhere cheaper.
    NoFit,
    /// The only cheaper fit is the node's own instance type (and capacity type).
    SameType,
    /// It is being disrupted already (tainted `carpool.sh/disrupted`, deleting, or with a
    /// disruption in progress).
    Disrupting,
    /// The NodePool's `consolidationPolicy` does not allow it (`WhenEmpty` and the node
    /// has pods that move; or `consolidateAfter: Never`).
    Policy,
    /// Its last voluntary disruption stalled and was rolled back a short while ago
    /// (annotation `carpool.sh/disruption-stalled-until`, not passed yet): picking it again
    /// at once would launch a fresh replacement for the same stall.
    Stalled,
    /// A pending pod that can be placed now needs the room: it is about to land on the
    /// node, or would be left without a place (or without the room it has on an existing
    /// node) once the node is gone.
    PendingPods,
    /// Its NodePool keeps its zones balanced (`carpool.sh/zone-balance`), and removing it
    /// would leave them further apart than that allows ([`super::zone_balance`]).
    ZoneBalance,
}

/// A reason a node is not disrupted, for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocked {
    /// The kind.
    pub kind: BlockKind,
    /// What, precisely (the pod, the PDB, the annotation, the figures).
    pub message: String,
}

impl Blocked {
    /// A reason.
    pub fn new(kind: BlockKind, message: impl Into<String>) -> Self {
        Blocked {
            kind,
            message: message.into(),
        }
    }
}

/// A node as the disruption methods see it.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    /// The node's name.
    pub name: String,
    /// The Node.
    pub node: &'a K8sNode,
    /// Its NodePool, when one Carpool reads manages it.
    pub pool: Option<&'a NodePool>,
    /// The NodePool's name from the node's label (empty when none).
    pub pool_name: String,
    /// `node.kubernetes.io/instance-type`.
    pub instance_type: String,
    /// `topology.kubernetes.io/zone`.
    pub zone: String,
    /// `karpenter.sh/capacity-type`.
    pub capacity_type: Option<CapacityType>,
    /// USD per hour (0 when the catalog does not know the offering).
    pub price: f64,
    /// When the Node was created.
    pub created: Option<SystemTime>,
    /// Its last pod event, from which `consolidateAfter` counts (Karpenter's
    /// `lastPodEventTime`): the latest of its creation, its pods' start, the start of a
    /// pod's termination, and a pod seen gone ([`super::pod_events`]).
    pub last_change: Option<SystemTime>,
    /// The annotations that keep its pod events on the Node, when they changed (only for
    /// a node of a NodePool Carpool reads).
    pub pod_event_record: Option<crate::model::MetadataPatch>,
    /// The pods a drain would evict (they move).
    pub moving: Vec<&'a Pod>,
    /// Karpenter's disruption cost: the moving pods' eviction costs times the share of the
    /// node's lifetime left. Candidates are tried cheapest first.
    pub disruption_cost: f64,
    /// 1 for the node plus each moving pod's positive eviction cost: the move's disruption
    /// in `Balanced`'s score.
    pub balanced_cost: f64,
    /// Whether its Ready condition is True, and since when it has had its current value.
    pub ready: (bool, Option<SystemTime>),
    /// What keeps it from every voluntary method: not managed, disrupting, do-not-disrupt,
    /// a PDB, a bare pod.
    pub blocked: Option<Blocked>,
}

fn time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> SystemTime {
    SystemTime::from(t.0)
}

fn is_finished(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed")
}

/// Whether something owns the pod (a ReplicaSet, a StatefulSet, a Job...) that would
/// recreate it once evicted.
fn has_owner(pod: &Pod) -> bool {
    pod.metadata.owner_references.as_ref().is_some_and(|o| !o.is_empty())
}

fn annotated(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Option<&'static str> {
    let a = annotations?;
    DO_NOT_DISRUPT
        .into_iter()
        .find(|k| a.get(*k).is_some_and(|v| v == "true"))
}

/// Why a node may not be disrupted voluntarily, from what is on it: do-not-disrupt (the
/// node's or a live pod's), a moving pod whose PDB allows nothing now (unless its workload
/// opted in to a surge before eviction) or that several PDBs cover (the apiserver refuses
/// to evict it), a bare pod.
fn static_block(
    node: &K8sNode,
    pool: &NodePool,
    pods: &[&Pod],
    moving: &[&Pod],
    pdbs: &[PodDisruptionBudget],
) -> Option<Blocked> {
    if let Some(a) = annotated(node.metadata.annotations.as_ref()) {
        return Some(Blocked::new(
            BlockKind::DoNotDisrupt,
            format!("the node is annotated {a}"),
        ));
    }
    for p in pods.iter().filter(|p| !is_finished(p)) {
        if let Some(a) = annotated(p.metadata.annotations.as_ref()) {
            return Some(Blocked::new(
                BlockKind::DoNotDisrupt,
                format!("pod {} is annotated {a}", pod_key(p)),
            ));
        }
    }
    for p in moving {
        let budgets = covering(p, pdbs);
        if budgets.len() > 1 {
            let names: Vec<String> = budgets.iter().map(|b| b.key()).collect();
            return Some(Blocked::new(
                BlockKind::Pdb,
                format!(
                    "pod {} is covered by several PDBs ({}): it cannot be evicted",
                    pod_key(p),
                    names.join(", ")
                ),
            ));
        }
        // A workload that opted in to a surge before eviction is restarted by the drain
        // instead of waiting for its PDB (crate::decide::disruption::surge).
        if let Some(b) = budgets.first()
            && b.disruptions_allowed().is_none_or(|n| n <= 0)
            && !may_surge(p, pool_opted_in(pool))
        {
            return Some(Blocked::new(BlockKind::Pdb, format!("pod {}: {b}", pod_key(p))));
        }
    }
    if !pool.disrupts_bare_pods()
        && let Some(p) = moving.iter().find(|p| !has_owner(p))
    {
        return Some(Blocked::new(
            BlockKind::BarePod,
            format!(
                "pod {} has no controller to recreate it; annotate the NodePool carpool.sh/disrupt-bare-pods: \"true\" to allow",
                pod_key(p)
            ),
        ));
    }
    None
}

/// Whether the node is being disrupted already.
fn disrupting(node: &K8sNode, in_progress: &BTreeSet<String>) -> Option<&'static str> {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    if in_progress.contains(name) {
        return Some("a disruption of it is in progress");
    }
    if node.metadata.deletion_timestamp.is_some() {
        return Some("it is being deleted");
    }
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT));
    tainted.then_some("it carries the carpool.sh/disrupted taint")
}

/// The nodes of a snapshot as candidates, with the static reasons that block them.
///
/// A node is managed when it is labelled `carpool.sh/managed=true` or carries a
/// `karpenter.sh/nodepool` label, that NodePool is among `pools`, and, when `owned` is
/// given (the instances this deployment launched, [`crate::decide::housekeeping::ownership::launched_by`]),
/// its providerID names one of them. A label is not ownership: Karpenter labels its own
/// nodes `karpenter.sh/nodepool` too, and disrupts only the nodes it has a NodeClaim of
/// (`pkg/controllers/state/statenode.go`, `StateNode.Managed`: `NodeClaim != nil`).
#[allow(clippy::too_many_arguments)] // the snapshot's parts a candidate reads, and the run's
pub fn candidates<'a>(
    nodes: &'a [K8sNode],
    pods: &'a [Pod],
    pdbs: &[PodDisruptionBudget],
    pools: &'a [NodePool],
    region: &RegionCatalog<'_>,
    in_progress: &BTreeSet<String>,
    owned: Option<&BTreeSet<String>>,
    now: SystemTime,
) -> Vec<Candidate<'a>> {
    let mut by_node: HashMap<&str, Vec<&Pod>> = HashMap::new();
    for p in pods {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            by_node.entry(n).or_default().push(p);
        }
    }
    let types: HashMap<&str, _> = region.types().iter().map(|t| (t.name.as_str(), *t)).collect();
    nodes
        .iter()
        .filter_map(|node| {
            let name = node.metadata.name.clone()?;
            let none = Default::default();
            let labels = node.metadata.labels.as_ref().unwrap_or(&none);
            let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
            let pool_name = label(wk::NODEPOOL);
            let managed = labels.get(wk::CARPOOL_MANAGED).is_some_and(|v| v == "true") || !pool_name.is_empty();
            let pool = pools.iter().find(|p| p.name() == pool_name);
            let instance_type = label(wk::INSTANCE_TYPE);
            let zone = label(wk::ZONE);
            let capacity_type = labels.get(wk::CAPACITY_TYPE).and_then(|c| c.parse().ok());
            let price = types
                .get(instance_type.as_str())
                .zip(capacity_type)
                .and_then(|(it, ct)| region.prices().price(it, &zone, ct))
                .unwrap_or(0.0);
            let on_node: &[&Pod] = by_node.get(name.as_str()).map_or(&[], Vec::as_slice);
            let moving: Vec<&Pod> = on_node.iter().copied().filter(|p| moves(p)).collect();
            let created = node.metadata.creation_timestamp.as_ref().map(time);
            let pod_event = last_pod_event(node, on_node, now);
            let last_change = pod_event.at;
            let ready_condition = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
            let ready = (
                ready_condition.is_some_and(|c| c.status == "True"),
                ready_condition.and_then(|c| c.last_transition_time.as_ref()).map(time),
            );
            let expire_after = pool.map(|p| p.spec.template.spec.expire_after);
            let instance = crate::model::node::node_instance_id(node);
            let blocked = if !managed {
                Some(Blocked::new(
                    BlockKind::NotManaged,
                    "no carpool.sh/managed=true or karpenter.sh/nodepool label",
                ))
            } else if let Some(owned) = owned
                && !instance.is_some_and(|i| owned.contains(i))
            {
                Some(Blocked::new(
                    BlockKind::NotManaged,
                    match instance {
                        Some(i) => format!(
                            "its instance {i} was not launched by this Carpool deployment (no launch-id tag, or another deployment's tag)"
                        ),
                        None => "its providerID names no EC2 instance".to_string(),
                    },
                ))
            } else if pool.is_none() {
                Some(Blocked::new(
                    BlockKind::NotManaged,
                    format!("NodePool {pool_name:?} is not in the snapshot, or was skipped as invalid"),
                ))
            } else if let Some(why) = disrupting(node, in_progress) {
                Some(Blocked::new(BlockKind::Disrupting, why))
            } else if let Some(why) = stalled(node, now) {
                Some(Blocked::new(BlockKind::Stalled, why))
            } else if price <= 0.0 {
                Some(Blocked::new(
                    BlockKind::NotManaged,
                    format!("no price for {instance_type:?} in {zone:?} ({}); its labels name no offering the catalog knows", label(wk::CAPACITY_TYPE)),
                ))
            } else {
                pool.and_then(|p| static_block(node, p, on_node, &moving, pdbs))
            };
            let costs: Vec<f64> = moving.iter().map(|p| eviction_cost(p)).collect();
            Some(Candidate {
                disruption_cost: costs.iter().sum::<f64>() * lifetime_remaining(created, expire_after, Some(now)),
                balanced_cost: 1.0 + costs.iter().filter(|c| **c > 0.0).sum::<f64>(),
                name,
                node,
                pool,
                pool_name,
                instance_type,
                zone,
                capacity_type,
                price,
                created,
                last_change,
                pod_event_record: if pool.is_some() { pod_event.record } else { None },
                moving,
                ready,
                blocked,
            })
        })
        .collect()
}

/// Why a node is left alone after a stalled disruption: its
/// [`wk::STALLED_UNTIL`] annotation names a time after `now`. An annotation that does not
/// parse is ignored.
fn stalled(node: &K8sNode, now: SystemTime) -> Option<String> {
    let value = node.metadata.annotations.as_ref()?.get(wk::STALLED_UNTIL)?;
    let until: jiff::Timestamp = value.parse().ok()?;
    let until = SystemTime::from(until);
    (until > now).then(|| {
        format!(
            "its last disruption stalled and was rolled back: left alone until {value} ({})",
            wk::STALLED_UNTIL
        )
    })
}

/// Whether `consolidateAfter` has passed for the candidate at `now`; the reason when not.
pub fn consolidatable(c: &Candidate<'_>, now: SystemTime) -> Result<(), Blocked> {
    let Some(pool) = c.pool else {
        return Err(Blocked::new(BlockKind::NotManaged, "no NodePool"));
    };
    match pool.spec.disruption.consolidate_after {
        NillableDuration::Never => Err(Blocked::new(
            BlockKind::Policy,
            format!("NodePool {} has consolidateAfter: Never", pool.name()),
        )),
        NillableDuration::After(after) => {
            let since = c.last_change.unwrap_or(SystemTime::UNIX_EPOCH);
            let quiet = now.duration_since(since).unwrap_or(Duration::ZERO);
            if quiet >= after {
                Ok(())
            } else {
                Err(Blocked::new(
                    BlockKind::ConsolidateAfter,
                    format!(
                        "last change {}s ago, consolidateAfter is {}s",
                        quiet.as_secs(),
                        after.as_secs()
                    ),
                ))
            }
        }
    }
}
