//! What a pod requires of its node's labels: `nodeSelector` plus required node affinity.
//!
//! Kubernetes ANDs the node selector with the affinity, and ORs the `nodeSelectorTerms`
//! of the affinity; within a term, expressions are ANDed. A pod therefore yields one
//! [`Requirements`] per term (its OR branches), each including the node selector. A term
//! with no expressions matches no node (as in kube-scheduler) and yields no branch. With no
//! required affinity there is one branch: the node selector alone.
//!
//! `matchFields` on `metadata.name` (what the DaemonSet controller writes) becomes a
//! requirement on `kubernetes.io/hostname`: Carpool names nodes after their hostname, and a
//! pod pinned to one named node cannot land on a new one.

use crate::model::pod::PodSpec;
use k8s_openapi::api::core::v1::NodeSelectorRequirement as K8sRequirement;

use super::label_syntax;
use super::requirements::{NodeSelectorRequirement, Operator, Requirement, RequirementError, Requirements};
use super::well_known::HOSTNAME;

/// A pod's node requirement that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}")]
pub struct PodRequirementError {
    /// The field path, e.g.
    /// `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[1]`.
    pub field: String,
    /// What is wrong.
    #[source]
    pub source: RequirementError,
}

const TERMS: &str = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";

/// Converts a Kubernetes node selector requirement into Carpool's.
pub fn from_k8s(r: &K8sRequirement) -> Result<Requirement, RequirementError> {
    let operator: Operator = r.operator.parse()?;
    Requirement::from_wire(&NodeSelectorRequirement {
        key: r.key.clone(),
        operator,
        values: r.values.clone().unwrap_or_default(),
        min_values: None,
    })
}

/// The OR branches of a pod's node requirements. An empty result means no node can match.
pub fn pod_requirement_branches(spec: &PodSpec) -> Result<Vec<Requirements>, PodRequirementError> {
    let mut base = Requirements::new();
    for (k, v) in spec.node_selector.iter().flatten() {
        // The apiserver checks a nodeSelector as labels; a pod read from a file may not be.
        label_syntax::label(k, v).map_err(|source| PodRequirementError {
            field: format!("spec.nodeSelector[{k}]"),
            source: source.into(),
        })?;
        base.add(Requirement::in_values(k, [v.clone()]));
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|sel| sel.node_selector_terms.as_slice());
    let Some(terms) = terms else {
        return Ok(vec![base]);
    };
    let mut branches = Vec::with_capacity(terms.len());
    for (t, term) in terms.iter().enumerate() {
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            continue;
        }
        let mut branch = base.clone();
        for (i, e) in exprs.iter().enumerate() {
            let field = || format!("{TERMS}[{t}].matchExpressions[{i}]");
            // A required value may become the label of the node launched for the pod (a
            // NodePool's custom key with `Exists`): one no Node could carry would reach the
            // node's user data, so the pod is refused, with an Event saying why.
            if e.operator == "In" {
                for v in e.values.iter().flatten() {
                    label_syntax::label_value(&e.key, v).map_err(|source| PodRequirementError {
                        field: field(),
                        source: source.into(),
                    })?;
                }
            }
            branch.add(from_k8s(e).map_err(|source| PodRequirementError { field: field(), source })?);
        }
        for (i, f) in fields.iter().enumerate() {
            let mut f = f.clone();
            if f.key == "metadata.name" {
                f.key = HOSTNAME.to_string();
            }
            branch.add(from_k8s(&f).map_err(|source| PodRequirementError {
                field: format!("{TERMS}[{t}].matchFields[{i}]"),
                source,
            })?);
        }
        branches.push(branch);
    }
    Ok(branches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec(yaml: &str) -> PodSpec {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn node(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn node_selector_alone_is_one_branch() {
        let b = pod_requirement_branches(&spec("containers: []\nnodeSelector: {kubernetes.io/arch: arm64}")).unwrap();
        assert_eq!(b.len(), 1);
        assert!(b[0].matches_labels(&node(&[("kubernetes.io/arch", "arm64")])).is_ok());
        assert!(b[0].matches_labels(&node(&[("kubernetes.io/arch", "amd64")])).is_err());
    }

    #[test]
    fn each_node_selector_term_is_an_or_branch_anded_with_the_selector() {
        let s = spec(
            r#"
containers: []
nodeSelector: {team: data}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
      - matchExpressions:
        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["6"]}
        - {key: kubernetes.io/arch, operator: In, values: [arm64]}
      - {}
"#,
        );
        let b = pod_requirement_branches(&s).unwrap();
        assert_eq!(b.len(), 2, "the empty term matches nothing and adds no branch");
        let spot = node(&[("team", "data"), ("karpenter.sh/capacity-type", "spot")]);
        let graviton = node(&[
            ("team", "data"),
            ("karpenter.k8s.aws/instance-generation", "7"),
            ("kubernetes.io/arch", "arm64"),
        ]);
        assert!(b[0].matches_labels(&spot).is_ok() && b[1].matches_labels(&spot).is_err());
        assert!(b[1].matches_labels(&graviton).is_ok());
        let no_team = node(&[("karpenter.sh/capacity-type", "spot")]);
        assert!(
            b.iter().all(|r| r.matches_labels(&no_team).is_err()),
            "nodeSelector applies to every branch"
        );
    }

    #[test]
    fn match_fields_on_the_node_name_pin_the_hostname() {
        let s = spec(
            r#"
containers: []
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchFields: [{key: metadata.name, operator: In, values: [ip-10-0-0-1]}]
"#,
        );
        let b = pod_requirement_branches(&s).unwrap();
        assert_eq!(b[0].get(HOSTNAME).unwrap().any(), Some("ip-10-0-0-1"));
    }

    #[test]
    fn a_bad_expression_names_its_field_path() {
        let s = spec(
            r#"
containers: []
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: a, operator: In, values: [x]}
        - {key: gen, operator: Gt, values: [seven]}
"#,
        );
        let err = pod_requirement_branches(&s).unwrap_err();
        assert_eq!(err.field, format!("{TERMS}[0].matchExpressions[1]"));
    }
}
