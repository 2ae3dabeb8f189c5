//! How long a disruption's drain may take, and whether an event may set a hard deadline at
//! all: the terms an event gets, decided from what Carpool knows for itself, not from what
//! the event claims.
//!
//! Anyone who can send to the queue or invoke the function can write an event, so two of
//! its claims are not believed:
//!
//! - **That the instance is spot.** A spot interruption warning is acted on as one (a hard
//!   deadline, no waiting for the replacement) only when EC2 says the instance is spot: the
//!   instance's `InstanceLifecycle` from DescribeInstances, which the run reads anyway to
//!   check ownership. The Node's `karpenter.sh/capacity-type` label is not used: anyone who
//!   may update Nodes can change it, and it is absent from a node that has not registered.
//!   A warning that names an on-demand instance is ignored ([`IgnoreReason::NotSpot`]).
//! - **When it was sent.** The event's `time` is written by the sender. The drain's deadline
//!   counts from when the event *arrived*: the moment the function took it up, passed in as
//!   `arrived` (the run's clock). An SQS message's `SentTimestamp` is not used either: a
//!   direct invocation can carry a made-up SQS record. A genuine warning loses only the
//!   seconds between EventBridge and the function, which the 30 s between the default
//!   deadline (90 s) and the notice (120 s) absorb; a `time` an hour in the past no longer
//!   cuts the drain to one pass.
//!
//! The spot notice is two minutes: "The Spot Instance interruption notice is a warning
//! that is issued two minutes before Amazon EC2 stops or terminates your Spot Instance"
//! (Amazon EC2 User Guide, "Spot Instance interruption notices",
//! <https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html>).
//! A hard deadline is therefore never later than [`SPOT_NOTICE`] after arrival, whatever
//! the drain deadline configured (the configuration already refuses 120 s or more).

use std::time::Duration;

use serde::Serialize;

use super::action::{Action, Cause, IgnoreReason};
use crate::model::{CapacityType, EpochMillis};

/// The notice EC2 gives before it interrupts a spot instance: two minutes.
pub const SPOT_NOTICE: Duration = Duration::from_secs(120);

/// The terms of a disruption an event starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DrainTerms {
    /// When the drain ends (epoch milliseconds). With `hard`, the instance is terminated
    /// then, drained or not; without, it is the end of this invocation's share of the
    /// drain, and the sweep goes on later.
    pub deadline: EpochMillis,
    /// Whether the instance goes away at the deadline whatever the drain.
    pub hard: bool,
    /// Whether the drain waits until the replacement is Ready.
    pub wait_for_replacement: bool,
}

/// The terms for `action` on an instance EC2 says is of `capacity`, for an event that
/// arrived at `arrived`, with the configured `drain_deadline`; or why the event is not
/// acted on.
///
/// | action | capacity | terms |
/// |---|---|---|
/// | spot interruption | spot | hard, `arrived + min(drain_deadline, 2 min)` |
/// | spot interruption | on-demand | ignored: [`IgnoreReason::NotSpot`] |
/// | stopping, shutting down | any | hard, `arrived + min(drain_deadline, 2 min)` |
/// | scheduled change, rebalance | any | soft, waits for the replacement, `arrived + drain_deadline` |
///
/// A state change is believed only after the run has read the instance's actual state
/// (a `stopping` event about a running instance is ignored as stale before this).
pub fn drain_terms(
    action: &Action,
    instance_id: &str,
    capacity: CapacityType,
    arrived: EpochMillis,
    drain_deadline: Duration,
) -> Result<DrainTerms, IgnoreReason> {
    let after = |d: Duration| arrived.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    match action {
        Action::Disrupt {
            cause: Cause::SpotInterruption,
        } if capacity != CapacityType::Spot => Err(IgnoreReason::NotSpot {
            instance_id: instance_id.to_owned(),
            capacity_type: capacity,
        }),
        Action::Disrupt {
            cause: Cause::SpotInterruption | Cause::StateChange(_),
        } => Ok(DrainTerms {
            deadline: after(drain_deadline.min(SPOT_NOTICE)),
            hard: true,
            wait_for_replacement: false,
        }),
        _ => Ok(DrainTerms {
            deadline: after(drain_deadline),
            hard: false,
            wait_for_replacement: true,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::interruption::InstanceStateName;

    const ARRIVED: EpochMillis = 1_790_000_000_000;
    const SPOT_WARNING: Action = Action::Disrupt {
        cause: Cause::SpotInterruption,
    };

    #[test]
    fn a_spot_warning_for_a_spot_instance_gets_the_drain_deadline_from_arrival() {
        let t = drain_terms(
            &SPOT_WARNING,
            "i-1",
            CapacityType::Spot,
            ARRIVED,
            Duration::from_secs(90),
        )
        .unwrap();
        assert_eq!(
            t,
            DrainTerms {
                deadline: ARRIVED + 90_000,
                hard: true,
                wait_for_replacement: false
            }
        );
    }

    #[test]
    fn a_spot_warning_for_an_on_demand_instance_sets_no_deadline() {
        let e = drain_terms(
            &SPOT_WARNING,
            "i-od",
            CapacityType::OnDemand,
            ARRIVED,
            Duration::from_secs(90),
        )
        .unwrap_err();
        assert_eq!(
            e,
            IgnoreReason::NotSpot {
                instance_id: "i-od".into(),
                capacity_type: CapacityType::OnDemand
            }
        );
        assert!(e.to_string().contains("not a spot instance"), "{e}");
    }

    #[test]
    fn a_spot_warning_dated_an_hour_ago_still_gets_its_deadline_from_arrival() {
        let mut json: serde_json::Value = serde_json::from_str(include_str!(
            "../../../tests/data/events/spot-interruption-warning.json"
        ))
        .unwrap();
        // An hour before it arrived: a forged or long-delayed `time`.
        json["time"] = serde_json::json!("2026-09-21T13:13:20Z");
        let event = crate::decide::interruption::parse_event(&json).unwrap();
        assert_eq!(event.time, Some(ARRIVED - 3_600_000));
        let t = drain_terms(
            &event.action,
            &event.instance_ids[0],
            CapacityType::Spot,
            ARRIVED,
            Duration::from_secs(90),
        )
        .unwrap();
        assert!(t.hard);
        assert_eq!(t.deadline, ARRIVED + 90_000, "not the event's time + 90 s, long past");
    }

    #[test]
    fn a_hard_deadline_never_passes_the_two_minute_notice() {
        let t = drain_terms(
            &SPOT_WARNING,
            "i-1",
            CapacityType::Spot,
            ARRIVED,
            Duration::from_secs(600),
        )
        .unwrap();
        assert_eq!(t.deadline, ARRIVED + 120_000);
        let stopping = Action::Disrupt {
            cause: Cause::StateChange(InstanceStateName::Stopping),
        };
        let t = drain_terms(
            &stopping,
            "i-1",
            CapacityType::OnDemand,
            ARRIVED,
            Duration::from_secs(600),
        )
        .unwrap();
        assert!(t.hard);
        assert_eq!(t.deadline, ARRIVED + 120_000);
    }

    #[test]
    fn notices_that_leave_time_wait_for_the_replacement_and_end_softly() {
        for action in [
            Action::Rebalance,
            Action::Disrupt {
                cause: Cause::ScheduledChange,
            },
        ] {
            for capacity in [CapacityType::Spot, CapacityType::OnDemand] {
                let t = drain_terms(&action, "i-1", capacity, ARRIVED, Duration::from_secs(90)).unwrap();
                assert_eq!(
                    t,
                    DrainTerms {
                        deadline: ARRIVED + 90_000,
                        hard: false,
                        wait_for_replacement: true
                    },
                    "{action:?} {capacity:?}"
                );
            }
        }
    }
}
