//! Kubernetes label selectors (`matchLabels` and `matchExpressions`), compiled once.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A label selector that cannot be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A `matchExpressions` operator that is not `In`, `NotIn`, `Exists` or `DoesNotExist`.
    #[error("unknown label selector operator {0:?}")]
    UnknownOperator(String),
}

/// One selector expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Expr {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A compiled label selector. The empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    exprs: Vec<Expr>,
}

impl Selector {
    /// Compiles a selector; an unknown operator is an error naming it.
    pub fn from_k8s(s: &LabelSelector) -> Result<Self, SelectorError> {
        let mut exprs: Vec<Expr> = s
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Expr::In(k.clone(), vec![v.clone()]))
            .collect();
        for e in s.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            exprs.push(match e.operator.as_str() {
                "In" => Expr::In(e.key.clone(), values),
                "NotIn" => Expr::NotIn(e.key.clone(), values),
                "Exists" => Expr::Exists(e.key.clone()),
                "DoesNotExist" => Expr::DoesNotExist(e.key.clone()),
                other => return Err(SelectorError::UnknownOperator(other.to_string())),
            });
        }
        Ok(Selector { exprs })
    }

    /// Adds `key In [value]` (used for `matchLabelKeys`).
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.exprs.push(Expr::In(key.to_string(), vec![value.to_string()]));
        self
    }

    /// Whether a label set matches.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.exprs.iter().all(|e| match e {
            Expr::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Expr::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Expr::Exists(k) => labels.contains_key(k),
            Expr::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}
