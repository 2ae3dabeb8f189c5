//! The events Carpool consumes, as typed EventBridge `detail` objects, and their kinds.
//!
//! Each detail struct is read through [`aws_lambda_events::eventbridge::EventBridgeEvent`]
//! and is tolerant: fields it does not name are ignored, and the fields AWS may leave out
//! are `Option` or default to empty. The fields Carpool cannot act without (a state
//! change's `state`, a Health event's `service` and `eventTypeCategory`) are required, so
//! an event that lacks them is an error that names the field.

use serde::{Deserialize, Deserializer, Serialize};

/// What an event is, from its `source` and `detail-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// `aws.ec2` `EC2 Spot Instance Interruption Warning`: the two-minute notice.
    SpotInterruption,
    /// `aws.ec2` `EC2 Instance Rebalance Recommendation`: a spot instance at elevated risk.
    RebalanceRecommendation,
    /// `aws.ec2` `EC2 Instance State-change Notification`.
    StateChange,
    /// `aws.health` `AWS Health Event` (acted on when it is an EC2 scheduled change).
    ScheduledChange,
    /// `aws.events` `Scheduled Event`, or an EventBridge Scheduler input: a sweep tick.
    Scheduled,
    /// Any other event: acknowledged and ignored.
    Unknown,
}

/// `detail-type` of a spot interruption warning.
pub const SPOT_INTERRUPTION: &str = "EC2 Spot Instance Interruption Warning";
/// `detail-type` of a rebalance recommendation.
pub const REBALANCE_RECOMMENDATION: &str = "EC2 Instance Rebalance Recommendation";
/// `detail-type` of an instance state-change notification.
pub const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
/// `detail-type` of an AWS Health event.
pub const HEALTH_EVENT: &str = "AWS Health Event";
/// `detail-type` of a rule's scheduled event.
pub const SCHEDULED_EVENT: &str = "Scheduled Event";

impl EventKind {
    /// The kind of an event with this `source` and `detail-type`. Like Karpenter's
    /// `EventParser`, both must match; unlike it, `version` is not required (the state-change
    /// example in the AWS docs has none).
    pub fn of(source: &str, detail_type: &str) -> EventKind {
        match (source, detail_type) {
            ("aws.ec2", SPOT_INTERRUPTION) => EventKind::SpotInterruption,
            ("aws.ec2", REBALANCE_RECOMMENDATION) => EventKind::RebalanceRecommendation,
            ("aws.ec2", STATE_CHANGE) => EventKind::StateChange,
            ("aws.health", HEALTH_EVENT) => EventKind::ScheduledChange,
            ("aws.events", SCHEDULED_EVENT) => EventKind::Scheduled,
            _ => EventKind::Unknown,
        }
    }

    /// The snake_case name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::SpotInterruption => "spot_interruption",
            EventKind::RebalanceRecommendation => "rebalance_recommendation",
            EventKind::StateChange => "state_change",
            EventKind::ScheduledChange => "scheduled_change",
            EventKind::Scheduled => "scheduled",
            EventKind::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An EC2 instance state, as a state-change notification names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceStateName {
    /// `pending`
    Pending,
    /// `running`
    Running,
    /// `stopping`
    Stopping,
    /// `stopped`
    Stopped,
    /// `shutting-down`
    ShuttingDown,
    /// `terminated`
    Terminated,
}

impl InstanceStateName {
    /// Reads a state, case-insensitively (Karpenter lower-cases it before comparing);
    /// `None` for a state EC2 does not document.
    pub fn parse(state: &str) -> Option<InstanceStateName> {
        match state.to_ascii_lowercase().as_str() {
            "pending" => Some(InstanceStateName::Pending),
            "running" => Some(InstanceStateName::Running),
            "stopping" => Some(InstanceStateName::Stopping),
            "stopped" => Some(InstanceStateName::Stopped),
            "shutting-down" => Some(InstanceStateName::ShuttingDown),
            "terminated" => Some(InstanceStateName::Terminated),
            _ => None,
        }
    }

    /// The lower-case name EC2 uses.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceStateName::Pending => "pending",
            InstanceStateName::Running => "running",
            InstanceStateName::Stopping => "stopping",
            InstanceStateName::Stopped => "stopped",
            InstanceStateName::ShuttingDown => "shutting-down",
            InstanceStateName::Terminated => "terminated",
        }
    }
}

impl std::fmt::Display for InstanceStateName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for InstanceStateName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        InstanceStateName::parse(&text).ok_or_else(|| {
            serde::de::Error::unknown_variant(
                &text,
                &[
                    "pending",
                    "running",
                    "stopping",
                    "stopped",
                    "shutting-down",
                    "terminated",
                ],
            )
        })
    }
}

/// `detail` of `EC2 Spot Instance Interruption Warning`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SpotInterruptionDetail {
    /// The instance to be interrupted (also in `resources`).
    #[serde(default)]
    pub instance_id: Option<String>,
    /// `hibernate`, `stop` or `terminate`; any of them disrupts the node.
    #[serde(default)]
    pub instance_action: Option<String>,
}

/// `detail` of `EC2 Instance Rebalance Recommendation`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RebalanceDetail {
    /// The instance at elevated risk of interruption (also in `resources`).
    #[serde(default)]
    pub instance_id: Option<String>,
}

/// `detail` of `EC2 Instance State-change Notification`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StateChangeDetail {
    /// The instance (also in `resources`).
    #[serde(default)]
    pub instance_id: Option<String>,
    /// The new state, as sent. It is kept as text so that a state EC2 adds later is
    /// ignored with a reason rather than refused; [`InstanceStateName::parse`] reads it.
    pub state: String,
}

/// `detail` of `AWS Health Event` (the AWS Health EventBridge schema). Only the fields
/// Carpool reads or logs are named.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthDetail {
    /// The AWS service, e.g. `EC2`.
    pub service: String,
    /// `issue`, `accountNotification`, `investigation` or `scheduledChange`.
    pub event_type_category: String,
    /// e.g. `AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED`.
    #[serde(default)]
    pub event_type_code: Option<String>,
    /// The Health event's ARN.
    #[serde(default)]
    pub event_arn: Option<String>,
    /// The communication id (`...-<page>`), the docs' key for dropping duplicates.
    #[serde(default)]
    pub communication_id: Option<String>,
    /// `open`, `closed` or `upcoming`.
    #[serde(default)]
    pub status_code: Option<String>,
    /// When the change starts, in the RFC 1123 form the schema uses.
    #[serde(default)]
    pub start_time: Option<String>,
    /// When the change ends, in the RFC 1123 form.
    #[serde(default)]
    pub end_time: Option<String>,
    /// The resources affected: instance ids or instance ARNs for EC2.
    #[serde(default)]
    pub affected_entities: Vec<AffectedEntity>,
}

/// One of a Health event's `affectedEntities`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AffectedEntity {
    /// An instance id (older examples) or an instance ARN (current docs).
    #[serde(default)]
    pub entity_value: Option<String>,
    /// `IMPAIRED`, `UNIMPAIRED`, `PENDING`, `RESOLVED` or `UNKNOWN`.
    #[serde(default)]
    pub status: Option<String>,
}

/// The `Input` Carpool's EventBridge Scheduler schedule delivers (no envelope): the
/// schedule's context attributes. It asks for a sweep.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SchedulerInput {
    /// `<aws.scheduler.schedule-arn>`; its presence marks the input.
    pub schedule_arn: String,
    /// `<aws.scheduler.scheduled-time>`, ISO 8601.
    #[serde(default)]
    pub scheduled_time: Option<String>,
    /// `<aws.scheduler.execution-id>`, unique per invocation: the event id.
    #[serde(default)]
    pub execution_id: Option<String>,
    /// `<aws.scheduler.attempt-number>`.
    #[serde(default)]
    pub attempt_number: Option<String>,
}
