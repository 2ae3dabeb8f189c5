//! Time as records hold it.

use std::time::SystemTime;

/// Milliseconds since the Unix epoch: how records hold time.
pub type EpochMillis = i64;

/// Converts a time to [`EpochMillis`] (0 before the epoch).
pub fn epoch_millis(t: SystemTime) -> EpochMillis {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A time as the Kubernetes API holds it (`metav1.Time`); the epoch when out of range.
pub fn kube_time(t: SystemTime) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::try_from(t).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}
