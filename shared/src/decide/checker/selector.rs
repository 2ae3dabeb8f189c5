//! Label matching, written from the upstream rules rather than shared with the planner:
//!
//! - a `metav1.LabelSelector` (apimachinery `metav1.LabelSelectorAsSelector`): every
//!   `matchLabels` pair and every `matchExpressions` entry (`In`, `NotIn`, `Exists`,
//!   `DoesNotExist`) must hold; an empty selector matches everything, and an absent one
//!   (as pod affinity and topology spread read it) matches nothing;
//! - a node selector requirement (component-helpers `nodeaffinity`,
//!   `nodeSelectorRequirementsAsSelector`): `In`, `NotIn`, `Exists`, `DoesNotExist`, and
//!   `Gt`/`Lt`, which compare integers and fail when either side is not one; Karpenter's
//!   `Gte`/`Lte` for NodePool requirements (`sigs.k8s.io/karpenter/pkg/scheduling`);
//! - a node selector term: all of its expressions and fields (`metadata.name`); an empty
//!   term matches no node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Labels, by key.
pub(crate) type Labels = BTreeMap<String, String>;

/// Whether a value (or its absence) satisfies `key <operator> values`.
pub(crate) fn value_satisfies(operator: &str, values: &[String], value: Option<&str>) -> bool {
    let int = |s: &str| s.parse::<i64>().ok();
    let bound = || values.first().and_then(|v| int(v));
    match operator {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((value.and_then(int), bound()), (Some(v), Some(b)) if v > b),
        "Lt" => matches!((value.and_then(int), bound()), (Some(v), Some(b)) if v < b),
        "Gte" => matches!((value.and_then(int), bound()), (Some(v), Some(b)) if v >= b),
        "Lte" => matches!((value.and_then(int), bound()), (Some(v), Some(b)) if v <= b),
        _ => false,
    }
}

/// Whether labels satisfy a label selector; `None` matches nothing.
pub(crate) fn label_selector(selector: Option<&LabelSelector>, labels: &Labels) -> bool {
    let Some(s) = selector else { return false };
    let pairs = s.match_labels.iter().flatten();
    if !pairs.into_iter().all(|(k, v)| labels.get(k) == Some(v)) {
        return false;
    }
    s.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        matches!(e.operator.as_str(), "In" | "NotIn" | "Exists" | "DoesNotExist")
            && value_satisfies(&e.operator, &values, labels.get(&e.key).map(String::as_str))
    })
}

/// Whether a node's labels satisfy one node selector requirement.
pub(crate) fn requirement(r: &NodeSelectorRequirement, labels: &Labels) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    value_satisfies(&r.operator, values, labels.get(&r.key).map(String::as_str))
}

/// Whether a node (its labels and, if it has one yet, its name) satisfies a term.
pub(crate) fn term(t: &NodeSelectorTerm, labels: &Labels, node_name: Option<&str>) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs.iter().all(|r| requirement(r, labels))
        && fields.iter().all(|f| {
            f.key == "metadata.name" && {
                let values = f.values.as_deref().unwrap_or_default();
                value_satisfies(&f.operator, values, node_name)
            }
        })
}

/// Whether some value of one label key, or its absence, satisfies every
/// `(operator, values)` given: the requirements of a NodePool and of a pod on a key that
/// no instance type defines, so that the new node may be labelled with that value.
pub(crate) fn satisfiable<'a>(reqs: impl IntoIterator<Item = (&'a str, &'a [String])> + Clone) -> bool {
    let mut candidates: Vec<Option<String>> = vec![None, Some("carpool-checker-any".into())];
    for (op, values) in reqs.clone() {
        for v in values {
            candidates.push(Some(v.clone()));
            if let Ok(n) = v.parse::<i64>() {
                for d in [-1, 1] {
                    candidates.push(Some(n.saturating_add(d).to_string()));
                }
            }
        }
        let _ = op;
    }
    candidates.iter().any(|c| {
        reqs.clone()
            .into_iter()
            .all(|(op, values)| value_satisfies(op, values, c.as_deref()))
    })
}
