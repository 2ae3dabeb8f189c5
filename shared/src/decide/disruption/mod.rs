//! Disruption: which nodes to remove or replace now, as a [`DisruptionCommand`] (a value),
//! and why every other node is kept ([`CandidateReport`]).
//!
//! Karpenter's disruption controller is an ordered list of methods
//! (`pkg/controllers/disruption/controller.go`: emptiness, drift, multi-node and
//! single-node consolidation). Carpool tries these methods, in order, and the first that
//! finds a command acts; one command per run:
//!
//! 0. [`static_scale_down`]: a static NodePool's nodes past its `replicas`, empty first;
//! 1. [`emptiness`]: nodes with no pod that moves (only DaemonSet, mirror and finished
//!    pods), past `consolidateAfter`;
//! 2. [`repair`]: a node whose Ready condition has been False or Unknown too long;
//! 3. [`expiration`]: a node past its NodePool's `expireAfter`;
//! 4. [`drift`]: a node launched from another NodePool template, EC2NodeClass or AMI;
//! 5. [`multi_node`]: several nodes removed, with at most one cheaper replacement, never
//!    one of a removed type at that node's price or above;
//! 6. [`single_node`]: one node deleted, or replaced by a cheaper one;
//! 7. [`split`]: one node replaced by two that cost less in total;
//! 8. [`spot`]: spot-to-spot, and on-demand back to spot.
//!
//! Every method moves pods only where the provisioner's own simulation puts them
//! ([`simulate`]), with the pending pods placed first ([`pending`]): a command never takes
//! the room a pending pod is about to use, and a pod that cannot be placed anyway holds
//! nothing back (Karpenter's `AllNonPendingPodsScheduled`). When the cheapest packing of
//! the moving pods needs more new nodes than a method allows, they are planned again on
//! one ([`one_node`]). Consolidation (methods 1 and 5–8) refuses a removal after which a
//! pending pod that can be placed now could not be, or would need a new node for want of
//! the room it has now (the flapping Karpenter's simulation of pending pods prevents),
//! touches only nodes past `consolidateAfter`, honours the NodePools' [`budgets`], and
//! must save at least the pool's threshold ([`savings`]) at what the nodes cost past the
//! Savings Plan commitments ([`prepaid`]), keeps the zone balance a pool
//! asks for ([`zone_balance`]); a spot replacement of spot needs
//! `spot_to_spot_min_types` cheaper types, and carries only the cheapest of them. No
//! method touches a node that is not managed, is being disrupted, or is blocked by
//! `do-not-disrupt`, a PodDisruptionBudget or a bare pod ([`candidate`]); repair alone acts
//! on a broken node whatever its pods say.

pub mod budgets;
pub mod candidate;
pub mod command;
pub mod cost;
pub mod drain;
pub mod drift;
pub mod emptiness;
pub mod expiration;
pub mod multi_node;
pub mod one_node;
pub mod pdb;
pub mod pending;
pub mod pod_events;
pub mod prepaid;
pub mod repair;
pub mod replacement;
pub mod savings;
pub mod simulate;
pub mod single_node;
pub mod split;
pub mod spot;
pub mod static_scale_down;
pub mod surge;
pub mod zone_balance;

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use self::budgets::Allowance;
pub use self::candidate::{BlockKind, Blocked, Candidate};
use self::candidate::{candidates, consolidatable};
pub use self::command::{DisruptionCommand, Method, Move};
use self::pending::{Baseline, PendingView, pending_first};
use self::simulate::{Misfit, Placement, Pricer, place};
use crate::catalog::RegionCatalog;
use crate::model::ResolvedImage;
use crate::model::well_known::DISRUPTED_TAINT;
use crate::model::well_known::EPHEMERAL_TAINTS;
use crate::model::{ConsolidationPolicy, DisruptionReason, NodePool};
use crate::snapshot::Snapshot;

/// Settings of the disruption decision.
#[derive(Clone, Debug, PartialEq)]
pub struct DisruptionSettings {
    /// How long a node's Ready condition must have been False or Unknown before it is
    /// repaired (Karpenter's AWS provider: 30 minutes).
    pub repair_after: Duration,
    /// Repair stops while more than this share of a pool's nodes, in percent, is unhealthy
    /// (Karpenter's node health controller: 20%): a fault of the whole pool is not
    /// repaired node by node.
    pub repair_max_unhealthy_percent: u32,
    /// At most this many scheduling simulations per decision: the search stops there
    /// with the best command found (Karpenter bounds its searches by time instead).
    pub max_simulations: usize,
    /// Multi-node consolidation considers at most this many candidates (Karpenter: 100).
    pub multi_node_max_candidates: usize,
    /// A spot-to-spot replacement needs at least this many cheaper spot types, so that
    /// spot's price-capacity-optimized choice is not a race to the cheapest, most
    /// interrupted pool (Karpenter's `MinInstanceTypesForSpotToSpotConsolidation`: 15).
    pub spot_to_spot_min_types: usize,
}

impl Default for DisruptionSettings {
    fn default() -> Self {
        DisruptionSettings {
            repair_after: Duration::from_secs(30 * 60),
            repair_max_unhealthy_percent: 20,
            max_simulations: 100,
            multi_node_max_candidates: 100,
            spot_to_spot_min_types: 15,
        }
    }
}

/// What the decision reads.
pub struct DisruptionInput<'a> {
    /// The cluster.
    pub snapshot: &'a Snapshot,
    /// The region's catalog and prices.
    pub region: &'a RegionCatalog<'a>,
    /// Now.
    pub now: SystemTime,
    /// Nodes with a disruption in progress (`DISRUPT#` records), by name.
    pub in_progress: BTreeSet<String>,
    /// The settings.
    pub settings: DisruptionSettings,
    /// The AMIs each EC2NodeClass resolves now, by class name (for drift); a class not
    /// here is read from its `status.amis`, as Karpenter writes it.
    pub images: BTreeMap<String, Vec<ResolvedImage>>,
    /// What each class's subnet and security group selectors select now, and where each
    /// instance is in the network (for drift); empty: not checked.
    pub networks: drift::Networks,
    /// The instances this deployment launched (their launch-id and deployment tags,
    /// [`crate::decide::housekeeping::ownership::launched_by`]), when the cloud was asked:
    /// a node whose instance is not among them is not a candidate, whatever its labels.
    /// `None` (a cluster dump, read without the cloud) goes by the labels alone.
    pub owned: Option<BTreeSet<String>>,
    /// The NodePools held back by launch backoff (their class failed to launch): no new
    /// node is planned from them, as the provisioner launches none; their nodes are
    /// candidates still, to be deleted onto other capacity.
    pub held_back: BTreeSet<String>,
}

/// One node as the decision saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateReport {
    /// The node's name.
    pub node: String,
    /// Its NodePool (empty when none).
    pub nodepool: String,
    /// USD per hour.
    pub price_per_hour: f64,
    /// Whether a method may disrupt it now.
    pub disruptable: bool,
    /// Why not, when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<Blocked>,
}

/// The decision: a command or none, and every node with why it is kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DisruptionDecision {
    /// What to do now, if anything.
    pub command: Option<DisruptionCommand>,
    /// Every node, by name.
    pub candidates: Vec<CandidateReport>,
    /// The scheduling simulations run.
    pub simulations: usize,
    /// Per node, the annotations that keep its pod events ([`pod_events`]) where they
    /// changed: the consolidator writes them, and the next decision reads them.
    #[serde(default)]
    pub pod_events: Vec<(String, crate::model::MetadataPatch)>,
    /// Per node whose drift hash is of another version, the labels that give it the
    /// current hash and version ([`drift::rebaseline`]): the consolidator writes them.
    #[serde(default)]
    pub hash_records: Vec<(String, crate::model::MetadataPatch)>,
}

/// The state of one decision, shared by the methods.
pub struct Ctx<'a> {
    /// The cluster.
    pub snapshot: &'a Snapshot,
    /// The region.
    pub region: &'a RegionCatalog<'a>,
    /// Prices by type.
    pub pricer: Pricer<'a>,
    /// Now.
    pub now: SystemTime,
    /// Settings.
    pub settings: DisruptionSettings,
    /// Every node.
    pub candidates: Vec<Candidate<'a>>,
    /// Per candidate (index), why a method declined it; a static block is never replaced.
    pub verdicts: BTreeMap<usize, Blocked>,
    /// Simulations run: one per removal tried (its pending pods placed first included), one
    /// more per one-node replan; the pending pods' baseline is not counted.
    pub simulations: usize,
    /// Pods waiting for the provisioner.
    pub pending: usize,
    /// Where the provisioner's simulation puts the pending pods now ([`pending`]).
    pub baseline: Baseline,
    /// The last removal's view with the pending pods placed, by the nodes removed.
    views: Option<(BTreeSet<String>, Rc<PendingView>)>,
    /// Per pool: its nodes, and those disrupting now.
    pub pool_nodes: BTreeMap<String, (usize, usize)>,
    /// The AMIs each class resolves now.
    pub images: BTreeMap<String, Vec<ResolvedImage>>,
    /// What the classes select in the network, and where the instances are.
    pub networks: drift::Networks,
    /// The NodePools held back by launch backoff: no new node from them.
    pub held_back: BTreeSet<String>,
}

impl<'a> Ctx<'a> {
    /// Builds the candidates of `input`.
    pub fn new(input: &DisruptionInput<'a>) -> Self {
        let snapshot = input.snapshot;
        let mut candidates = candidates(
            &snapshot.nodes,
            &snapshot.pods,
            &snapshot.pdbs,
            &snapshot.nodepools,
            input.region,
            &input.in_progress,
            input.owned.as_ref(),
            input.now,
        );
        prepaid::apply(&mut candidates, input.region);
        let mut pool_nodes: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for c in candidates.iter().filter(|c| c.pool.is_some()) {
            let e = pool_nodes.entry(c.pool_name.clone()).or_default();
            e.0 += 1;
            if c.blocked.as_ref().is_some_and(|b| b.kind == BlockKind::Disrupting) {
                e.1 += 1;
            }
        }
        let baseline = Baseline::of(snapshot, input.region);
        Ctx {
            snapshot,
            region: input.region,
            pricer: Pricer::new(input.region),
            now: input.now,
            settings: input.settings.clone(),
            verdicts: BTreeMap::new(),
            simulations: 0,
            pending: baseline.pending.len(),
            baseline,
            views: None,
            pool_nodes,
            candidates,
            images: input.images.clone(),
            networks: input.networks.clone(),
            held_back: input.held_back.clone(),
        }
    }

    /// Records why a method declined candidate `i` (a static block stays).
    pub fn decline(&mut self, i: usize, why: Blocked) {
        if self.candidates[i].blocked.is_none() {
            self.verdicts.insert(i, why);
        }
    }

    /// What each pool may still disrupt for `reason` now.
    pub fn allowance(&self, reason: Option<DisruptionReason>) -> Allowance {
        match reason {
            Some(r) => Allowance::new(&self.snapshot.nodepools, &self.pool_nodes, r, self.now),
            None => Allowance::unlimited(),
        }
    }

    /// Whether `method` may act on candidate `i` (budgets aside): its static blocks
    /// (except for repair), and for consolidation the pool's policy, a node done starting
    /// and `consolidateAfter`. Pending pods do not block it: the simulation places them
    /// first ([`pending`]).
    pub fn eligible(&self, i: usize, method: Method) -> Result<(), Blocked> {
        let c = &self.candidates[i];
        if let Some(b) = &c.blocked
            && (method != Method::Repair || matches!(b.kind, BlockKind::NotManaged | BlockKind::Disrupting))
        {
            return Err(b.clone());
        }
        if !method.consolidates() {
            return Ok(());
        }
        let Some(pool) = c.pool else {
            return Err(Blocked::new(BlockKind::NotManaged, "no NodePool"));
        };
        // Karpenter: "When replicas is set, ConsolidationPolicy is simply ignored" (the
        // NodePool CRD); its static deprovisioning alone removes a static pool's nodes.
        if let Some(replicas) = pool.replicas() {
            return Err(Blocked::new(
                BlockKind::Policy,
                format!(
                    "NodePool {} is static: it keeps {replicas} node(s), and consolidation leaves them",
                    pool.name()
                ),
            ));
        }
        if method != Method::Emptiness && pool.spec.disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty {
            return Err(Blocked::new(
                BlockKind::Policy,
                format!(
                    "NodePool {} consolidates WhenEmpty and {} pod(s) would move",
                    pool.name(),
                    c.moving.len()
                ),
            ));
        }
        if let Some(why) = starting(c, pool) {
            return Err(Blocked::new(BlockKind::ConsolidateAfter, why));
        }
        consolidatable(c, self.now)
    }

    /// Runs one simulation of a consolidation; `None` once the decision's budget of
    /// simulations is spent. The pending pods are placed first, and a removal that would
    /// displace one is refused ([`pending`]); when `max_new` is 1 and the pods need more
    /// new nodes, they are planned again on one ([`one_node`], a second simulation).
    pub fn place(
        &mut self,
        removed: &[usize],
        pools: &[NodePool],
        max_new: usize,
    ) -> Option<Result<Placement, Misfit>> {
        self.simulate(removed, pools, max_new, true)
    }

    /// The first pending pod that removing `removed` would displace ([`pending`]), when
    /// pods are pending; the pending pods' simulation counts as one.
    pub fn displaces(&mut self, removed: &[usize]) -> Option<Misfit> {
        if self.baseline.is_empty() {
            return None;
        }
        let names: BTreeSet<String> = removed.iter().map(|&i| self.candidates[i].name.clone()).collect();
        self.simulations += 1;
        self.view(&names)?.displaced.clone()
    }

    /// The view of removing `names`, with the pending pods placed first (the last one
    /// is kept); `None` when no pod is pending.
    fn view(&mut self, names: &BTreeSet<String>) -> Option<Rc<PendingView>> {
        if self.baseline.is_empty() {
            return None;
        }
        if let Some((key, view)) = &self.views
            && key == names
        {
            return Some(Rc::clone(view));
        }
        let view = Rc::new(pending_first(self.snapshot, self.region, names, &self.baseline));
        self.views = Some((names.clone(), Rc::clone(&view)));
        Some(view)
    }

    fn simulate(
        &mut self,
        removed: &[usize],
        pools: &[NodePool],
        max_new: usize,
        refuse_displacing: bool,
    ) -> Option<Result<Placement, Misfit>> {
        if self.simulations >= self.settings.max_simulations {
            return None;
        }
        self.simulations += 1;
        let names: BTreeSet<String> = removed.iter().map(|&i| self.candidates[i].name.clone()).collect();
        let view = self.view(&names);
        if refuse_displacing && let Some(m) = view.as_ref().and_then(|v| v.displaced.clone()) {
            return Some(Err(m));
        }
        let snapshot = view.as_ref().map_or(self.snapshot, |v| &v.snapshot);
        // No new node from a pool held back by launch backoff; with every pool held back,
        // none at all (an empty list would be the scheduler's default NodePool).
        let launchable: Vec<NodePool>;
        let (pools, max_new) = if self.held_back.is_empty() {
            (pools, max_new)
        } else {
            launchable = pools
                .iter()
                .filter(|p| !self.held_back.contains(p.name()))
                .cloned()
                .collect();
            if launchable.is_empty() {
                (pools, 0)
            } else {
                (launchable.as_slice(), max_new)
            }
        };
        let first = place(snapshot, self.region, pools, &names, max_new);
        let first = match first {
            // A consolidation keeps the zone balance its pools ask for.
            Ok(p) if refuse_displacing => match zone_balance::breaks(self.snapshot, &names, &p.new_nodes) {
                Some((nodepool, detail)) => return Some(Err(Misfit::ZoneBalance { nodepool, detail })),
                None => Ok(p),
            },
            other => other,
        };
        let Err(Misfit::TooManyNodes { requests, .. }) = &first else {
            return Some(first);
        };
        if max_new != 1 || self.simulations >= self.settings.max_simulations {
            return Some(first);
        }
        let Some(narrowed) = one_node::pools(snapshot, self.region, pools, requests) else {
            return Some(first);
        };
        self.simulations += 1;
        Some(match place(snapshot, self.region, &narrowed, &names, 1) {
            Ok(mut p) => match zone_balance::breaks(self.snapshot, &names, &p.new_nodes) {
                Some((nodepool, detail)) if refuse_displacing => Err(Misfit::ZoneBalance { nodepool, detail }),
                _ => {
                    p.one_node = true;
                    Ok(p)
                }
            },
            Err(_) => first,
        })
    }

    /// The candidates `method` may act on, cheapest to disrupt first, in pools whose
    /// budget for it allows at least one more node; the others are declined with the
    /// reason. A method removing several nodes takes them from the returned allowance.
    pub fn ordered(&mut self, method: Method, filter: impl Fn(&Candidate<'_>) -> bool) -> (Vec<usize>, Allowance) {
        let allowance = self.allowance(method.budget_reason());
        let mut order: Vec<usize> = (0..self.candidates.len())
            .filter(|&i| filter(&self.candidates[i]))
            .collect();
        order.sort_by(|&a, &b| {
            let (ca, cb) = (&self.candidates[a], &self.candidates[b]);
            ca.disruption_cost
                .total_cmp(&cb.disruption_cost)
                .then(cb.price.total_cmp(&ca.price))
                .then(ca.name.cmp(&cb.name))
        });
        let mut out = Vec::new();
        for i in order {
            if let Err(b) = self.eligible(i, method) {
                self.decline(i, b);
                continue;
            }
            let pool = self.candidates[i].pool_name.clone();
            if !allowance.allows(&pool) {
                self.decline(
                    i,
                    Blocked::new(
                        BlockKind::Budget,
                        format!(
                            "NodePool {pool}'s disruption budget for {} allows no more nodes now",
                            method.budget_reason().map_or("this", reason_name)
                        ),
                    ),
                );
                continue;
            }
            out.push(i);
        }
        (out, allowance)
    }

    /// Every NodePool, as the snapshot has it.
    pub fn pools(&self) -> &'a [NodePool] {
        &self.snapshot.nodepools
    }

    /// The command that replaces candidate `i` whatever it costs (repair, expiration,
    /// drift): its pods placed on the other nodes and as many new nodes as they need, after
    /// the pending pods (a pending pod it displaces does not stop it). `Some(Err)` when
    /// they fit nowhere (the reason, starting with `why`); `None` once the simulations are
    /// spent.
    pub fn replace(&mut self, i: usize, method: Method, why: &str) -> Option<Result<DisruptionCommand, Blocked>> {
        let pools = self.pools();
        Some(match self.simulate(&[i], pools, usize::MAX, false)? {
            Err(misfit) => Err(Blocked::new(BlockKind::NoFit, format!("{why}, but {misfit}"))),
            Ok(p) => {
                let c = &self.candidates[i];
                let new_cost: f64 = p.new_nodes.iter().map(|n| n.price_per_hour).sum();
                Ok(DisruptionCommand {
                    method,
                    nodes: vec![c.name.clone()],
                    replacements: p.new_nodes,
                    moves: p.moves,
                    removed_per_hour: c.price,
                    savings_per_hour: c.price - new_cost,
                })
            }
        })
    }
}

fn reason_name(r: DisruptionReason) -> &'static str {
    match r {
        DisruptionReason::Underutilized => "Underutilized",
        DisruptionReason::Empty => "Empty",
        DisruptionReason::Drifted => "Drifted",
        DisruptionReason::Unhealthy => "Unhealthy",
    }
}

/// Why a node still counts as starting: not Ready, or carrying a startup taint (its
/// NodePool's, or one of Carpool's own, such as the launch wave's). Karpenter considers only
/// initialized nodes.
fn starting(c: &Candidate<'_>, pool: &NodePool) -> Option<String> {
    if !c.ready.0 {
        return Some("the node is not Ready".into());
    }
    let taints = c.node.spec.as_ref().and_then(|s| s.taints.as_ref())?;
    taints
        .iter()
        .find(|t| {
            t.key != DISRUPTED_TAINT
                && (EPHEMERAL_TAINTS.contains(&t.key.as_str())
                    || pool
                        .spec
                        .template
                        .spec
                        .startup_taints
                        .iter()
                        .any(|s| s.key == t.key && s.effect == t.effect))
        })
        .map(|t| format!("the node still carries the startup taint {}", t.key))
}

/// Decides what to disrupt now.
pub fn decide(input: &DisruptionInput<'_>) -> DisruptionDecision {
    let mut ctx = Ctx::new(input);
    let mut command = None;
    for method in Method::ORDER {
        let found = match method {
            Method::StaticScaleDown => static_scale_down::find(&mut ctx),
            Method::Emptiness => emptiness::find(&mut ctx),
            Method::Repair => repair::find(&mut ctx),
            Method::Expiration => expiration::find(&mut ctx),
            Method::Drift => drift::find(&mut ctx),
            Method::MultiNode => multi_node::find(&mut ctx),
            Method::SingleNode => single_node::find(&mut ctx),
            Method::Split => split::find(&mut ctx),
            Method::SpotToSpot => spot::find_spot_to_spot(&mut ctx),
            Method::ReturnToSpot => spot::find_return_to_spot(&mut ctx),
        };
        if found.is_some() {
            command = found;
            break;
        }
    }
    let chosen: BTreeSet<&str> = command
        .as_ref()
        .map(|c: &DisruptionCommand| c.nodes.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let mut candidates: Vec<CandidateReport> = ctx
        .candidates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let blocked_by = if chosen.contains(c.name.as_str()) {
                None
            } else {
                c.blocked.clone().or_else(|| ctx.verdicts.get(&i).cloned())
            };
            CandidateReport {
                node: c.name.clone(),
                nodepool: c.pool_name.clone(),
                price_per_hour: c.price,
                disruptable: blocked_by.is_none(),
                blocked_by,
            }
        })
        .collect();
    candidates.sort_by(|a, b| a.node.cmp(&b.node));
    let pod_events = ctx
        .candidates
        .iter()
        .filter_map(|c| Some((c.name.clone(), c.pod_event_record.clone()?)))
        .collect();
    let hash_records = ctx
        .candidates
        .iter()
        .filter_map(|c| Some((c.name.clone(), drift::rebaseline(c, &ctx.snapshot.nodeclasses)?)))
        .collect();
    DisruptionDecision {
        command,
        candidates,
        simulations: ctx.simulations,
        pod_events,
        hash_records,
    }
}
