//! Time as records hold it.

use std::time::SystemTime;

/// Milliseconds since the Unix epoch: how records hold time.
pub type EpochMillis = i64;

/// Converts a time to [`EpochMillis`] (0 before the epoch).
pub fn epoch_millis(t: SystemTime) -> EpochMillis {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `t` plus `d`, as [`EpochMillis`], saturating at the end of time: a NodePool's
/// `terminationGracePeriod` may be any number of hours (the CRD's pattern bounds none),
/// and `SystemTime + Duration` panics past `i64` seconds.
pub fn epoch_millis_after(t: SystemTime, d: std::time::Duration) -> EpochMillis {
    epoch_millis(t).saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A time as the Kubernetes API holds it (`metav1.Time`); the epoch when out of range.
pub fn kube_time(t: SystemTime) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::try_from(t).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Issue 41, item 10: a `terminationGracePeriod` of 5·10¹⁵ hours parses (it is under
    /// `Duration::MAX`), and `now + tgp` overflowed and panicked; it saturates.
    #[test]
    fn a_huge_termination_grace_period_saturates_instead_of_panicking() {
        let tgp = crate::model::duration::parse_go_duration("5000000000000000h").unwrap();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_790_000_000);
        assert!(now.checked_add(tgp).is_none(), "the case that panicked");
        assert_eq!(epoch_millis_after(now, tgp), i64::MAX);
        assert_eq!(epoch_millis_after(now, Duration::from_secs(60)), 1_790_000_060_000);
    }
}
