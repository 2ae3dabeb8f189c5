//! Karpenter's `karpenter.sh/v1` NodePool, read as users write it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::duration::NillableDuration;
use super::manifest::{ManifestError, Validate};
use super::quantity::Quantity;
use super::requirements::{NodeSelectorRequirement, RequirementError, Requirements};
use super::well_known;

/// The API version Carpool reads.
pub const NODEPOOL_API_VERSION: &str = "karpenter.sh/v1";

/// A NodePool: what nodes may be launched for which pods, and how they may be disrupted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePool {
    /// `karpenter.sh/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `NodePool`.
    #[serde(default)]
    pub kind: String,
    /// Name, labels, annotations.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired state.
    pub spec: NodePoolSpec,
    /// Status as Karpenter writes it; kept, not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// `spec` of a NodePool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// The template of the nodes launched.
    pub template: NodeClaimTemplate,
    /// How nodes of this pool may be disrupted.
    #[serde(default)]
    pub disruption: Disruption,
    /// Caps on the total resources of the pool's nodes (`cpu`, `memory`, `nodes`...).
    #[serde(default)]
    pub limits: BTreeMap<String, Quantity>,
    /// Priority among pools: higher is tried first (1–100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// `spec.template`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    /// Labels and annotations put on every node.
    #[serde(default)]
    pub metadata: TemplateMetadata,
    /// The node's shape and constraints.
    pub spec: NodeClaimTemplateSpec,
}

/// `spec.template.metadata`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateMetadata {
    /// Labels for the nodes.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the nodes.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// `spec.template.spec`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints every node carries; pods must tolerate them.
    #[serde(default)]
    pub taints: Vec<Taint>,
    /// Taints present at start, removed by an agent; pods need not tolerate them.
    #[serde(default)]
    pub startup_taints: Vec<Taint>,
    /// Constraints on the instance types, zones and capacity types.
    #[serde(default)]
    pub requirements: Vec<NodeSelectorRequirement>,
    /// The EC2NodeClass that says how to launch.
    pub node_class_ref: NodeClassRef,
    /// Node lifetime before replacement (default 720h).
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
    /// How long a draining node may wait for its pods before it is forced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<NillableDuration>,
}

fn default_expire_after() -> NillableDuration {
    NillableDuration::After(std::time::Duration::from_secs(720 * 3600))
}

/// `spec.template.spec.nodeClassRef`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeClassRef {
    /// `karpenter.k8s.aws`.
    #[serde(default)]
    pub group: String,
    /// `EC2NodeClass`.
    #[serde(default)]
    pub kind: String,
    /// The EC2NodeClass name.
    #[serde(default)]
    pub name: String,
}

/// When consolidation may act.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsolidationPolicy {
    /// Only empty nodes are removed.
    WhenEmpty,
    /// Empty nodes are removed and under-used ones replaced.
    #[default]
    WhenEmptyOrUnderutilized,
}

/// `spec.disruption`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// What consolidation may do.
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    /// How long a node must stay consolidatable before it is acted on (default 0s).
    #[serde(default = "zero_duration")]
    pub consolidate_after: NillableDuration,
    /// How many nodes may be disrupted at once (default: 10%).
    #[serde(default = "default_budgets")]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            consolidation_policy: ConsolidationPolicy::default(),
            consolidate_after: zero_duration(),
            budgets: default_budgets(),
        }
    }
}

fn zero_duration() -> NillableDuration {
    NillableDuration::After(std::time::Duration::ZERO)
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget {
        nodes: "10%".into(),
        schedule: None,
        duration: None,
        reasons: None,
    }]
}

/// Why a node is disrupted, as budgets name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DisruptionReason {
    /// Replaced by cheaper capacity.
    Underutilized,
    /// Removed as empty.
    Empty,
    /// Out of date with its NodePool or EC2NodeClass.
    Drifted,
}

/// One disruption budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// A count (`5`) or a percentage (`10%`) of the pool's nodes.
    pub nodes: String,
    /// A cron schedule in UTC when the budget is active (with `duration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// How long the budget is active after each scheduled start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<NillableDuration>,
    /// The reasons the budget limits; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<DisruptionReason>>,
}

/// How many nodes a budget allows, before applying it to a pool's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetNodes {
    /// A fixed count.
    Count(u32),
    /// A percentage of the pool's nodes, rounded up as Karpenter does.
    Percent(u32),
}

impl Budget {
    /// Parses `nodes` (`5` or `10%`).
    pub fn parsed_nodes(&self) -> Result<BudgetNodes, String> {
        let bad = || {
            format!(
                "invalid nodes {:?}; write a count such as 5 or a percentage such as 10%",
                self.nodes
            )
        };
        match self.nodes.strip_suffix('%') {
            Some(p) => match p.parse::<u32>() {
                Ok(p) if p <= 100 => Ok(BudgetNodes::Percent(p)),
                _ => Err(bad()),
            },
            None => self.nodes.parse().map(BudgetNodes::Count).map_err(|_| bad()),
        }
    }
}

/// Label keys a NodePool may not set or require: they are Carpool's to set.
const RESTRICTED_LABELS: &[&str] = &[well_known::NODEPOOL, well_known::HOSTNAME];

pub(crate) fn validate_taints(taints: &[Taint], path: &str) -> Result<(), ManifestError> {
    for (i, t) in taints.iter().enumerate() {
        if t.key.is_empty() {
            return Err(ManifestError::at(format!("{path}[{i}].key"), "a taint needs a key"));
        }
        if !matches!(t.effect.as_str(), "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(ManifestError::at(
                format!("{path}[{i}].effect"),
                format!(
                    "unknown effect {:?}; use NoSchedule, PreferNoSchedule or NoExecute",
                    t.effect
                ),
            ));
        }
    }
    Ok(())
}

fn requirement_field(e: &RequirementError) -> &'static str {
    match e {
        RequirementError::UnknownOperator(_) | RequirementError::Syntax(_) => "operator",
        RequirementError::Values { .. } | RequirementError::NotInteger { .. } => "values",
        RequirementError::MinValues { .. } => "minValues",
    }
}

impl Validate for NodePool {
    fn validate(&self) -> Result<(), ManifestError> {
        if !self.api_version.is_empty() && self.api_version != NODEPOOL_API_VERSION {
            return Err(ManifestError::at(
                "apiVersion",
                format!(
                    "{:?} is not supported; Carpool reads {NODEPOOL_API_VERSION} (convert v1beta1 NodePools as Karpenter's v1 migration guide says)",
                    self.api_version
                ),
            ));
        }
        if !self.kind.is_empty() && self.kind != "NodePool" {
            return Err(ManifestError::at(
                "kind",
                format!("expected NodePool, found {:?}", self.kind),
            ));
        }
        if self.metadata.name.as_deref().unwrap_or_default().is_empty() {
            return Err(ManifestError::at("metadata.name", "a NodePool needs a name"));
        }
        let spec = &self.spec.template.spec;
        const REQ: &str = "spec.template.spec.requirements";
        for (i, r) in spec.requirements.iter().enumerate() {
            if RESTRICTED_LABELS.contains(&r.key.as_str()) {
                return Err(ManifestError::at(
                    format!("{REQ}[{i}].key"),
                    format!("label {:?} is restricted", r.key),
                ));
            }
        }
        Requirements::from_wire(&spec.requirements)
            .map_err(|(i, e)| ManifestError::at(format!("{REQ}[{i}].{}", requirement_field(&e)), e.to_string()))?;
        for key in self.spec.template.metadata.labels.keys() {
            if RESTRICTED_LABELS.contains(&key.as_str()) {
                return Err(ManifestError::at(
                    format!("spec.template.metadata.labels[{key}]"),
                    format!("label {key:?} is restricted"),
                ));
            }
        }
        validate_taints(&spec.taints, "spec.template.spec.taints")?;
        validate_taints(&spec.startup_taints, "spec.template.spec.startupTaints")?;
        let r = &spec.node_class_ref;
        for (field, v) in [("group", &r.group), ("kind", &r.kind), ("name", &r.name)] {
            if v.is_empty() {
                return Err(ManifestError::at(
                    format!("spec.template.spec.nodeClassRef.{field}"),
                    "required",
                ));
            }
        }
        if let Some(w) = self.spec.weight
            && !(1..=100).contains(&w)
        {
            return Err(ManifestError::at("spec.weight", format!("{w} is out of range 1–100")));
        }
        for (name, q) in &self.spec.limits {
            if q.is_negative() {
                return Err(ManifestError::at(format!("spec.limits.{name}"), "must not be negative"));
            }
        }
        for (i, b) in self.spec.disruption.budgets.iter().enumerate() {
            let path = format!("spec.disruption.budgets[{i}]");
            b.parsed_nodes()
                .map_err(|m| ManifestError::at(format!("{path}.nodes"), m))?;
            if b.schedule.is_some() != b.duration.is_some() {
                return Err(ManifestError::at(path, "schedule and duration must be set together"));
            }
            if let Some(s) = &b.schedule {
                let fields = s.split_whitespace().count();
                if !(fields == 5 || (fields == 1 && s.starts_with('@'))) {
                    return Err(ManifestError::at(
                        format!("{path}.schedule"),
                        format!("{s:?} is not a cron schedule; write five fields, e.g. \"0 9 * * mon-fri\", or @daily"),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl NodePool {
    /// The pool's name.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The pool's weight (0 when unset).
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// The pool's requirements, with its template labels as `In` requirements and the
    /// pool's own name as `karpenter.sh/nodepool`. Call on a validated pool.
    pub fn requirements(&self) -> Result<Requirements, ManifestError> {
        let mut out = Requirements::from_wire(&self.spec.template.spec.requirements)
            .map_err(|(i, e)| ManifestError::at(format!("spec.template.spec.requirements[{i}]"), e.to_string()))?;
        out.add_all(&Requirements::from_labels(&self.spec.template.metadata.labels));
        out.add(super::requirements::Requirement::in_values(
            well_known::NODEPOOL,
            [self.name()],
        ));
        Ok(out)
    }
}
