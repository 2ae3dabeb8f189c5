//! Kubernetes' syntax of label keys and values and of taints, checked before any of them
//! reaches a plan or a node's user data.
//!
//! Labels and taints are written into the user data a node boots with (`--node-labels`
//! and `--register-with-taints` on AL2023, the bootstrap drop-in on AL2, TOML on
//! Bottlerocket). A value the apiserver would never accept on a Node can break out of
//! that syntax: a comma adds labels of the writer's choice to `--node-labels`, a newline or
//! a quote ends the AL2 drop-in's line and runs as root. The rules are the apiserver's own
//! (`IsQualifiedName`, `IsValidLabelValue` and `IsDNS1123Subdomain` in
//! k8s.io/apimachinery `pkg/util/validation/validation.go`; taints in `validateTaints`,
//! kubernetes/kubernetes `pkg/apis/core/validation/validation.go`: a qualified-name key, a
//! label-value value). Karpenter checks a NodePool's labels and requirement values with
//! the same functions (`ValidateRequirement`, `pkg/apis/v1/nodepool_validation.go`, and its
//! CRD's label patterns).
//!
//! Written by hand: the rules are four character classes and two lengths, and no
//! maintained crate carries apimachinery's validation (k8s-openapi has the types only).

use k8s_openapi::api::core::v1::Taint;

/// Why a label key, a label value or a taint cannot go on a Node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LabelSyntaxError {
    /// A key with no name part, or more than one `/`.
    #[error("key {0:?} is not a qualified name (an optional DNS prefix and '/', then a name)")]
    KeyShape(String),
    /// The name part of a key breaks the name rule.
    #[error(
        "key {0:?}: the name must be 1-63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
    )]
    KeyName(String),
    /// The prefix of a key is not a DNS-1123 subdomain.
    #[error("key {0:?}: the prefix must be a lowercase DNS subdomain of at most 253 characters")]
    KeyPrefix(String),
    /// A value breaks the value rule.
    #[error(
        "value {value:?} of {key:?}: a label value must be empty or 1-63 characters of letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
    )]
    Value {
        /// The key the value is for.
        key: String,
        /// The value.
        value: String,
    },
}

/// A name (the part of a key after `/`, or a whole value): 1–63 characters of
/// `[A-Za-z0-9_.-]`, alphanumeric at both ends.
fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated labels of `[a-z0-9-]`,
/// alphanumeric at both ends.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
                && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Checks a label key (`IsQualifiedName`).
pub fn label_key(key: &str) -> Result<(), LabelSyntaxError> {
    let (prefix, name) = match key.split('/').collect::<Vec<_>>()[..] {
        [name] => (None, name),
        [prefix, name] => (Some(prefix), name),
        _ => return Err(LabelSyntaxError::KeyShape(key.to_string())),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(LabelSyntaxError::KeyPrefix(key.to_string()));
    }
    if !is_name(name) {
        return Err(LabelSyntaxError::KeyName(key.to_string()));
    }
    Ok(())
}

/// Checks the value of the label `key` (`IsValidLabelValue`: empty, or a name).
pub fn label_value(key: &str, value: &str) -> Result<(), LabelSyntaxError> {
    if value.is_empty() || is_name(value) {
        Ok(())
    } else {
        Err(LabelSyntaxError::Value {
            key: key.to_string(),
            value: value.to_string(),
        })
    }
}

/// Checks a label, key and value.
pub fn label(key: &str, value: &str) -> Result<(), LabelSyntaxError> {
    label_key(key)?;
    label_value(key, value)
}

/// Checks a taint's key and value (the effect is checked where taints are read).
pub fn taint(t: &Taint) -> Result<(), LabelSyntaxError> {
    label_key(&t.key)?;
    label_value(&t.key, t.value.as_deref().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_the_apiserver_accepts_pass() {
        for key in [
            "app",
            "karpenter.sh/capacity-type",
            "node.kubernetes.io/instance-type",
            "company.com/team_a.b-c",
            "a",
        ] {
            assert_eq!(label_key(key), Ok(()), "{key}");
        }
        for value in ["", "a", "us-east-1a", "m5.large", "A_b-9", &"x".repeat(63)] {
            assert_eq!(label_value("k", value), Ok(()), "{value}");
        }
    }

    #[test]
    fn a_comma_a_newline_a_quote_or_a_space_in_a_value_is_refused() {
        for value in [
            "a,evil=1",
            "a\nExecStart=/bin/sh",
            "a\"b",
            "a b",
            "-a",
            "a-",
            &"x".repeat(64),
            "a=b",
        ] {
            assert!(
                matches!(label_value("team", value), Err(LabelSyntaxError::Value { .. })),
                "{value:?}"
            );
        }
    }

    #[test]
    fn malformed_keys_are_refused_with_the_part_that_is_wrong() {
        assert_eq!(label_key("a/b/c"), Err(LabelSyntaxError::KeyShape("a/b/c".into())));
        assert_eq!(
            label_key("Company.com/x"),
            Err(LabelSyntaxError::KeyPrefix("Company.com/x".into()))
        );
        assert_eq!(label_key("/x"), Err(LabelSyntaxError::KeyPrefix("/x".into())));
        assert_eq!(label_key("a,b=c"), Err(LabelSyntaxError::KeyName("a,b=c".into())));
        assert_eq!(label_key("x/"), Err(LabelSyntaxError::KeyName("x/".into())));
        assert_eq!(label_key(""), Err(LabelSyntaxError::KeyName(String::new())));
        assert_eq!(
            label_key(&"k".repeat(64)),
            Err(LabelSyntaxError::KeyName("k".repeat(64)))
        );
    }

    #[test]
    fn a_taint_needs_a_qualified_key_and_a_label_value() {
        let t = |key: &str, value: Option<&str>| Taint {
            key: key.into(),
            value: value.map(str::to_string),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        assert_eq!(taint(&t("dedicated", Some("gpu"))), Ok(()));
        assert_eq!(taint(&t("dedicated", None)), Ok(()));
        assert!(taint(&t("dedicated", Some("gpu:NoExecute,x=y"))).is_err());
        assert!(taint(&t("a b", None)).is_err());
    }
}
