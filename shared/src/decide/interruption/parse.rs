//! One EventBridge event (or EventBridge Scheduler input) read into an [`InterruptionEvent`].
//!
//! The envelope is read as [`EventBridgeEvent<T>`] with `T` the kind's typed detail. Its
//! own requirements suit the samples: in aws_lambda_events 0.16 only `detail-type`,
//! `source` and `detail` are required, and `version`, which the EC2 state-change example
//! in the AWS docs leaves out, is optional. Carpool also requires `id`, its key for
//! de-duplication; those four are checked on the JSON first, so that a missing one is
//! named ([`EventError::NotAnEvent`]) rather than reported as a serde message.

use aws_lambda_events::eventbridge::EventBridgeEvent;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::action::{self, Action, Cause};
use super::error::{EventError, json_type};
use super::event::{
    EventKind, HealthDetail, InstanceStateName, RebalanceDetail, SchedulerInput, SpotInterruptionDetail,
    StateChangeDetail,
};
use super::instance_ids;
use crate::model::EpochMillis;

/// An event, read and decided: what it is, which instances it names, what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InterruptionEvent {
    /// The event's `id` (an EventBridge Scheduler input's `execution-id`): the key of its
    /// `EVENT#` idempotency record.
    pub id: String,
    /// What it is.
    pub kind: EventKind,
    /// The instances it names, in order, each once (empty for a sweep).
    pub instance_ids: Vec<String>,
    /// The state, for a state change to a documented state.
    pub state: Option<InstanceStateName>,
    /// The event's `time`, if it has one.
    pub time: Option<EpochMillis>,
    /// What to do.
    pub action: Action,
}

impl InterruptionEvent {
    /// The action in a word: `disrupt`, `rebalance`, `cleanup`, `sweep` or `ignore`.
    pub fn action_word(&self) -> &'static str {
        self.action.word()
    }
}

/// Reads one bare EventBridge event, or an EventBridge Scheduler input (an object with
/// `schedule-arn` and no `detail-type`).
///
/// A kind Carpool does not handle is `Ok`, with [`EventKind::Unknown`] and
/// [`Action::Ignore`]: it is acknowledged, not an error. An input that is not an event, or
/// the detail of a handled kind that does not have its shape, is an [`EventError`] that
/// names what is wrong. It never panics.
pub fn parse_event(json: &Value) -> Result<InterruptionEvent, EventError> {
    let Some(object) = json.as_object() else {
        return Err(EventError::NotAnObject { found: json_type(json) });
    };
    if !object.contains_key("detail-type") && object.contains_key("schedule-arn") {
        return scheduler_input(json);
    }
    for field in ["id", "detail-type", "source", "detail"] {
        if object.get(field).is_none_or(|v| v.is_null() || v.as_str() == Some("")) {
            return Err(EventError::NotAnEvent { missing: field });
        }
    }
    let source = object.get("source").and_then(Value::as_str).unwrap_or_default();
    let detail_type = object.get("detail-type").and_then(Value::as_str).unwrap_or_default();
    let kind = EventKind::of(source, detail_type);
    // serde would read a struct from a list too; a handled kind's detail is an object.
    let detail = object.get("detail").unwrap_or(&Value::Null);
    if kind != EventKind::Unknown && kind != EventKind::Scheduled && !detail.is_object() {
        return Err(EventError::BadDetail {
            detail_type: detail_type.to_owned(),
            path: "detail".to_owned(),
            message: format!("expected an object, found {}", json_type(detail)),
        });
    }
    match kind {
        EventKind::SpotInterruption => {
            let event: EventBridgeEvent<SpotInterruptionDetail> = typed(json)?;
            let ids = ec2_instances(&event, event.detail.instance_id.as_deref())?;
            finish(
                &event,
                EventKind::SpotInterruption,
                ids,
                None,
                Action::Disrupt {
                    cause: Cause::SpotInterruption,
                },
            )
        }
        EventKind::RebalanceRecommendation => {
            let event: EventBridgeEvent<RebalanceDetail> = typed(json)?;
            let ids = ec2_instances(&event, event.detail.instance_id.as_deref())?;
            finish(&event, EventKind::RebalanceRecommendation, ids, None, Action::Rebalance)
        }
        EventKind::StateChange => {
            let event: EventBridgeEvent<StateChangeDetail> = typed(json)?;
            let ids = ec2_instances(&event, event.detail.instance_id.as_deref())?;
            let state = InstanceStateName::parse(&event.detail.state);
            let action = action::for_state_change(state, &event.detail.state);
            finish(&event, EventKind::StateChange, ids, state, action)
        }
        EventKind::ScheduledChange => {
            let event: EventBridgeEvent<HealthDetail> = typed(json)?;
            // Karpenter reads only `affectedEntities` (scheduledchange/model.go,
            // EC2InstanceIDs); older examples name the instances in `resources` too.
            let entities = event
                .detail
                .affected_entities
                .iter()
                .filter_map(|e| e.entity_value.as_deref());
            let ids = instance_ids::collect(entities.chain(resources(&event)));
            let action = action::for_health(&event.detail, ids.len());
            finish(&event, EventKind::ScheduledChange, ids, None, action)
        }
        EventKind::Scheduled => {
            let event: EventBridgeEvent<Value> = typed(json)?;
            finish(&event, EventKind::Scheduled, Vec::new(), None, Action::Sweep)
        }
        EventKind::Unknown => {
            let event: EventBridgeEvent<Value> = typed(json)?;
            let ids = instance_ids::collect(resources(&event));
            let action = Action::Ignore {
                reason: action::IgnoreReason::NotHandled {
                    source: event.source.clone(),
                    detail_type: event.detail_type.clone(),
                },
            };
            finish(&event, EventKind::Unknown, ids, None, action)
        }
    }
}

/// Reads the event with its typed detail; an error in `detail` is the detail's.
fn typed<T: Serialize + DeserializeOwned>(json: &Value) -> Result<EventBridgeEvent<T>, EventError> {
    serde_path_to_error::deserialize(json).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        if path == "detail" || path.starts_with("detail.") || path.starts_with("detail[") {
            EventError::BadDetail {
                detail_type: json
                    .get("detail-type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                path,
                message,
            }
        } else {
            EventError::BadEnvelope { path, message }
        }
    })
}

fn resources<T: Serialize + DeserializeOwned>(event: &EventBridgeEvent<T>) -> impl Iterator<Item = &str> {
    event.resources.iter().flatten().map(String::as_str)
}

/// The instances of an EC2 event: `detail.instance-id`, then `resources`; at least one.
fn ec2_instances<T: Serialize + DeserializeOwned>(
    event: &EventBridgeEvent<T>,
    detail_id: Option<&str>,
) -> Result<Vec<String>, EventError> {
    let ids = instance_ids::collect(detail_id.into_iter().chain(resources(event)));
    if ids.is_empty() {
        return Err(EventError::NoInstanceId {
            detail_type: event.detail_type.clone(),
        });
    }
    Ok(ids)
}

fn finish<T: Serialize + DeserializeOwned>(
    event: &EventBridgeEvent<T>,
    kind: EventKind,
    instance_ids: Vec<String>,
    state: Option<InstanceStateName>,
    action: Action,
) -> Result<InterruptionEvent, EventError> {
    // `parse_event` checked that `id` is there; `typed` that it is a string.
    let id = event.id.clone().ok_or(EventError::NotAnEvent { missing: "id" })?;
    Ok(InterruptionEvent {
        id,
        kind,
        instance_ids,
        state,
        time: event.time.map(|t| t.timestamp_millis()),
        action,
    })
}

/// An EventBridge Scheduler input: a sweep, keyed by its execution id (or, without one,
/// by the schedule and its time).
fn scheduler_input(json: &Value) -> Result<InterruptionEvent, EventError> {
    let input: SchedulerInput = serde_path_to_error::deserialize(json).map_err(|e| EventError::BadDetail {
        detail_type: "EventBridge Scheduler input".to_owned(),
        path: e.path().to_string(),
        message: e.into_inner().to_string(),
    })?;
    let id = match (&input.execution_id, &input.scheduled_time) {
        (Some(id), _) if !id.is_empty() => id.clone(),
        (_, Some(time)) => format!("{}#{time}", input.schedule_arn),
        _ => {
            return Err(EventError::NotAnEvent {
                missing: "execution-id",
            });
        }
    };
    let time = input
        .scheduled_time
        .as_deref()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|t| t.as_millisecond());
    Ok(InterruptionEvent {
        id,
        kind: EventKind::Scheduled,
        instance_ids: Vec::new(),
        state: None,
        time,
        action: Action::Sweep,
    })
}
