//! What a scheduler run decided (Karpenter's `Results`, from `Scheduler.Solve`): the plan,
//! with what the lower bound on its cost needs.

use crate::decide::provisioning::plan::ProvisioningPlan;
use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::templates::Template;
use crate::model::Resources;

/// What a scheduler run decided, with what the lower bound needs.
pub struct SchedulerOutcome {
    /// The plan (without its lower bound).
    pub plan: ProvisioningPlan,
    bound: BoundInput,
}

/// What the lower bound reads.
struct BoundInput {
    templates: Vec<Template>,
    pods: Vec<PodInfo>,
    existing_free: Resources,
}

impl SchedulerOutcome {
    /// The outcome of `plan`, placing `pods` on new nodes of `templates`, with what the
    /// existing nodes had left (`existing_free`).
    pub(super) fn new(
        plan: ProvisioningPlan,
        templates: Vec<Template>,
        pods: Vec<PodInfo>,
        existing_free: Resources,
    ) -> Self {
        SchedulerOutcome {
            plan,
            bound: BoundInput {
                templates,
                pods,
                existing_free,
            },
        }
    }

    /// The lower bound on the cost of placing the same pods (see [`crate::decide::provisioning::lower_bound`]).
    pub fn lower_bound(&self) -> f64 {
        let pods: Vec<&PodInfo> = self.bound.pods.iter().collect();
        crate::decide::provisioning::lower_bound::lower_bound(&self.bound.templates, &pods, &self.bound.existing_free)
    }
}
