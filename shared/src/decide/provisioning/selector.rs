//! Kubernetes label selectors (`matchLabels` and `matchExpressions`), compiled once.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A label selector that cannot be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A `matchExpressions` operator that is not `In`, `NotIn`, `Exists` or `DoesNotExist`.
    #[error("unknown label selector operator {0:?}")]
    UnknownOperator(String),
    /// A selector string (`kubectl -l` syntax) that does not parse.
    #[error(
        "label selector {selector:?}: {problem} (expected terms like `team=web`, `tier!=batch`, `env in (a,b)`, `env notin (a)`, `gpu`, `!spot`, joined by commas)"
    )]
    Syntax {
        /// The selector as written.
        selector: String,
        /// What is wrong with it.
        problem: SyntaxProblem,
    },
}

/// What is wrong with a selector string.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxProblem {
    /// A term with no key, such as `=web` or an empty term between commas.
    #[error("a term has no key")]
    NoKey,
    /// A set term whose values are not in parentheses: `env in a`.
    #[error("the values of {key:?} are not in parentheses")]
    NoParentheses {
        /// The key.
        key: String,
    },
    /// A key or value with characters a label cannot hold.
    #[error("{0:?} is not a valid label key or value")]
    BadToken(String),
}

/// The terms of a selector string: split at the commas outside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

/// The values of a set term: `(a, b)`.
fn set_values(key: &str, values: &str) -> Result<Vec<String>, SyntaxProblem> {
    let inner = values
        .trim()
        .strip_prefix('(')
        .and_then(|v| v.strip_suffix(')'))
        .ok_or_else(|| SyntaxProblem::NoParentheses {
            key: key.trim().to_string(),
        })?;
    inner.split(',').map(value_token).collect()
}

/// A label key: not empty, and only the characters a qualified name can hold.
fn token(key: &str) -> Result<String, SyntaxProblem> {
    let key = key.trim();
    if key.is_empty() {
        return Err(SyntaxProblem::NoKey);
    }
    if !key.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)) {
        return Err(SyntaxProblem::BadToken(key.to_string()));
    }
    Ok(key.to_string())
}

/// A label value: possibly empty, and only the characters a label value can hold.
fn value_token(value: &str) -> Result<String, SyntaxProblem> {
    let value = value.trim();
    if !value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(SyntaxProblem::BadToken(value.to_string()));
    }
    Ok(value.to_string())
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

    /// Parses a selector in the string syntax of `kubectl get -l` and of the API's
    /// `labelSelector` query parameter (apimachinery's `labels.Parse`): terms joined by
    /// commas, each `key=value`, `key==value`, `key!=value`, `key in (v1,v2)`,
    /// `key notin (v1,v2)`, `key` (exists) or `!key` (does not exist). The empty string is
    /// the empty selector, which matches everything. Written here because neither
    /// k8s-openapi nor kube-rs parses this syntax (kube-rs only prints it).
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        let err = |problem| SelectorError::Syntax {
            selector: text.to_string(),
            problem,
        };
        let mut exprs = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(err(SyntaxProblem::NoKey));
            }
            // Set operators are matched padded with spaces, so a key holding `in` is not
            // taken for one.
            let expr = if let Some(key) = term.strip_prefix('!') {
                Expr::DoesNotExist(token(key).map_err(err)?)
            } else if let Some((key, value)) = term.split_once("!=") {
                Expr::NotIn(token(key).map_err(err)?, vec![value_token(value).map_err(err)?])
            } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Expr::In(token(key).map_err(err)?, vec![value_token(value).map_err(err)?])
            } else if let Some((key, values)) = term.split_once(" notin ") {
                Expr::NotIn(token(key).map_err(err)?, set_values(key, values).map_err(err)?)
            } else if let Some((key, values)) = term.split_once(" in ") {
                Expr::In(token(key).map_err(err)?, set_values(key, values).map_err(err)?)
            } else {
                Expr::Exists(token(term).map_err(err)?)
            };
            exprs.push(expr);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    // The grammar of apimachinery's `labels.Parse` (k8s.io/apimachinery/pkg/labels/selector.go,
    // `Parser.parse`): `=`, `==`, `!=`, `in`, `notin`, a bare key for exists and `!key` for
    // does-not-exist, terms ANDed by commas; cases after its TestSelectorMatches.
    #[test]
    fn a_selector_string_matches_as_kubectl_l_does() {
        let team = labels(&[("team", "web"), ("tier", "front")]);
        let cases = [
            ("", true),
            ("team=web", true),
            ("team==web", true),
            ("team!=web", false),
            ("team!=batch", true),
            ("missing!=x", true),
            ("team in (web, api)", true),
            ("team notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!gpu", true),
            ("team=web,tier=front", true),
            ("team=web,tier=back", false),
            ("team in (api,web),!gpu", true),
        ];
        for (text, expected) in cases {
            let selector = Selector::parse(text).unwrap();
            assert_eq!(selector.matches(&team), expected, "{text:?}");
        }
    }

    #[test]
    fn a_selector_string_that_does_not_parse_says_what_is_wrong() {
        for (text, problem) in [
            ("=web", SyntaxProblem::NoKey),
            ("team=web,,tier", SyntaxProblem::NoKey),
            ("team in web", SyntaxProblem::NoParentheses { key: "team".into() }),
            ("team=w b", SyntaxProblem::BadToken("w b".into())),
        ] {
            assert_eq!(
                Selector::parse(text),
                Err(SelectorError::Syntax {
                    selector: text.into(),
                    problem
                }),
                "{text:?}"
            );
        }
    }
}
