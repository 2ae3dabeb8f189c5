//! Taints and tolerations, as kube-scheduler's TaintToleration filter applies them, and
//! as Karpenter applies a NodePool's taints to the nodes it would launch.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Whether a toleration tolerates a taint.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = t.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key_ok = match t.key.as_deref() {
        None | Some("") => t.operator.as_deref() == Some("Exists"),
        Some(k) => k == taint.key,
    };
    if !key_ok {
        return false;
    }
    match t.operator.as_deref() {
        Some("Exists") => true,
        _ => t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default(),
    }
}

/// The first `NoSchedule` or `NoExecute` taint not tolerated, if any
/// (`PreferNoSchedule` never blocks).
pub fn untolerated<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect != "PreferNoSchedule")
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

/// The first taint of a NodePool that keeps the pod off the nodes it would launch, if any.
/// Karpenter counts every effect here, `PreferNoSchedule` included (`Taints.ToleratesPod`
/// in its `scheduling/taints.go`), and tolerates `PreferNoSchedule` only as the last
/// relaxation of a pod that fits nowhere else (`preferences.go`,
/// `toleratePreferNoScheduleTaints`): pass `tolerate_prefer_no_schedule` at that level.
pub fn untolerated_by_nodepool<'a>(
    tolerations: &[Toleration],
    taints: &'a [Taint],
    tolerate_prefer_no_schedule: bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| !(tolerate_prefer_no_schedule && t.effect == "PreferNoSchedule"))
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tol(key: Option<&str>, op: &str, value: Option<&str>, effect: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: Some(op.into()),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerations_match_like_the_scheduler() {
        let gpu = taint("nvidia.com/gpu", Some("true"), "NoSchedule");
        assert!(tolerates(&tol(Some("nvidia.com/gpu"), "Exists", None, None), &gpu));
        assert!(tolerates(
            &tol(Some("nvidia.com/gpu"), "Equal", Some("true"), Some("NoSchedule")),
            &gpu
        ));
        assert!(!tolerates(
            &tol(Some("nvidia.com/gpu"), "Equal", Some("false"), None),
            &gpu
        ));
        assert!(!tolerates(
            &tol(Some("nvidia.com/gpu"), "Exists", None, Some("NoExecute")),
            &gpu
        ));
        assert!(
            tolerates(&tol(None, "Exists", None, None), &gpu),
            "empty key with Exists tolerates all"
        );
        let soft = [taint("a", None, "PreferNoSchedule")];
        assert!(untolerated(&[], &soft).is_none());
        assert!(untolerated_by_nodepool(&[], &soft, false).is_some());
        assert!(untolerated_by_nodepool(&[], &soft, true).is_none());
        assert!(
            untolerated_by_nodepool(
                &[tol(Some("a"), "Exists", None, Some("PreferNoSchedule"))],
                &soft,
                false
            )
            .is_none()
        );
        assert_eq!(
            untolerated(&[], std::slice::from_ref(&gpu)).map(|t| t.key.as_str()),
            Some("nvidia.com/gpu")
        );
    }
}
