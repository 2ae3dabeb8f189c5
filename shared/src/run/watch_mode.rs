//! How long a run watches: the whole window every minute, or only while there is
//! something to do.
//!
//! The schedule starts a run every minute, and a run that watches its whole window bills
//! about 50 s of the function's memory every minute, pods or not. In the adaptive mode a
//! run that finds nothing pending, in a cluster where nothing was launched for a while,
//! checks once (housekeeping and one poll) and exits: an idle cluster costs cents a
//! month. The first pod of a burst then waits for the next scheduled run (up to a
//! minute); from then on runs watch as in the continuous mode, and the pods after it get
//! second-level reactions.

use std::time::{Duration, SystemTime};

use crate::ports::{LaunchRecord, epoch_millis};

/// How a run watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchMode {
    /// Every run watches its whole window.
    Continuous,
    /// A run exits after one check when nothing is pending and nothing was launched
    /// within `quiet_after`.
    Adaptive {
        /// How long without a launch makes the cluster quiet.
        quiet_after: Duration,
    },
}

/// The default of [`WatchMode::Adaptive`]'s `quiet_after`: 10 minutes.
pub const QUIET_AFTER: Duration = Duration::from_secs(600);

/// A watch mode that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a watch mode: use continuous or adaptive")]
pub struct UnknownWatchMode(pub String);

impl WatchMode {
    /// `continuous` or `adaptive` (any case), the latter quiet after `quiet_after`.
    pub fn parse(text: &str, quiet_after: Duration) -> Result<Self, UnknownWatchMode> {
        match text.trim().to_ascii_lowercase().as_str() {
            "continuous" => Ok(WatchMode::Continuous),
            "adaptive" => Ok(WatchMode::Adaptive { quiet_after }),
            _ => Err(UnknownWatchMode(text.to_string())),
        }
    }

    /// Whether a run may exit after its first check: nothing `pending` to launch for, and
    /// none of `launches` made within the quiet period before `now` (a launch still
    /// waiting for its node or its wave release is recent by then).
    pub fn may_exit_early(&self, pending: usize, launches: &[LaunchRecord], now: SystemTime) -> bool {
        let WatchMode::Adaptive { quiet_after } = self else {
            return false;
        };
        let since = epoch_millis(now) - i64::try_from(quiet_after.as_millis()).unwrap_or(i64::MAX);
        pending == 0 && launches.iter().all(|l| l.launched_at < since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CapacityType;

    const NOW_S: u64 = 1_790_000_000;

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(NOW_S)
    }

    fn launched(minutes_ago: u64) -> LaunchRecord {
        let at = (NOW_S - minutes_ago * 60) as i64 * 1000;
        crate::fixtures::launch_record("l", Some("i-1"), at, CapacityType::Spot)
    }

    #[test]
    fn an_idle_cluster_exits_early_only_in_the_adaptive_mode() {
        let adaptive = WatchMode::Adaptive {
            quiet_after: QUIET_AFTER,
        };
        assert!(adaptive.may_exit_early(0, &[launched(11)], now()));
        assert!(!WatchMode::Continuous.may_exit_early(0, &[], now()));
    }

    #[test]
    fn pending_pods_or_a_recent_launch_keep_the_run_watching() {
        let adaptive = WatchMode::Adaptive {
            quiet_after: QUIET_AFTER,
        };
        assert!(!adaptive.may_exit_early(1, &[], now()));
        assert!(!adaptive.may_exit_early(0, &[launched(11), launched(9)], now()));
    }

    #[test]
    fn the_mode_parses_in_any_case_and_says_what_it_accepts() {
        assert_eq!(WatchMode::parse(" Continuous", QUIET_AFTER), Ok(WatchMode::Continuous));
        assert_eq!(
            WatchMode::parse("ADAPTIVE", Duration::from_secs(60)),
            Ok(WatchMode::Adaptive {
                quiet_after: Duration::from_secs(60)
            })
        );
        let e = WatchMode::parse("lazy", QUIET_AFTER).unwrap_err();
        assert!(e.to_string().contains("continuous or adaptive"));
    }
}
