//! A Kubernetes Event about a pod: what `kubectl describe pod` shows under Events, and
//! what [`crate::ports::Cluster::publish_event`] publishes.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The longest message the Events API takes (`note`, at most 1 kB); longer messages are
/// cut at a character boundary, with `…` at the end.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// An Event's type, as `kubectl describe` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    /// Something happened as it should.
    Normal,
    /// Something keeps the pod from running.
    Warning,
}

impl EventType {
    /// `Normal` or `Warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Why Carpool tells a pod something: the Event's `reason`, the names Karpenter uses where
/// it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventReason {
    /// The pod was planned onto a node Carpool launched; the message names the instance,
    /// its type, zone and capacity type (Karpenter's `Nominated`).
    Nominated,
    /// No node can take the pod; the message says why (Karpenter's `FailedScheduling`).
    FailedScheduling,
    /// The launch of the pod's node failed (or was not tried, being backed off); the
    /// message has the error.
    LaunchFailed,
    /// A drain started a rollout of the pod's Deployment before evicting it, so that a new
    /// pod comes up on other capacity first ([`crate::decide::disruption::surge`]).
    SurgeBeforeEviction,
}

impl EventReason {
    /// The reason as the Event carries it (`Nominated`, `FailedScheduling`, `LaunchFailed`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::Nominated => "Nominated",
            EventReason::FailedScheduling => "FailedScheduling",
            EventReason::LaunchFailed => "LaunchFailed",
            EventReason::SurgeBeforeEviction => "SurgeBeforeEviction",
        }
    }

    /// The Event's type: `Normal` for a nomination and a surge, `Warning` otherwise.
    pub fn event_type(self) -> EventType {
        match self {
            EventReason::Nominated | EventReason::SurgeBeforeEviction => EventType::Normal,
            EventReason::FailedScheduling | EventReason::LaunchFailed => EventType::Warning,
        }
    }

    /// The Events API's `action`: what Carpool was doing (`Provision`, `Launch`, `Disrupt`).
    pub fn action(self) -> &'static str {
        match self {
            EventReason::Nominated | EventReason::FailedScheduling => "Provision",
            EventReason::LaunchFailed => "Launch",
            EventReason::SurgeBeforeEviction => "Disrupt",
        }
    }
}

impl fmt::Display for EventReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pod an Event is about: the Event's `regarding` (core/v1: `involvedObject`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PodRef {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The pod's uid, when the pod object has one. `kubectl describe pod` selects Events
    /// by it, so an Event without it does not show there.
    pub uid: Option<String>,
}

impl PodRef {
    /// The pod's reference (namespace `default` when unset, as the apiserver defaults it).
    pub fn of(pod: &crate::model::pod::Pod) -> Self {
        PodRef {
            namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone(),
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// An Event about a pod.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PodEvent {
    /// The pod.
    pub pod: PodRef,
    /// Why; the type follows from it ([`EventReason::event_type`]).
    pub reason: EventReason,
    /// What `kubectl describe pod` shows as the message, at most [`MAX_MESSAGE_BYTES`].
    pub message: String,
}

impl PodEvent {
    /// An Event about `pod`, its message cut to [`MAX_MESSAGE_BYTES`].
    pub fn new(pod: PodRef, reason: EventReason, message: impl Into<String>) -> Self {
        PodEvent {
            pod,
            reason,
            message: truncate(message.into()),
        }
    }

    /// The Event's type.
    pub fn event_type(&self) -> EventType {
        self.reason.event_type()
    }
}

/// `message` cut to [`MAX_MESSAGE_BYTES`] at a character boundary, ending in `…` when cut.
fn truncate(mut message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let ellipsis = '…';
    let mut end = MAX_MESSAGE_BYTES - ellipsis.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push(ellipsis);
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> PodRef {
        PodRef {
            namespace: "web".into(),
            name: "web-0".into(),
            uid: Some("u".into()),
        }
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let e = PodEvent::new(pod(), EventReason::FailedScheduling, "é".repeat(2000));
        assert!(e.message.len() <= MAX_MESSAGE_BYTES, "{}", e.message.len());
        assert!(e.message.ends_with('…'));
        let short = PodEvent::new(pod(), EventReason::Nominated, "fits");
        assert_eq!(short.message, "fits");
    }

    #[test]
    fn a_nomination_is_normal_and_failures_are_warnings() {
        assert_eq!(EventReason::Nominated.event_type(), EventType::Normal);
        assert_eq!(EventReason::FailedScheduling.event_type(), EventType::Warning);
        assert_eq!(EventReason::LaunchFailed.event_type().as_str(), "Warning");
        assert_eq!(pod().key(), "web/web-0");
    }
}
