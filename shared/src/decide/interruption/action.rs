//! What Carpool does with an event: the [`Action`], and why an event is ignored.
//!
//! The rules follow Karpenter's interruption parsers (`aws/karpenter-provider-aws`,
//! `pkg/controllers/interruption/messages/*/parser.go`): a state change counts only for
//! `stopping`, `stopped`, `shutting-down` and `terminated`, compared lower-cased; a Health
//! event only when `service` is `EC2` and `eventTypeCategory` is `scheduledChange`.
//! Unlike Karpenter, which deletes the node for each, Carpool tells apart the notices that
//! leave time to replace and drain ([`Action::Disrupt`]) from those that come after the
//! instance is gone ([`Action::Cleanup`]).

use std::fmt;

use serde::Serialize;

use super::event::{HealthDetail, InstanceStateName};

/// Why a node is disrupted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// A spot interruption warning: about two minutes' notice.
    SpotInterruption,
    /// An AWS Health scheduled change for the instance (maintenance, retirement).
    ScheduledChange,
    /// The instance is stopping or shutting down.
    StateChange(InstanceStateName),
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::SpotInterruption => f.write_str("spot interruption warning"),
            Cause::ScheduledChange => f.write_str("EC2 scheduled change"),
            Cause::StateChange(state) => write!(f, "instance {state}"),
        }
    }
}

/// What to do with an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum Action {
    /// Taint the node, launch its replacement, drain it by eviction.
    Disrupt {
        /// Why.
        cause: Cause,
    },
    /// A rebalance recommendation: replace, wait until Ready, drain, if the node's NodePool
    /// opted in (the run decides; off by default).
    Rebalance,
    /// The instance is stopped or terminated: delete its Node and records.
    Cleanup {
        /// The state it reached.
        state: InstanceStateName,
    },
    /// A scheduled tick: resume the drains in progress.
    Sweep,
    /// Acknowledged; nothing is done.
    Ignore {
        /// Why.
        reason: IgnoreReason,
    },
}

impl Action {
    /// A short word for the action: `disrupt`, `rebalance`, `cleanup`, `sweep` or `ignore`.
    pub fn word(&self) -> &'static str {
        match self {
            Action::Disrupt { .. } => "disrupt",
            Action::Rebalance => "rebalance",
            Action::Cleanup { .. } => "cleanup",
            Action::Sweep => "sweep",
            Action::Ignore { .. } => "ignore",
        }
    }

    /// The reason, when the event is ignored.
    pub fn ignored(&self) -> Option<&IgnoreReason> {
        match self {
            Action::Ignore { reason } => Some(reason),
            _ => None,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Disrupt { cause } => write!(f, "disrupt ({cause}): taint, replace, drain"),
            Action::Rebalance => f.write_str("rebalance: replace, then drain, if the NodePool opted in"),
            Action::Cleanup { state } => write!(f, "cleanup (instance {state}): delete the Node and its records"),
            Action::Sweep => f.write_str("sweep: resume the drains in progress"),
            Action::Ignore { reason } => write!(f, "ignore: {reason}"),
        }
    }
}

/// Why an event is acknowledged without action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IgnoreReason {
    /// Not a kind Carpool handles.
    NotHandled {
        /// The event's `source`.
        source: String,
        /// The event's `detail-type`.
        detail_type: String,
    },
    /// A state change to `pending` or `running`.
    UninterestingState(InstanceStateName),
    /// A state change to a state EC2 does not document.
    UnknownState {
        /// The state as sent.
        state: String,
    },
    /// A Health event that is not a scheduled change.
    HealthNotScheduledChange {
        /// Its `eventTypeCategory`.
        category: String,
    },
    /// A Health event for another service than EC2.
    HealthNotEc2 {
        /// Its `service`.
        service: String,
    },
    /// A Health event that names no instance.
    NoInstance,
    /// A spot interruption warning about an instance EC2 says is not spot: the event is
    /// not genuine (EC2 sends spot warnings about spot instances only), and no deadline is
    /// set from it ([`super::deadline`]).
    NotSpot {
        /// The instance the warning names.
        instance_id: String,
        /// What EC2 says it is.
        capacity_type: crate::model::CapacityType,
    },
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IgnoreReason::NotHandled { source, detail_type } => {
                write!(
                    f,
                    "not an event Carpool handles (source {source:?}, detail-type {detail_type:?})"
                )
            }
            IgnoreReason::UninterestingState(state) => {
                write!(
                    f,
                    "state {state} needs nothing (only stopping, stopped, shutting-down, terminated do)"
                )
            }
            IgnoreReason::UnknownState { state } => write!(f, "state {state:?} is not an EC2 instance state"),
            IgnoreReason::HealthNotScheduledChange { category } => {
                write!(f, "Health event of category {category:?}, not scheduledChange")
            }
            IgnoreReason::HealthNotEc2 { service } => write!(f, "Health event for service {service:?}, not EC2"),
            IgnoreReason::NoInstance => f.write_str("the event names no EC2 instance"),
            IgnoreReason::NotSpot {
                instance_id,
                capacity_type,
            } => write!(
                f,
                "a spot interruption warning about {instance_id}, which is not a spot instance (EC2 says {capacity_type}): not genuine, nothing done"
            ),
        }
    }
}

/// The action for a state change to `state` (already parsed; `None` when undocumented).
pub fn for_state_change(state: Option<InstanceStateName>, sent: &str) -> Action {
    match state {
        Some(s @ (InstanceStateName::Stopping | InstanceStateName::ShuttingDown)) => Action::Disrupt {
            cause: Cause::StateChange(s),
        },
        Some(s @ (InstanceStateName::Stopped | InstanceStateName::Terminated)) => Action::Cleanup { state: s },
        Some(s @ (InstanceStateName::Pending | InstanceStateName::Running)) => Action::Ignore {
            reason: IgnoreReason::UninterestingState(s),
        },
        None => Action::Ignore {
            reason: IgnoreReason::UnknownState { state: sent.to_owned() },
        },
    }
}

/// The action for a Health event naming `instances` instances.
pub fn for_health(detail: &HealthDetail, instances: usize) -> Action {
    if detail.service != "EC2" {
        return Action::Ignore {
            reason: IgnoreReason::HealthNotEc2 {
                service: detail.service.clone(),
            },
        };
    }
    if detail.event_type_category != "scheduledChange" {
        return Action::Ignore {
            reason: IgnoreReason::HealthNotScheduledChange {
                category: detail.event_type_category.clone(),
            },
        };
    }
    if instances == 0 {
        return Action::Ignore {
            reason: IgnoreReason::NoInstance,
        };
    }
    Action::Disrupt {
        cause: Cause::ScheduledChange,
    }
}
