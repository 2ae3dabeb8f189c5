//! Taints and tolerations, from the upstream rules:
//!
//! - a toleration tolerates a taint (k8s.io/api `(*Toleration).ToleratesTaint`, as
//!   `v1helper.TolerationsTolerateTaint` applies it) when its effect is empty or the
//!   taint's, its key is empty or the taint's, and its operator is `Exists`, or `Equal`
//!   (the default) with the taint's value;
//! - kube-scheduler's TaintToleration filter (`(*TaintToleration).Filter`) asks that every
//!   `NoSchedule` and `NoExecute` taint be tolerated; `PreferNoSchedule` does not filter.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Whether one toleration tolerates one taint.
pub(crate) fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = t.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "" | "Equal" => t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default(),
        _ => false,
    }
}

/// The first `NoSchedule` or `NoExecute` taint none of the tolerations tolerates.
pub(crate) fn untolerated<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}
