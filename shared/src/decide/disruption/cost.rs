//! What a disruption costs the workloads, as Karpenter weighs it
//! (`pkg/utils/disruption/disruption.go`: `EvictionCost`, `LifetimeRemaining`).

use std::time::SystemTime;

use crate::model::NillableDuration;
use crate::model::pod::Pod;
use crate::model::well_known::POD_DELETION_COST;

/// A pod's eviction cost: 1, plus its `pod-deletion-cost` over 2^27, plus its priority
/// over 2^25, clamped to [-10, 10] (Karpenter's `EvictionCost`).
pub fn eviction_cost(pod: &Pod) -> f64 {
    let mut cost = 1.0;
    if let Some(c) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST))
        .and_then(|v| v.trim().parse::<f64>().ok())
    {
        cost += c / 2f64.powi(27);
    }
    if let Some(p) = pod.spec.as_ref().and_then(|s| s.priority) {
        cost += f64::from(p) / 2f64.powi(25);
    }
    cost.clamp(-10.0, 10.0)
}

/// The share of a node's lifetime left at `now`: 1 without `expireAfter`, falling to 0 at
/// expiry (Karpenter's `LifetimeRemaining`). An older node is cheaper to disrupt.
pub fn lifetime_remaining(
    created: Option<SystemTime>,
    expire_after: Option<NillableDuration>,
    now: Option<SystemTime>,
) -> f64 {
    let (Some(created), Some(NillableDuration::After(total)), Some(now)) = (created, expire_after, now) else {
        return 1.0;
    };
    let total = total.as_secs_f64();
    if total <= 0.0 {
        return 0.0;
    }
    let age = now.duration_since(created).map_or(0.0, |d| d.as_secs_f64());
    ((total - age) / total).clamp(0.0, 1.0)
}
