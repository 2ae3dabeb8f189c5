//! What the interruption function did with one event and one instance: logged as one JSON
//! line ("interruption event"), and turned into CloudWatch metrics.

use serde::Serialize;

use crate::decide::interruption::EventKind;

/// Where the handling of one instance ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing to do: the event is not one Carpool acts on, or the instance's actual state
    /// makes it stale.
    Ignored {
        /// Why.
        reason: String,
    },
    /// The event was handled before (its `EVENT#` record): nothing done twice.
    Duplicate,
    /// Dry run: what would have been done, and nothing done.
    DryRun {
        /// What would have been done.
        would: String,
    },
    /// The instance is not this deployment's: acknowledged, left alone.
    NotOwned {
        /// Why it is not.
        reason: String,
    },
    /// The instance has no Node (yet): nothing to drain. The provisioner's housekeeping
    /// follows its launch up.
    NoNode,
    /// Another invocation is advancing this disruption now.
    HeldElsewhere {
        /// The holder.
        holder: String,
    },
    /// Waiting for the replacement to be Ready before draining (a rebalance
    /// recommendation, a scheduled change); a later invocation goes on.
    WaitingForReplacement,
    /// The drain goes on in a later invocation (this one's time ran out, or pods are
    /// blocked and the deadline is not a hard one).
    Draining,
    /// Drained (or the hard deadline passed) and the instance terminated; waiting for it
    /// to be gone before deleting the Node.
    Terminating,
    /// The instance is gone: the Node and the records were deleted.
    CleanedUp,
}

impl Outcome {
    /// Whether the handling is over for this instance.
    pub fn is_final(&self) -> bool {
        !matches!(
            self,
            Outcome::WaitingForReplacement | Outcome::Draining | Outcome::Terminating | Outcome::HeldElsewhere { .. }
        )
    }
}

/// One instance's handling, for the summary line and the metrics.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventReport {
    /// The event (empty for a sweep that resumed a drain).
    pub event_id: String,
    /// Its kind.
    pub kind: EventKind,
    /// What the event asked for, in a word (`disrupt`, `rebalance`, `cleanup`, `sweep`,
    /// `ignore`).
    pub action: String,
    /// The instance.
    pub instance_id: Option<String>,
    /// Its Node.
    pub node: Option<String>,
    /// Where it ended.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The replacements' launch ids.
    pub replacements: Vec<String>,
    /// The replacements' instances, `id (type, zone, capacity type)`.
    pub replacement_instances: Vec<String>,
    /// Pods no replacement could be planned for, with the reason.
    pub replacement_unschedulable: Vec<String>,
    /// Pods evicted by this invocation.
    pub evicted: usize,
    /// Pods whose eviction was refused at the end of this invocation's drain, with why
    /// (the PDB and the disruptions it allowed).
    pub blocked: Vec<String>,
    /// Whether the drain finished (every pod to evict was evicted).
    pub drained: bool,
    /// Milliseconds from the event's time to the taint, when this invocation tainted.
    pub event_to_taint_ms: Option<u64>,
    /// Milliseconds from the event's time to the replacement's CreateFleet answer.
    pub event_to_replacement_ms: Option<u64>,
    /// Milliseconds from the event's time to the end of the drain (every eviction
    /// accepted).
    pub event_to_drained_ms: Option<u64>,
    /// Milliseconds from the event's time to the node's being empty (its pods gone and
    /// its volumes detached), when it was; the instance is terminated then.
    pub event_to_empty_ms: Option<u64>,
    /// What the node still waited for at the end of this invocation: pods terminating
    /// (`namespace/name`) and volumes attached (`pv/<name>`).
    pub waiting_for: Vec<String>,
    /// Seconds this invocation spent draining.
    pub drain_seconds: f64,
    /// Milliseconds this invocation spent on the instance.
    pub elapsed_ms: u64,
}

impl EventReport {
    /// A report with nothing done yet.
    pub fn new(event_id: &str, kind: EventKind, action: &str, instance_id: Option<&str>, outcome: Outcome) -> Self {
        EventReport {
            event_id: event_id.to_string(),
            kind,
            action: action.to_string(),
            instance_id: instance_id.map(str::to_string),
            node: None,
            outcome,
            replacements: Vec::new(),
            replacement_instances: Vec::new(),
            replacement_unschedulable: Vec::new(),
            evicted: 0,
            blocked: Vec::new(),
            drained: false,
            event_to_taint_ms: None,
            event_to_replacement_ms: None,
            event_to_drained_ms: None,
            event_to_empty_ms: None,
            waiting_for: Vec::new(),
            drain_seconds: 0.0,
            elapsed_ms: 0,
        }
    }

    /// Logs the one summary line of the event.
    pub fn log(&self) {
        let summary = serde_json::to_string(self).unwrap_or_default();
        let outcome = serde_json::to_value(&self.outcome)
            .ok()
            .and_then(|v| v.get("outcome").and_then(|o| o.as_str()).map(str::to_string))
            .unwrap_or_default();
        tracing::info!(
            event_id = %self.event_id,
            kind = self.kind.as_str(),
            action = %self.action,
            instance_id = self.instance_id.as_deref().unwrap_or(""),
            node = self.node.as_deref().unwrap_or(""),
            outcome = %outcome,
            replacement = %self.replacement_instances.join(","),
            evicted = self.evicted,
            blocked = self.blocked.len(),
            drained = self.drained,
            elapsed_ms = self.elapsed_ms,
            report = %summary,
            "interruption event"
        );
    }
}
