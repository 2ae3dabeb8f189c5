//! SIG Autoscaling's `autoscaling.x-k8s.io/v1beta1` CapacityBuffer, whose CRD ships with
//! Karpenter (kubernetes-sigs/karpenter `pkg/apis/autoscaling/v1beta1/capacitybuffer.go`):
//! room kept for pods that do not exist yet, as "chunks" of a pod template.
//!
//! Carpool reads `podTemplateRef`, `replicas`, `limits` and `provisioningStrategy` as the
//! API defines them, and its own schedule annotations (a buffer whose size changes on a
//! cron schedule: [`BufferSchedule`]). How a buffer becomes pods to plan room for is
//! [`crate::decide::provisioning::buffers`].

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::manifest::{ManifestError, Validate};
use super::quantity::Quantity;

/// The API version Carpool reads.
pub const CAPACITY_BUFFER_API_VERSION: &str = "autoscaling.x-k8s.io/v1beta1";
/// The one provisioning strategy: the buffer's room is launched and kept.
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";
/// CapacityBuffer annotation, Carpool's own: a cron schedule (UTC, five fields, as a
/// NodePool budget's) at which the buffer takes [`SCHEDULE_REPLICAS_ANNOTATION`] chunks
/// for [`SCHEDULE_DURATION_ANNOTATION`].
pub const SCHEDULE_ANNOTATION: &str = "carpool.sh/buffer-schedule";
/// How long the scheduled size holds (a Go duration, e.g. `10h`).
pub const SCHEDULE_DURATION_ANNOTATION: &str = "carpool.sh/buffer-schedule-duration";
/// The buffer's chunks while the scheduled window is open.
pub const SCHEDULE_REPLICAS_ANNOTATION: &str = "carpool.sh/buffer-schedule-replicas";

/// A CapacityBuffer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBuffer {
    /// `autoscaling.x-k8s.io/v1beta1`.
    #[serde(default)]
    pub api_version: String,
    /// `CapacityBuffer`.
    #[serde(default)]
    pub kind: String,
    /// Name, namespace, annotations.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired buffer.
    #[serde(default)]
    pub spec: CapacityBufferSpec,
    /// Status as its controller writes it; kept, not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// A reference to an object in the buffer's namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LocalObjectRef {
    /// Its name.
    pub name: String,
}

/// `spec` of a CapacityBuffer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferSpec {
    /// The PodTemplate, in the buffer's namespace, of one chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A workload with a scale subresource whose pods are the chunks (read, not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<serde_json::Value>,
    /// The chunks wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The chunks as a share of the `scalableRef`'s replicas (read, not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<i32>,
    /// A cap on the chunks' total requests.
    #[serde(default)]
    pub limits: BTreeMap<String, Quantity>,
    /// How the buffer is used; only [`ACTIVE_CAPACITY`] (the default) is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}

/// A buffer's scheduled size: from each time `schedule` fires, for `duration`, the buffer
/// has `replicas` chunks.
#[derive(Clone, Debug)]
pub struct BufferSchedule {
    /// The cron schedule.
    pub schedule: croner::Cron,
    /// How long the size holds.
    pub duration: Duration,
    /// The chunks meanwhile.
    pub replicas: u32,
}

impl BufferSchedule {
    /// Whether the window is open at `now`: the schedule fired within `duration` before it.
    pub fn is_open(&self, now: SystemTime) -> bool {
        let utc = |t: SystemTime| {
            jiff::Timestamp::try_from(t)
                .ok()
                .map(|ts| ts.to_zoned(jiff::tz::TimeZone::UTC).datetime())
        };
        let (Some(from), Some(now)) = (
            utc(now.checked_sub(self.duration).unwrap_or(SystemTime::UNIX_EPOCH)),
            utc(now),
        ) else {
            return false;
        };
        self.schedule
            .find_next_occurrence(&from, false)
            .is_ok_and(|next| next <= now)
    }
}

impl CapacityBuffer {
    /// The name.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// Its scheduled size, when its annotations set one (all three together).
    pub fn schedule(&self) -> Result<Option<BufferSchedule>, ManifestError> {
        let get = |k: &str| self.metadata.annotations.as_ref().and_then(|a| a.get(k));
        let at = |k: &str| format!("metadata.annotations[{k}]");
        let (schedule, duration, replicas) = (
            get(SCHEDULE_ANNOTATION),
            get(SCHEDULE_DURATION_ANNOTATION),
            get(SCHEDULE_REPLICAS_ANNOTATION),
        );
        let (Some(schedule), Some(duration), Some(replicas)) = (schedule, duration, replicas) else {
            if schedule.or(duration).or(replicas).is_some() {
                return Err(ManifestError::at(
                    at(SCHEDULE_ANNOTATION),
                    format!(
                        "a scheduled size needs {SCHEDULE_ANNOTATION}, {SCHEDULE_DURATION_ANNOTATION} and {SCHEDULE_REPLICAS_ANNOTATION} together"
                    ),
                ));
            }
            return Ok(None);
        };
        let schedule =
            super::nodepool::parse_schedule(schedule).map_err(|m| ManifestError::at(at(SCHEDULE_ANNOTATION), m))?;
        let duration = super::duration::parse_go_duration(duration)
            .map_err(|m| ManifestError::at(at(SCHEDULE_DURATION_ANNOTATION), m))?;
        let replicas = replicas.trim().parse::<u32>().map_err(|_| {
            ManifestError::at(
                at(SCHEDULE_REPLICAS_ANNOTATION),
                format!("{replicas:?} is not a count of chunks; write e.g. \"20\""),
            )
        })?;
        Ok(Some(BufferSchedule {
            schedule,
            duration,
            replicas,
        }))
    }
}

impl Validate for CapacityBuffer {
    fn validate(&self) -> Result<(), ManifestError> {
        super::manifest::check_type_meta(
            &self.api_version,
            &self.kind,
            CAPACITY_BUFFER_API_VERSION,
            "CapacityBuffer",
            "",
        )?;
        if self.name().is_empty() {
            return Err(ManifestError::at("metadata.name", "a CapacityBuffer needs a name"));
        }
        if self.spec.replicas.is_some_and(|r| r < 0) {
            return Err(ManifestError::at("spec.replicas", "must not be negative"));
        }
        if self.spec.percentage.is_some_and(|p| p < 0) {
            return Err(ManifestError::at("spec.percentage", "must not be negative"));
        }
        for (name, q) in &self.spec.limits {
            if q.is_negative() {
                return Err(ManifestError::at(format!("spec.limits.{name}"), "must not be negative"));
            }
        }
        self.schedule()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::manifest::from_yaml;

    fn buffer(annotations: &str) -> Result<CapacityBuffer, ManifestError> {
        from_yaml(&format!(
            "apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {{name: burst, namespace: web, annotations: {annotations}}}
spec: {{podTemplateRef: {{name: web-chunk}}, replicas: 4}}
"
        ))
    }

    #[test]
    fn a_scheduled_size_is_open_from_each_firing_for_its_duration() {
        let b = buffer(
            "{carpool.sh/buffer-schedule: \"0 8 * * *\", carpool.sh/buffer-schedule-duration: 2h, carpool.sh/buffer-schedule-replicas: \"20\"}",
        )
        .unwrap();
        let s = b.schedule().unwrap().unwrap();
        assert_eq!(s.replicas, 20);
        let at = |t: &str| SystemTime::from(t.parse::<jiff::Timestamp>().unwrap());
        assert!(!s.is_open(at("2026-12-05T07:59:00Z")));
        assert!(s.is_open(at("2026-12-05T08:00:00Z")));
        assert!(s.is_open(at("2026-12-05T09:59:00Z")));
        assert!(!s.is_open(at("2026-12-05T10:01:00Z")));
    }

    #[test]
    fn a_partial_or_bad_schedule_names_the_annotation() {
        let err = buffer("{carpool.sh/buffer-schedule: \"0 8 * * *\"}").unwrap_err();
        assert_eq!(err.path, "metadata.annotations[carpool.sh/buffer-schedule]");
        let err = buffer(
            "{carpool.sh/buffer-schedule: \"0 8 * * *\", carpool.sh/buffer-schedule-duration: 2h, carpool.sh/buffer-schedule-replicas: lots}",
        )
        .unwrap_err();
        assert_eq!(err.path, "metadata.annotations[carpool.sh/buffer-schedule-replicas]");
    }
}
