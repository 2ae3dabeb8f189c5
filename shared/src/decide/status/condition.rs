//! Status conditions as Karpenter writes them (`github.com/awslabs/operatorpkg/status`
//! `Condition`: type, status, reason, message, lastTransitionTime, observedGeneration), with
//! a `Ready` condition that is true when every other one is (`NewReadyConditions`).

use std::time::SystemTime;

use serde_json::{Value, json};

use crate::model::time::kube_time;

/// The `Ready` condition's type.
pub const READY: &str = "Ready";

/// One condition wanted now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// Its type, e.g. `SubnetsReady`.
    pub kind: String,
    /// True or false.
    pub ok: bool,
    /// A CamelCase reason; a true condition's is its type, as operatorpkg's `SetTrue`.
    pub reason: String,
    /// What a user reads; empty for a true condition.
    pub message: String,
}

impl Condition {
    /// A true condition.
    pub fn ok(kind: &str) -> Self {
        Condition {
            kind: kind.to_string(),
            ok: true,
            reason: kind.to_string(),
            message: String::new(),
        }
    }

    /// A false condition with its reason and message.
    pub fn failed(kind: &str, reason: &str, message: impl Into<String>) -> Self {
        Condition {
            kind: kind.to_string(),
            ok: false,
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// The conditions `wanted`, then `Ready` (true when all of them are; else false with the
/// first false one's reason and message, as operatorpkg's root condition summarises its
/// dependents), as the status's `conditions` array. A condition whose status is the one
/// `previous` (the object's current `status.conditions`) has keeps its
/// `lastTransitionTime`; the others take `now`.
pub fn conditions(wanted: &[Condition], previous: Option<&Value>, generation: Option<i64>, now: SystemTime) -> Value {
    let ready = match wanted.iter().find(|c| !c.ok) {
        None => Condition::ok(READY),
        Some(first) => Condition::failed(READY, &first.reason, first.message.clone()),
    };
    let since = |c: &Condition| -> Value {
        let status = if c.ok { "True" } else { "False" };
        previous
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p["type"] == c.kind.as_str() && p["status"] == status)
            .and_then(|p| p.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| serde_json::to_value(kube_time(now)).unwrap_or_default())
    };
    Value::Array(
        wanted
            .iter()
            .chain(std::iter::once(&ready))
            .map(|c| {
                let mut v = json!({
                    "type": c.kind,
                    "status": if c.ok { "True" } else { "False" },
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": since(c),
                });
                if let Some(g) = generation {
                    v["observedGeneration"] = json!(g);
                }
                v
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ready_summarises_the_first_false_condition() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let c = conditions(
            &[
                Condition::ok("SubnetsReady"),
                Condition::failed("SecurityGroupsReady", "SecurityGroupsNotFound", "selects none"),
            ],
            None,
            Some(3),
            now,
        );
        assert_eq!(c[2]["type"], "Ready");
        assert_eq!(c[2]["status"], "False");
        assert_eq!(c[2]["reason"], "SecurityGroupsNotFound");
        assert_eq!(c[2]["observedGeneration"], 3);
    }

    #[test]
    fn an_unchanged_condition_keeps_its_transition_time() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let first = conditions(&[Condition::ok("SubnetsReady")], None, None, t0);
        let later = conditions(
            &[Condition::ok("SubnetsReady")],
            Some(&first),
            None,
            t0 + Duration::from_secs(600),
        );
        assert_eq!(first, later);
        let failed = conditions(
            &[Condition::failed("SubnetsReady", "SubnetsNotFound", "none")],
            Some(&first),
            None,
            t0 + Duration::from_secs(600),
        );
        assert_ne!(failed[0]["lastTransitionTime"], first[0]["lastTransitionTime"]);
    }
}
