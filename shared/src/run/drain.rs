//! The drain of a node by eviction, over the Cluster port: ordered, bounded by a
//! deadline, and explained. The interruption function and the consolidator drain
//! through it.
//!
//! - [`drain_pass`] is one pass: list the node's pods, order them
//!   ([`crate::decide::disruption::drain`]), evict every pod of the current tier, and say what was
//!   evicted, what was blocked and why (the PDBs that cover the pod, with the disruptions
//!   they allow), what stays, and whether the node is drained.
//! - [`drain`] runs passes until the node is drained or the deadline comes, waiting
//!   between passes that were blocked. [`drain_with`] does the same, resuming from the
//!   pods a previous run evicted and calling back after each pass, so a caller can keep
//!   its progress (the interruption function's `DISRUPT#` record) and resume after a
//!   crash or in its next invocation.
//!
//! **Drained** means that the apiserver has accepted the eviction of every pod to evict:
//! each is gone, or terminating within its grace period. A pass also says what the node
//! still waits for ([`DrainPass::waiting`]: the pods terminating, and in a voluntary drain
//! the `do-not-disrupt` ones), and [`DrainPass::is_empty`] once there is nothing, as
//! Karpenter's `Terminator.Drain` waits (`podutil.IsWaitingEviction`). [`drain`] and
//! [`drain_with`] stop at drained; the disruption state machine
//! ([`crate::run::disruption::advance`]) keeps passing until the node is empty and its
//! volumes detached, up to the node's termination time, before the instance goes.
//!
//! Surge: when a PDB refuses the eviction of a pod whose workload opted in
//! ([`crate::decide::disruption::surge`]), the pass restarts the pod's Deployment so that
//! a replacement comes up first ([`crate::run::surge`]); the block says so
//! ([`BlockedEviction::surge`]) and the next passes evict the pod once the PDB allows it.
//!
//! Retries: a PDB's refusal (`Eviction::Blocked`), the apiserver's throttling
//! (`ClusterError::Throttled`, a 429 that is not a PDB's) and a conflict on one pod
//! leave that pod blocked, to be tried again by the next pass; the drain goes on. After
//! a pass with blocked pods the drain waits, from [`DrainSettings::retry_initial`]
//! doubling up to [`DrainSettings::retry_max`] while no pass makes progress, back to the
//! initial wait after a pass that evicted a pod; a wait never ends past the deadline. A
//! pass that is not blocked (it evicted a whole tier) is followed at once by the next.

use std::fmt;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::{Deserialize, Serialize};

use crate::decide::disruption::drain::{DrainPod, DrainRules, StayReason, Staying, drain_order};
use crate::decide::disruption::pdb::{PdbBudget, covering};
use crate::decide::disruption::surge::opted_in;
use crate::error_chain::Chain;
use crate::model::pod::Pod;
use crate::ports::{Cluster, ClusterError, Eviction, PodRef, Timer};
use crate::run::surge::{SurgeOutcome, surge_before_eviction};

/// The first wait after a blocked pass.
pub const DEFAULT_RETRY_INITIAL: Duration = Duration::from_secs(1);
/// The longest wait between passes.
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(10);

/// How long a drain may take and how it waits between passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainSettings {
    /// When the drain gives up (for a spot interruption, before the 2-minute notice
    /// ends).
    pub deadline: SystemTime,
    /// The first wait after a blocked pass.
    pub retry_initial: Duration,
    /// The longest wait between passes.
    pub retry_max: Duration,
    /// What the drain respects beyond PDBs.
    pub rules: DrainRules,
}

impl DrainSettings {
    /// A drain that ends by `deadline`, waiting [`DEFAULT_RETRY_INITIAL`] up to
    /// [`DEFAULT_RETRY_MAX`] between blocked passes.
    pub fn until(deadline: SystemTime) -> Self {
        DrainSettings {
            deadline,
            retry_initial: DEFAULT_RETRY_INITIAL,
            retry_max: DEFAULT_RETRY_MAX,
            rules: DrainRules::default(),
        }
    }
}

/// Why a pod's eviction did not happen in a pass; each is retried by the next pass.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlockReason {
    /// A PodDisruptionBudget did not allow it; the apiserver's message.
    Budget {
        /// What the apiserver said.
        message: String,
    },
    /// The apiserver throttled the call (a 429 not caused by a PDB).
    Throttled {
        /// The error, with its sources.
        error: String,
    },
    /// The pod changed under the eviction (a 409).
    Conflict {
        /// The error, with its sources.
        error: String,
    },
}

impl fmt::Display for BlockReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlockReason::Budget { message } => f.write_str(message),
            BlockReason::Throttled { error } | BlockReason::Conflict { error } => f.write_str(error),
        }
    }
}

/// A pod whose eviction did not happen, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedEviction {
    /// The pod.
    pub pod: DrainPod,
    /// What the apiserver answered.
    pub reason: BlockReason,
    /// The PDBs that cover the pod, with their status when the pass read it (empty for a
    /// pod no PDB covers, or when the PDBs could not be read).
    pub pdbs: Vec<PdbBudget>,
    /// What the pass did about it, the pod's workload having opted in to a surge before
    /// eviction ([`crate::run::surge`]); `None` for a pod that did not, or a block other
    /// than a PDB's.
    #[serde(default)]
    pub surge: Option<SurgeOutcome>,
}

impl BlockedEviction {
    /// The covering PDBs' `namespace/name`, joined by commas.
    pub fn pdb_names(&self) -> String {
        self.pdbs.iter().map(PdbBudget::key).collect::<Vec<_>>().join(",")
    }

    /// The fewest disruptions any covering PDB allows, when one's status is known.
    pub fn disruptions_allowed(&self) -> Option<i32> {
        self.pdbs.iter().filter_map(PdbBudget::disruptions_allowed).min()
    }
}

impl fmt::Display for BlockedEviction {
    /// `shop/web-0: Cannot evict pod ... (PDB shop/web allows 0 disruption(s): ...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.pod.pod.key(), self.reason)?;
        if !self.pdbs.is_empty() {
            let pdbs: Vec<String> = self.pdbs.iter().map(ToString::to_string).collect();
            write!(f, " ({})", pdbs.join("; "))?;
        }
        if let Some(surge) = &self.surge {
            write!(f, " [{surge}]")?;
        }
        Ok(())
    }
}

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainPass {
    /// The pods whose eviction the apiserver accepted, in the order evicted.
    pub evicted: Vec<DrainPod>,
    /// The pods that were gone when evicted.
    pub gone: Vec<PodRef>,
    /// The pods of the tier whose eviction did not happen.
    pub blocked: Vec<BlockedEviction>,
    /// The pods that stay on the node, and why (terminating pods among them).
    pub stay: Vec<Staying>,
    /// How many pods are still to evict after the pass (the blocked ones, and the later
    /// tiers).
    pub left: usize,
    /// Whether no pod is left to evict.
    pub drained: bool,
    /// The pods the node still waits for (terminating within their grace period, or
    /// `do-not-disrupt` in a voluntary drain): [`crate::decide::disruption::drain::DrainOrder::waiting`].
    pub waiting: Vec<PodRef>,
}

impl DrainPass {
    /// Whether the node can go: nothing left to evict and no pod to wait for.
    pub fn is_empty(&self) -> bool {
        self.drained && self.waiting.is_empty()
    }
}

/// What a drain did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainReport {
    /// Whether the node is drained (see the module's documentation).
    pub drained: bool,
    /// The pods this call evicted (not those evicted before it resumed), in order.
    pub evicted: Vec<PodRef>,
    /// The pods that were gone when evicted.
    pub gone: Vec<PodRef>,
    /// The pods still blocked at the last pass, and why: who held the drain.
    pub blocked: Vec<BlockedEviction>,
    /// The pods that stay on the node at the last pass, and why.
    pub stayed: Vec<Staying>,
    /// The passes made.
    pub passes: u32,
    /// The time the drain took, by the clock it was given.
    pub elapsed: Duration,
}

impl DrainReport {
    /// The pods still on the node, terminating, at the last pass.
    pub fn terminating(&self) -> impl Iterator<Item = &PodRef> {
        self.stayed
            .iter()
            .filter(|s| matches!(s.reason, StayReason::Terminating | StayReason::AlreadyEvicted))
            .map(|s| &s.pod)
    }
}

/// A drain that could not go on.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// The node's pods could not be listed.
    #[error("listing the pods of node {node}")]
    ListPods {
        /// The node.
        node: String,
        /// The Cluster's error.
        #[source]
        source: ClusterError,
    },
    /// An eviction failed otherwise than by a PDB, throttling or a conflict.
    #[error("evicting pod {pod}")]
    Evict {
        /// The pod, `namespace/name`.
        pod: String,
        /// The Cluster's error.
        #[source]
        source: ClusterError,
    },
}

impl DrainError {
    /// Whether trying again later may succeed (the apiserver throttled the call or saw a
    /// conflict).
    pub fn is_retryable(&self) -> bool {
        let (DrainError::ListPods { source, .. } | DrainError::Evict { source, .. }) = self;
        matches!(source, ClusterError::Throttled { .. } | ClusterError::Conflict(_))
    }
}

/// One pass over `node` at `now`: evicts every pod of the current tier (see
/// [`crate::decide::disruption::drain`]) but those in `evicted_before` (accepted by earlier passes),
/// and explains each blocked one. Logs `eviction blocked` (warn) for each, with fields
/// `node`, `pod`, `pdb`, `disruptions_allowed` and `reason`.
///
/// The PDBs are read only when an eviction is refused; when they cannot be read, the
/// block is reported without them (and the failure logged).
pub async fn drain_pass<K: Cluster>(
    cluster: &K,
    node: &str,
    now: SystemTime,
    deadline: SystemTime,
    evicted_before: &[PodRef],
    rules: DrainRules,
) -> Result<DrainPass, DrainError> {
    let pods = cluster
        .pods_on_node(node)
        .await
        .map_err(|source| DrainError::ListPods {
            node: node.to_string(),
            source,
        })?;
    let order = drain_order(&pods, evicted_before, now, deadline, rules);
    let mut pass = DrainPass {
        stay: order.stay.clone(),
        waiting: order.waiting.clone(),
        ..DrainPass::default()
    };
    let mut pdbs: Option<Vec<PodDisruptionBudget>> = None;
    for pod in order.current() {
        let reason = match cluster.evict(&pod.pod).await {
            Ok(Eviction::Evicted) => {
                tracing::info!(node, pod = %pod.pod.key(), grace_s = pod.grace.as_secs(), fits = pod.fits, "pod evicted");
                pass.evicted.push(pod.clone());
                // Accepted: the pod now shuts down, and the node waits for it.
                pass.waiting.push(pod.pod.clone());
                continue;
            }
            Ok(Eviction::Gone) | Err(ClusterError::NotFound { .. }) => {
                pass.gone.push(pod.pod.clone());
                continue;
            }
            Ok(Eviction::Blocked { reason }) => BlockReason::Budget { message: reason },
            Err(e @ ClusterError::Throttled { .. }) => BlockReason::Throttled {
                error: Chain(&e).to_string(),
            },
            Err(e @ ClusterError::Conflict(_)) => BlockReason::Conflict {
                error: Chain(&e).to_string(),
            },
            Err(source) => {
                return Err(DrainError::Evict {
                    pod: pod.pod.key(),
                    source,
                });
            }
        };
        let (budgets, surge) = match &reason {
            BlockReason::Budget { .. } => {
                let listed = match pdbs.take() {
                    Some(listed) => listed,
                    None => read_pdbs(cluster, node).await,
                };
                let object = pods.iter().find(|p| PodRef::of(p) == pod.pod);
                let budgets = object.map_or_else(Vec::new, |p: &Pod| covering(p, &listed));
                pdbs = Some(listed);
                let surge = match object {
                    Some(p) if opted_in(p, rules.surge_pool) => {
                        Some(surge_before_eviction(cluster, node, p, rules.surge_pool, now).await)
                    }
                    _ => None,
                };
                (budgets, surge)
            }
            BlockReason::Throttled { .. } | BlockReason::Conflict { .. } => (Vec::new(), None),
        };
        let blocked = BlockedEviction {
            pod: pod.clone(),
            reason,
            pdbs: budgets,
            surge,
        };
        tracing::warn!(
            node,
            pod = %blocked.pod.pod.key(),
            pdb = %blocked.pdb_names(),
            disruptions_allowed = blocked.disruptions_allowed(),
            reason = %blocked.reason,
            surge = blocked.surge.as_ref().map(tracing::field::display),
            "eviction blocked"
        );
        pass.blocked.push(blocked);
    }
    pass.left = order.to_evict().saturating_sub(pass.evicted.len() + pass.gone.len());
    pass.drained = pass.left == 0;
    Ok(pass)
}

/// The PDBs, or none when they cannot be read (logged): they only explain a block.
async fn read_pdbs<K: Cluster>(cluster: &K, node: &str) -> Vec<PodDisruptionBudget> {
    cluster.pdbs().await.unwrap_or_else(|e| {
        tracing::warn!(node, error = %Chain(&e), "could not read the PDBs that explain a blocked eviction");
        Vec::new()
    })
}

/// Drains `node`: passes until it is drained or `settings.deadline` comes (see the
/// module's documentation). Same as [`drain_with`] with nothing evicted before and no
/// callback.
pub async fn drain<K: Cluster, T: Timer>(
    cluster: &K,
    clock: &T,
    node: &str,
    settings: &DrainSettings,
) -> Result<DrainReport, DrainError> {
    drain_with(cluster, clock, node, settings, &[], |_| ()).await
}

/// Drains `node` as [`drain`] does, resuming a drain that had the evictions of
/// `evicted_before` accepted (they are not evicted again), and calling `on_pass` after
/// each pass, before waiting, so the caller can record its progress.
///
/// At least one pass is made, even past the deadline. When the deadline comes first, the
/// report says `drained: false` and names the blocked pods, also logged in one line
/// (`drain deadline reached`, field `blocked`). A pass that fails with a retryable error
/// ([`DrainError::is_retryable`]) is retried like a blocked pass until the deadline,
/// which returns that error; any other error ends the drain.
pub async fn drain_with<K, T, F>(
    cluster: &K,
    clock: &T,
    node: &str,
    settings: &DrainSettings,
    evicted_before: &[PodRef],
    mut on_pass: F,
) -> Result<DrainReport, DrainError>
where
    K: Cluster,
    T: Timer,
    F: FnMut(&DrainPass),
{
    let start = clock.now();
    let deadline = settings.deadline;
    let mut evicted: Vec<PodRef> = evicted_before.to_vec();
    let mut report = DrainReport::default();
    let mut wait = settings.retry_initial;
    loop {
        report.passes += 1;
        let (progressed, blocked) =
            match drain_pass(cluster, node, clock.now(), deadline, &evicted, settings.rules).await {
                Ok(pass) => {
                    on_pass(&pass);
                    let progressed = !pass.evicted.is_empty() || !pass.gone.is_empty();
                    let blocked = !pass.blocked.is_empty();
                    evicted.extend(pass.evicted.iter().map(|p| p.pod.clone()));
                    report.evicted.extend(pass.evicted.into_iter().map(|p| p.pod));
                    report.gone.extend(pass.gone);
                    report.blocked = pass.blocked;
                    report.stayed = pass.stay;
                    if pass.drained {
                        report.drained = true;
                        break;
                    }
                    (progressed, blocked)
                }
                Err(e) if e.is_retryable() && clock.now() < deadline => {
                    tracing::warn!(node, error = %Chain(&e), "drain pass failed; retrying");
                    (false, true)
                }
                Err(e) => return Err(e),
            };
        let now = clock.now();
        let Ok(left) = deadline.duration_since(now) else { break };
        if left.is_zero() {
            break;
        }
        if blocked {
            if progressed {
                wait = settings.retry_initial;
            }
            clock.sleep(wait.min(left)).await;
            wait = wait
                .saturating_mul(2)
                .min(settings.retry_max)
                .max(settings.retry_initial);
        }
    }
    report.elapsed = clock.now().duration_since(start).unwrap_or(Duration::ZERO);
    if !report.drained {
        let blocked: Vec<String> = report.blocked.iter().map(ToString::to_string).collect();
        tracing::warn!(node, blocked = ?blocked, passes = report.passes, "drain deadline reached");
    }
    Ok(report)
}
