//! Why a pod could not be placed: the reasons gathered over its relaxation levels and the
//! NodePools tried at each, once each, the most relaxed level's last (Karpenter combines
//! the errors of every NodePool, `Scheduler.addToNewNodeClaim`, and reports the last
//! relaxation's, `Scheduler.trySchedule`).

use crate::decide::provisioning::unschedulable::Reason;

/// Why a pod could not be placed, the most relaxed level's reasons last.
#[derive(Default)]
pub(super) struct Why {
    reasons: Vec<Reason>,
}

impl Why {
    /// Adds a reason, once.
    pub(super) fn add(&mut self, r: Reason) {
        if !self.reasons.contains(&r) {
            self.reasons.push(r);
        }
    }

    /// The reasons; when no NodePool could be tried, that.
    pub(super) fn into_reasons(self) -> Vec<Reason> {
        if self.reasons.is_empty() {
            vec![Reason::NoNodePool]
        } else {
            self.reasons
        }
    }
}
