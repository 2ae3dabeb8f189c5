//! Label requirements with Karpenter's semantics (`sigs.k8s.io/karpenter/pkg/scheduling`).
//!
//! A [`Requirement`] is a set of allowed values for one label key, held as a value set
//! plus a `complement` flag, with optional integer bounds:
//!
//! | operator       | complement | values | bounds   |
//! |----------------|------------|--------|----------|
//! | `In v…`        | no         | v…     |          |
//! | `NotIn v…`     | yes        | v…     |          |
//! | `Exists`       | yes        | ∅      |          |
//! | `DoesNotExist` | no         | ∅      |          |
//! | `Gt n`         | yes        | ∅      | `> n`    |
//! | `Lt n`         | yes        | ∅      | `< n`    |
//! | `Gte n`        | yes        | ∅      | `> n−1`  |
//! | `Lte n`        | yes        | ∅      | `< n+1`  |
//!
//! so that intersection is closed and exact: `(a ∩ b).has(v) == a.has(v) && b.has(v)`
//! for every value (the property tests check this law). `minValues` asks that a set of
//! instance types span at least that many distinct values of the key; intersection keeps
//! the larger `minValues`.
//!
//! [`Requirements`] maps keys to requirements (an AND). [`Requirements::compatible`]
//! is Karpenter's check of a pod against a node template: every key the pod requires must
//! be defined by the template unless it is well known or the pod only excludes values.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::well_known;

/// A node selector operator, Kubernetes' and Karpenter's (`Gte`, `Lte`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Operator {
    /// The label has one of the values.
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label is an integer greater than the value.
    Gt,
    /// The label is an integer less than the value.
    Lt,
    /// The label is an integer greater than or equal to the value.
    Gte,
    /// The label is an integer less than or equal to the value.
    Lte,
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl FromStr for Operator {
    type Err = RequirementError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            other => return Err(RequirementError::UnknownOperator(other.to_string())),
        })
    }
}

/// A requirement as written in a manifest: Karpenter's
/// `NodeSelectorRequirementWithMinValues`, a superset of Kubernetes' node selector
/// requirement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub operator: Operator,
    /// The values; their meaning depends on the operator.
    #[serde(default)]
    pub values: Vec<String>,
    /// The least number of distinct values a launch's instance types must span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<u32>,
}

/// A requirement that is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// The operator is not one of the eight known ones.
    #[error("unknown operator {0:?}; use In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte")]
    UnknownOperator(String),
    /// The number of values does not suit the operator.
    #[error("{key}: operator {operator} needs {expected}")]
    Values {
        /// The label key.
        key: String,
        /// The operator.
        operator: Operator,
        /// What the operator needs.
        expected: &'static str,
    },
    /// A comparison operator with a value that is not an integer.
    #[error("{key}: {operator} compares integers, and {value:?} is not one")]
    NotInteger {
        /// The label key.
        key: String,
        /// The operator.
        operator: Operator,
        /// The value given.
        value: String,
    },
    /// `minValues` out of range or larger than the values listed.
    #[error("{key}: minValues {min_values} {reason}")]
    MinValues {
        /// The label key.
        key: String,
        /// The minValues given.
        min_values: u32,
        /// Why it is wrong.
        reason: String,
    },
    /// A key, or an `In` value, that no Node's label could carry
    /// ([`super::label_syntax`]): it would reach a node's user data.
    #[error(transparent)]
    Label(#[from] super::label_syntax::LabelSyntaxError),
    /// Text that is not `KEY OPERATOR [VALUES]`.
    #[error(
        "{0:?} is not a requirement; write 'KEY OPERATOR [V1,V2...] [minValues=N]', e.g. 'kubernetes.io/arch In arm64,amd64'"
    )]
    Syntax(String),
}

impl FromStr for NodeSelectorRequirement {
    type Err = RequirementError;

    /// Parses `KEY OPERATOR [V1,V2...] [minValues=N]`, the CLI's form.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut words = s.split_whitespace();
        let (Some(key), Some(op)) = (words.next(), words.next()) else {
            return Err(RequirementError::Syntax(s.to_string()));
        };
        let operator: Operator = op.parse()?;
        let mut values = Vec::new();
        let mut min_values = None;
        for word in words {
            if let Some(n) = word.strip_prefix("minValues=") {
                min_values = Some(n.parse().map_err(|_| RequirementError::Syntax(s.to_string()))?);
            } else if values.is_empty() {
                values = word.split(',').filter(|v| !v.is_empty()).map(str::to_string).collect();
            } else {
                return Err(RequirementError::Syntax(s.to_string()));
            }
        }
        let r = NodeSelectorRequirement {
            key: key.to_string(),
            operator,
            values,
            min_values,
        };
        Requirement::from_wire(&r)?;
        Ok(r)
    }
}

/// The allowed values of one label key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    complement: bool,
    values: BTreeSet<String>,
    greater_than: Option<i64>,
    less_than: Option<i64>,
    min_values: Option<u32>,
}

fn single_integer(r: &NodeSelectorRequirement) -> Result<i64, RequirementError> {
    let [v] = r.values.as_slice() else {
        return Err(RequirementError::Values {
            key: r.key.clone(),
            operator: r.operator,
            expected: "exactly one integer value",
        });
    };
    v.parse().map_err(|_| RequirementError::NotInteger {
        key: r.key.clone(),
        operator: r.operator,
        value: v.clone(),
    })
}

impl Requirement {
    /// Builds a requirement from its written form, checking it is well formed.
    pub fn from_wire(r: &NodeSelectorRequirement) -> Result<Self, RequirementError> {
        let key = r.key.clone();
        let mut out = Requirement {
            key: key.clone(),
            complement: true,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
            min_values: r.min_values,
        };
        match r.operator {
            Operator::In | Operator::NotIn => {
                if r.values.is_empty() {
                    return Err(RequirementError::Values {
                        key,
                        operator: r.operator,
                        expected: "at least one value",
                    });
                }
                out.complement = r.operator == Operator::NotIn;
                out.values = r.values.iter().cloned().collect();
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !r.values.is_empty() {
                    return Err(RequirementError::Values {
                        key,
                        operator: r.operator,
                        expected: "no values",
                    });
                }
                out.complement = r.operator == Operator::Exists;
            }
            Operator::Gt => out.greater_than = Some(single_integer(r)?),
            Operator::Lt => out.less_than = Some(single_integer(r)?),
            Operator::Gte => out.greater_than = Some(single_integer(r)?.saturating_sub(1)),
            Operator::Lte => out.less_than = Some(single_integer(r)?.saturating_add(1)),
        }
        if let Some(min) = r.min_values {
            let reason = if !(1..=50).contains(&min) {
                Some("must be between 1 and 50".to_string())
            } else if r.operator == Operator::In && (min as usize) > out.values.len() {
                Some(format!("is more than the {} values listed", out.values.len()))
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(RequirementError::MinValues {
                    key,
                    min_values: min,
                    reason,
                });
            }
        }
        Ok(out)
    }

    /// `key In [values]`.
    pub fn in_values<I, S>(key: &str, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Requirement {
            key: key.to_string(),
            complement: false,
            values: values.into_iter().map(Into::into).collect(),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    /// `key Exists`.
    pub fn exists(key: &str) -> Self {
        Requirement {
            key: key.to_string(),
            complement: true,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
            min_values: None,
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The `minValues` flexibility asked for, if any.
    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// The listed values: the allowed ones for `In`, the excluded ones for `NotIn`.
    pub fn values(&self) -> &BTreeSet<String> {
        &self.values
    }

    /// Whether the value set is a complement (`NotIn`, `Exists`, `Gt`, `Lt`).
    pub fn is_complement(&self) -> bool {
        self.complement
    }

    fn within_bounds(&self, value: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        let Ok(n) = value.parse::<i64>() else {
            return false;
        };
        self.greater_than.is_none_or(|g| n > g) && self.less_than.is_none_or(|l| n < l)
    }

    /// Whether a node whose label has `value` satisfies this requirement.
    pub fn has(&self, value: &str) -> bool {
        (self.complement != self.values.contains(value)) && self.within_bounds(value)
    }

    /// The number of allowed values; `usize::MAX − n` for complements, as in Karpenter.
    pub fn len(&self) -> usize {
        if self.complement {
            usize::MAX - self.values.len()
        } else {
            self.values.len()
        }
    }

    /// Whether no value is allowed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The operator this requirement now amounts to (bounded complements read as `Exists`).
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
        }
    }

    /// Whether a node without this label satisfies the requirement (Kubernetes: `NotIn`
    /// and `DoesNotExist` match an absent label).
    pub fn allows_absent(&self) -> bool {
        matches!(self.operator(), Operator::NotIn | Operator::DoesNotExist)
            && self.greater_than.is_none()
            && self.less_than.is_none()
    }

    /// The values allowed by both requirements.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let complement = self.complement && other.complement;
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        let min_values = max_opt(self.min_values, other.min_values);
        if let (Some(g), Some(l)) = (greater_than, less_than)
            && g.saturating_add(1) >= l
        {
            // No integer lies strictly between the bounds.
            return Requirement {
                key: self.key.clone(),
                complement: false,
                values: BTreeSet::new(),
                greater_than: None,
                less_than: None,
                min_values,
            };
        }
        let values: BTreeSet<String> = match (self.complement, other.complement) {
            (true, true) => self.values.union(&other.values).cloned().collect(),
            (true, false) => other.values.difference(&self.values).cloned().collect(),
            (false, true) => self.values.difference(&other.values).cloned().collect(),
            (false, false) => self.values.intersection(&other.values).cloned().collect(),
        };
        let mut out = Requirement {
            key: self.key.clone(),
            complement,
            values,
            greater_than,
            less_than,
            min_values,
        };
        if !complement {
            // A concrete set: apply the bounds to it, then drop them.
            let keep: BTreeSet<String> = out.values.iter().filter(|v| out.within_bounds(v)).cloned().collect();
            out.values = keep;
            out.greater_than = None;
            out.less_than = None;
        }
        out
    }

    /// The value a node is labelled with to satisfy this requirement, or `None` when the
    /// requirement allows no value (`DoesNotExist`, or an empty intersection): Karpenter's
    /// `Requirement.Any()` (`pkg/scheduling/requirement.go`) made deterministic. A concrete
    /// set gives its least value; `Exists`, `NotIn` and the bounded forms give the least
    /// non-negative integer within the bounds that is not excluded (Karpenter picks one at
    /// random).
    pub fn any_value(&self) -> Option<String> {
        if !self.complement {
            return self.values.iter().next().cloned();
        }
        let low = self.greater_than.map_or(0, |g| g.saturating_add(1)).max(0);
        let high = self.less_than.unwrap_or(i64::MAX);
        (low..high)
            .take(self.values.len() + 1)
            .map(|n| n.to_string())
            .find(|v| !self.values.contains(v))
    }

    /// One allowed value, if the set is concrete and not empty.
    pub fn any(&self) -> Option<&str> {
        if self.complement {
            None
        } else {
            self.values.iter().next().map(String::as_str)
        }
    }
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key, self.operator())?;
        if !self.values.is_empty() {
            let v: Vec<&str> = self.values.iter().map(String::as_str).collect();
            write!(f, " [{}]", v.join(","))?;
        }
        if let Some(g) = self.greater_than {
            write!(f, " >{g}")?;
        }
        if let Some(l) = self.less_than {
            write!(f, " <{l}")?;
        }
        if let Some(m) = self.min_values {
            write!(f, " minValues={m}")?;
        }
        Ok(())
    }
}

/// Why two sets of requirements cannot both hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("label {key:?}: {reason}")]
pub struct Incompatible {
    /// The label key in conflict.
    pub key: String,
    /// The conflict, in words.
    pub reason: String,
}

/// Too few distinct values of a key among the instance types left for a launch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("minValues for {key:?} needs {min_values} distinct values, and only {found} remain")]
pub struct MinValuesUnmet {
    /// The label key.
    pub key: String,
    /// The minValues asked.
    pub min_values: u32,
    /// The distinct values found.
    pub found: usize,
}

/// Requirements on several keys, all of which must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Requirements(BTreeMap<String, Requirement>);

impl Requirements {
    /// No requirement at all.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds requirements from their written forms; the error names the index.
    pub fn from_wire(list: &[NodeSelectorRequirement]) -> Result<Self, (usize, RequirementError)> {
        let mut out = Requirements::new();
        for (i, r) in list.iter().enumerate() {
            out.add(Requirement::from_wire(r).map_err(|e| (i, e))?);
        }
        Ok(out)
    }

    /// `key In [value]` for each label.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut out = Requirements::new();
        for (k, v) in labels {
            out.add(Requirement::in_values(k, [v.clone()]));
        }
        out
    }

    /// Adds a requirement, intersecting it with any already on its key.
    pub fn add(&mut self, r: Requirement) {
        match self.0.get_mut(&r.key) {
            Some(existing) => *existing = existing.intersection(&r),
            None => {
                self.0.insert(r.key.clone(), r);
            }
        }
    }

    /// Adds every requirement of `other`.
    pub fn add_all(&mut self, other: &Requirements) {
        for r in other.0.values() {
            self.add(r.clone());
        }
    }

    /// Both sets at once.
    pub fn intersection(&self, other: &Requirements) -> Requirements {
        let mut out = self.clone();
        out.add_all(other);
        out
    }

    /// The requirement on a key.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(key)
    }

    /// Whether a key is constrained.
    pub fn has_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// The requirements, by key.
    pub fn iter(&self) -> impl Iterator<Item = &Requirement> {
        self.0.values()
    }

    /// Whether there is no requirement.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Karpenter's `Intersects`: every key both sides constrain has a common value, except
    /// where both sides only exclude values.
    pub fn intersects(&self, other: &Requirements) -> Result<(), Incompatible> {
        for (key, mine) in &self.0 {
            let Some(theirs) = other.0.get(key) else { continue };
            if mine.intersection(theirs).is_empty() {
                let excludes = |r: &Requirement| matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist);
                if excludes(mine) && excludes(theirs) {
                    continue;
                }
                return Err(Incompatible {
                    key: key.clone(),
                    reason: format!("needs {theirs}, but only {mine} is offered"),
                });
            }
        }
        Ok(())
    }

    /// Karpenter's `Compatible` with well-known labels allowed undefined: `self` is a node
    /// template (NodePool × offering), `pod` what a pod needs.
    pub fn compatible(&self, pod: &Requirements) -> Result<(), Incompatible> {
        for (key, r) in &pod.0 {
            if self.0.contains_key(key) || well_known::is_well_known(key) {
                continue;
            }
            if matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist) {
                continue;
            }
            return Err(Incompatible {
                key: key.clone(),
                reason: format!("needs {r}, and no NodePool defines this label"),
            });
        }
        self.intersects(pod)
    }

    /// Whether a node with exactly these labels satisfies every requirement (Kubernetes'
    /// node selector matching); the error names the first key that fails.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> Result<(), Incompatible> {
        for (key, r) in &self.0 {
            let ok = match labels.get(key) {
                Some(v) => r.has(v),
                None => r.allows_absent(),
            };
            if !ok {
                return Err(Incompatible {
                    key: key.clone(),
                    reason: match labels.get(key) {
                        Some(v) => format!("has {v:?}, needs {r}"),
                        None => format!("is not set, needs {r}"),
                    },
                });
            }
        }
        Ok(())
    }

    /// Checks `minValues`: among the label sets of the candidate instance types that satisfy
    /// each requirement, there must be at least `minValues` distinct values of its key.
    pub fn check_min_values<'a>(
        &self,
        candidates: impl IntoIterator<Item = &'a BTreeMap<String, String>> + Clone,
    ) -> Result<(), MinValuesUnmet> {
        for r in self.0.values() {
            let Some(min) = r.min_values else { continue };
            let distinct: BTreeSet<&String> = candidates
                .clone()
                .into_iter()
                .filter_map(|labels| labels.get(&r.key))
                .filter(|v| r.has(v))
                .collect();
            if distinct.len() < min as usize {
                return Err(MinValuesUnmet {
                    key: r.key.clone(),
                    min_values: min,
                    found: distinct.len(),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.values().map(ToString::to_string).collect();
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(s: &str) -> Requirement {
        Requirement::from_wire(&s.parse().unwrap()).unwrap()
    }

    fn reqs(list: &[&str]) -> Requirements {
        let mut out = Requirements::new();
        for s in list {
            out.add(req(s));
        }
        out
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn each_operator_admits_exactly_its_values() {
        let r = req("k In a,b");
        assert!(r.has("a") && r.has("b") && !r.has("c"));
        let r = req("k NotIn a");
        assert!(!r.has("a") && r.has("z") && r.allows_absent());
        let r = req("k Exists");
        assert!(r.has("anything") && !r.allows_absent());
        let r = req("k DoesNotExist");
        assert!(!r.has("x") && r.allows_absent());
        let r = req("k Gt 4");
        assert!(r.has("5") && !r.has("4") && !r.has("five") && !r.allows_absent());
        let r = req("k Lt 4");
        assert!(r.has("3") && !r.has("4"));
        let r = req("k Gte 4");
        assert!(r.has("4") && !r.has("3"));
        let r = req("k Lte 4");
        assert!(r.has("4") && !r.has("5"));
    }

    #[test]
    fn malformed_requirements_are_rejected_with_a_reason() {
        let bad = |s: &str| s.parse::<NodeSelectorRequirement>().unwrap_err().to_string();
        assert!(bad("k In").contains("at least one value"));
        assert!(bad("k Exists a").contains("no values"));
        assert!(bad("k Gt a").contains("not one"));
        assert!(bad("k Gt 1,2").contains("exactly one"));
        assert!(bad("k Equals a").contains("unknown operator"));
        assert!(bad("k").contains("KEY OPERATOR"));
        assert!(bad("k In a minValues=2").contains("more than the 1 values"));
        assert!(bad("k Exists minValues=0").contains("between 1 and 50"));
    }

    #[test]
    fn intersection_of_sets_and_complements() {
        assert_eq!(req("k In a,b,c").intersection(&req("k NotIn b")).values().len(), 2);
        let both_not = req("k NotIn a").intersection(&req("k NotIn b"));
        assert_eq!(both_not.operator(), Operator::NotIn);
        assert!(!both_not.has("a") && !both_not.has("b") && both_not.has("c"));
        assert!(req("k In a").intersection(&req("k In b")).is_empty());
        assert_eq!(req("k In a").intersection(&req("k Exists")).operator(), Operator::In);
    }

    #[test]
    fn integer_bounds_combine_and_filter_concrete_sets() {
        let window = req("gen Gt 2").intersection(&req("gen Lt 6"));
        assert!(window.has("3") && window.has("5") && !window.has("6") && !window.has("2"));
        assert!(
            req("gen Gt 5").intersection(&req("gen Lt 6")).is_empty(),
            "no integer in (5, 6)"
        );
        let filtered = req("gen In 1,3,7,x").intersection(&req("gen Gte 3"));
        assert_eq!(
            filtered.values().iter().map(String::as_str).collect::<Vec<_>>(),
            ["3", "7"]
        );
    }

    #[test]
    fn min_values_survives_intersection_and_is_checked_over_instance_types() {
        let r = req("karpenter.k8s.aws/instance-family In m5,m6i,m7i minValues=2")
            .intersection(&req("karpenter.k8s.aws/instance-family Exists"));
        assert_eq!(r.min_values(), Some(2));
        let mut set = Requirements::new();
        set.add(r);
        let m5 = labels(&[("karpenter.k8s.aws/instance-family", "m5")]);
        let m6i = labels(&[("karpenter.k8s.aws/instance-family", "m6i")]);
        let c5 = labels(&[("karpenter.k8s.aws/instance-family", "c5")]);
        assert!(set.check_min_values([&m5, &m6i]).is_ok());
        let err = set.check_min_values([&m5, &m5, &c5]).unwrap_err();
        assert_eq!(
            (err.min_values, err.found),
            (2, 1),
            "c5 does not count: it is not allowed"
        );
    }

    #[test]
    fn a_pod_needing_an_undefined_custom_label_is_incompatible() {
        let node = reqs(&["kubernetes.io/arch In amd64", "team In a"]);
        assert!(node.compatible(&reqs(&["team In a"])).is_ok());
        assert!(node.compatible(&reqs(&["kubernetes.io/arch In arm64"])).is_err());
        assert!(
            node.compatible(&reqs(&["gpu In yes"]))
                .unwrap_err()
                .to_string()
                .contains("no NodePool defines")
        );
        assert!(node.compatible(&reqs(&["gpu NotIn yes"])).is_ok(), "excluding is fine");
        assert!(
            node.compatible(&reqs(&["topology.kubernetes.io/zone In us-east-1a"]))
                .is_ok(),
            "well known"
        );
        let excl = reqs(&["team NotIn a"]);
        assert!(reqs(&["team DoesNotExist"]).intersects(&excl).is_ok());
    }

    #[test]
    fn node_labels_match_like_the_scheduler() {
        let r = reqs(&["kubernetes.io/arch In arm64", "spot NotIn true", "gen Gt 5"]);
        assert!(
            r.matches_labels(&labels(&[("kubernetes.io/arch", "arm64"), ("gen", "7")]))
                .is_ok()
        );
        let err = r
            .matches_labels(&labels(&[("kubernetes.io/arch", "arm64")]))
            .unwrap_err();
        assert_eq!(err.key, "gen");
    }

    fn arb_requirement() -> impl Strategy<Value = Requirement> {
        let values = prop::collection::vec(prop::sample::select(vec!["1", "2", "3", "4", "5", "a", "b"]), 1..4);
        (0usize..8, values, prop::option::of(1u32..3)).prop_filter_map("well formed", |(op, vals, min)| {
            let ops = [
                Operator::In,
                Operator::NotIn,
                Operator::Exists,
                Operator::DoesNotExist,
                Operator::Gt,
                Operator::Lt,
                Operator::Gte,
                Operator::Lte,
            ];
            let operator = ops[op];
            let values: Vec<String> = match operator {
                Operator::Exists | Operator::DoesNotExist => vec![],
                Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                    vec![vals.iter().find(|v| v.parse::<i64>().is_ok())?.to_string()]
                }
                _ => vals.iter().map(|v| v.to_string()).collect(),
            };
            Requirement::from_wire(&NodeSelectorRequirement {
                key: "k".into(),
                operator,
                values,
                min_values: min.filter(|_| operator != Operator::In),
            })
            .ok()
        })
    }

    const UNIVERSE: [&str; 9] = ["0", "1", "2", "3", "4", "5", "6", "a", "b"];

    proptest! {
        #[test]
        fn intersection_admits_exactly_what_both_admit(a in arb_requirement(), b in arb_requirement()) {
            let ab = a.intersection(&b);
            for v in UNIVERSE {
                prop_assert_eq!(ab.has(v), a.has(v) && b.has(v), "value {} in {} ∩ {} = {}", v, a, b, ab);
            }
        }

        #[test]
        fn intersection_is_commutative(a in arb_requirement(), b in arb_requirement()) {
            let (ab, ba) = (a.intersection(&b), b.intersection(&a));
            for v in UNIVERSE {
                prop_assert_eq!(ab.has(v), ba.has(v));
            }
            prop_assert_eq!(ab.min_values(), ba.min_values());
        }

        #[test]
        fn intersection_is_associative(a in arb_requirement(), b in arb_requirement(), c in arb_requirement()) {
            let left = a.intersection(&b).intersection(&c);
            let right = a.intersection(&b.intersection(&c));
            for v in UNIVERSE {
                prop_assert_eq!(left.has(v), right.has(v));
            }
        }

        #[test]
        fn intersection_is_idempotent(a in arb_requirement()) {
            let aa = a.intersection(&a);
            for v in UNIVERSE {
                prop_assert_eq!(aa.has(v), a.has(v));
            }
        }

        #[test]
        fn intersecting_with_exists_changes_nothing(a in arb_requirement()) {
            let ae = a.intersection(&Requirement::exists("k"));
            for v in UNIVERSE {
                prop_assert_eq!(ae.has(v), a.has(v));
            }
        }
    }
}
