//! A disruption command: the value the consolidator carries out and `carpool disrupt`
//! prints.

use serde::{Deserialize, Serialize};

use crate::decide::provisioning::plan::PlannedNode;
use crate::model::DisruptionReason;

/// The method that found a command, in the order the methods are tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// A static NodePool (`spec.replicas`) has more nodes than it keeps: the surplus is
    /// deleted, empty nodes first (Karpenter's static deprovisioning).
    StaticScaleDown,
    /// Nodes with nothing but DaemonSet pods, past `consolidateAfter`, are deleted.
    Emptiness,
    /// A node not Ready for too long is replaced.
    Repair,
    /// A node past its NodePool's `expireAfter` is replaced.
    Expiration,
    /// A node launched from an older NodePool template, EC2NodeClass or AMI is replaced.
    Drift,
    /// Several nodes are removed, with at most one cheaper replacement.
    MultiNode,
    /// One node is deleted, or replaced by a cheaper one.
    SingleNode,
    /// One node is replaced by two that cost less in total.
    Split,
    /// A spot node is replaced by a cheaper spot node.
    SpotToSpot,
    /// An on-demand node goes back to spot.
    ReturnToSpot,
}

impl Method {
    /// Every method, in the order they are tried.
    pub const ORDER: [Method; 10] = [
        Method::StaticScaleDown,
        Method::Emptiness,
        Method::Repair,
        Method::Expiration,
        Method::Drift,
        Method::MultiNode,
        Method::SingleNode,
        Method::Split,
        Method::SpotToSpot,
        Method::ReturnToSpot,
    ];

    /// The `snake_case` name, as in JSON and the logs.
    pub fn name(self) -> &'static str {
        match self {
            Method::StaticScaleDown => "static_scale_down",
            Method::Emptiness => "emptiness",
            Method::Repair => "repair",
            Method::Expiration => "expiration",
            Method::Drift => "drift",
            Method::MultiNode => "multi_node",
            Method::SingleNode => "single_node",
            Method::Split => "split",
            Method::SpotToSpot => "spot_to_spot",
            Method::ReturnToSpot => "return_to_spot",
        }
    }

    /// The reason the NodePools' budgets name this method by; `None` for expiration, which
    /// Karpenter v1 does not budget (it is forceful there). Repair is budgeted as
    /// `Unhealthy`, as Karpenter v1.15's `Repair.Reason` has it
    /// (`pkg/controllers/disruption/repair.go`).
    pub fn budget_reason(self) -> Option<DisruptionReason> {
        match self {
            Method::Emptiness => Some(DisruptionReason::Empty),
            Method::Drift => Some(DisruptionReason::Drifted),
            Method::Repair => Some(DisruptionReason::Unhealthy),
            // Karpenter's static deprovisioning deletes NodeClaims outside the budgets.
            Method::Expiration | Method::StaticScaleDown => None,
            Method::MultiNode | Method::SingleNode | Method::Split | Method::SpotToSpot | Method::ReturnToSpot => {
                Some(DisruptionReason::Underutilized)
            }
        }
    }

    /// Whether the method consolidates (only nodes past `consolidateAfter`, and never at
    /// the cost of the room a pending pod has now).
    pub fn consolidates(self) -> bool {
        !matches!(
            self,
            Method::Repair | Method::Expiration | Method::Drift | Method::StaticScaleDown
        )
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a pod of a removed node is expected to go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// `namespace/name`.
    pub pod: String,
    /// An existing node's name, or `replacement-<index>` (an index into
    /// [`DisruptionCommand::replacements`]).
    pub to: String,
}

/// What to disrupt, with what, and what it saves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DisruptionCommand {
    /// The method that found it.
    pub method: Method,
    /// The nodes removed, by name.
    pub nodes: Vec<String>,
    /// The nodes launched first, as the provisioner plans them: every alternative fits
    /// their pods, and for a consolidation is cheaper than what it replaces and never the
    /// removed node's own type and capacity type.
    pub replacements: Vec<PlannedNode>,
    /// Where each moving pod is expected to go.
    pub moves: Vec<Move>,
    /// USD per hour of the nodes removed.
    pub removed_per_hour: f64,
    /// USD per hour saved: the nodes removed less the replacements (at their cheapest
    /// type). Negative for a repair, expiration or drift that costs more.
    pub savings_per_hour: f64,
}

/// The `to` of a move onto the replacement at `index`.
pub fn replacement_name(index: usize) -> String {
    format!("replacement-{index}")
}
