//! Karpenter's `karpenter.sh/v1` NodePool, read as users write it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::duration::NillableDuration;
use super::label_syntax;
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
    /// Karpenter's alpha static capacity: when set, the pool keeps this many nodes
    /// whatever the pods ask for, and launches none for pending pods; consolidation leaves
    /// it alone ([`NodePool::replicas`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
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
    /// As `WhenEmptyOrUnderutilized`, but a move must also score at least `1/k`: its
    /// savings as a share of the pool's cost over its disruption as a share of the pool's
    /// disruption cost (Karpenter's `ScoreMove`). Karpenter fixes `k` at [`BALANCED_K`];
    /// Carpool reads it from the pool's [`CONSOLIDATION_THRESHOLD_ANNOTATION`].
    Balanced,
}

/// Karpenter's `k` for `Balanced` (`v1.BalancedK` in kubernetes-sigs/karpenter
/// `pkg/apis/v1/nodepool.go`, a constant in v1.15): a move must score at least 0.5. The
/// default of [`CONSOLIDATION_THRESHOLD_ANNOTATION`].
pub const BALANCED_K: u32 = 2;

/// NodePool annotation, Carpool's own: `Balanced`'s `k`, an integer of at least 1 (default
/// [`BALANCED_K`]); a move must score at least `1/k`. Karpenter's API has no such field (a
/// `spec.disruption.consolidationThreshold` would be pruned by the apiserver), hence an
/// annotation.
pub const CONSOLIDATION_THRESHOLD_ANNOTATION: &str = "carpool.sh/consolidation-threshold";

/// NodePool annotation: the least share of the removed nodes' cost, in percent, that a
/// consolidation must save (default [`DEFAULT_MIN_SAVINGS_PERCENT`]).
pub const MIN_SAVINGS_PERCENT_ANNOTATION: &str = "carpool.sh/consolidation-min-savings-percent";
/// NodePool annotation: the least USD per hour a consolidation must save (default
/// [`DEFAULT_MIN_SAVINGS_PER_HOUR`]).
pub const MIN_SAVINGS_PER_HOUR_ANNOTATION: &str = "carpool.sh/consolidation-min-savings-per-hour";
/// NodePool annotation: `"true"` lets consolidation move pods that no controller owns.
pub const DISRUPT_BARE_PODS_ANNOTATION: &str = "carpool.sh/disrupt-bare-pods";
/// NodePool annotation, Carpool's own: keep the pool's new capacity balanced across zones
/// without a topology spread on every workload. Its value is the price tolerance, a
/// percentage (`"10%"` or `"10"`; `"true"` is `"0%"`): a new node goes to the zone where
/// the pool has the fewest nodes, among the zones whose price for the node is within that
/// tolerance of the cheapest; consolidation never leaves the pool's zones further apart
/// than one node, or further apart than they were. See [`NodePool::zone_balance`].
pub const ZONE_BALANCE_ANNOTATION: &str = "carpool.sh/zone-balance";
/// Default least saving, as a share of the cost removed.
pub const DEFAULT_MIN_SAVINGS_PERCENT: f64 = 10.0;
/// Default least saving in USD per hour.
pub const DEFAULT_MIN_SAVINGS_PER_HOUR: f64 = 0.01;

/// What a consolidation must save in a NodePool, from its annotations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SavingsThreshold {
    /// Percent of the cost of the nodes removed.
    pub percent: f64,
    /// USD per hour.
    pub per_hour: f64,
}

impl SavingsThreshold {
    /// The saving required when nodes costing `removed_per_hour` go.
    pub fn required(&self, removed_per_hour: f64) -> f64 {
        (removed_per_hour * self.percent / 100.0).max(self.per_hour)
    }
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
    /// Repaired: unhealthy past its repair policy's toleration (Karpenter v1.15 paces
    /// node repair through the budgets, `DisruptionReasonUnhealthy`).
    Unhealthy,
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

/// Parses a budget's `schedule` as Karpenter does: five fields in UTC (minute, hour, day of
/// month, month, day of week), or `@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`
/// (robfig/cron's standard parser, which Karpenter's `Budget.IsActive` uses).
pub fn parse_schedule(schedule: &str) -> Result<croner::Cron, String> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .build()
        .parse(schedule)
        .map_err(|e| {
            format!("{schedule:?} is not a cron schedule ({e}); write five fields, e.g. \"0 9 * * mon-fri\", or @daily")
        })
}

/// Label keys a NodePool may not set or require: they are Carpool's to set.
const RESTRICTED_LABELS: &[&str] = &[well_known::NODEPOOL, well_known::HOSTNAME];

/// Label domains a NodePool may not set or require a key of, unless the key is well
/// known, and the subdomains excepted from them: Karpenter's `RestrictedLabelDomains` and
/// `LabelDomainExceptions` (kubernetes-sigs/karpenter `pkg/apis/v1/labels.go`, with the
/// AWS provider's `karpenter.k8s.aws`). Such labels are the kubelet's, the cloud
/// provider's or another tool's to set; the kubelet's NodeRestriction would refuse most.
const RESTRICTED_DOMAINS: &[&str] = &["kubernetes.io", "k8s.io", "karpenter.sh", "karpenter.k8s.aws"];
const DOMAIN_EXCEPTIONS: &[&str] = &["kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io"];

/// The restricted domain a label key is in, when it is not well known
/// (Karpenter's `IsRestrictedLabel`).
fn restricted_domain(key: &str) -> Option<&'static str> {
    if well_known::is_well_known(key) {
        return None;
    }
    let (domain, _) = key.split_once('/')?;
    if DOMAIN_EXCEPTIONS.iter().any(|e| domain.ends_with(e)) {
        return None;
    }
    RESTRICTED_DOMAINS.iter().copied().find(|d| domain.ends_with(d))
}

fn check_domain(key: &str, path: String) -> Result<(), ManifestError> {
    match restricted_domain(key) {
        Some(domain) => Err(ManifestError::at(
            path,
            format!(
                "label domain {domain:?} is restricted ({key:?} is not a well-known label); use a domain of your own"
            ),
        )),
        None => Ok(()),
    }
}

pub(crate) fn validate_taints(taints: &[Taint], path: &str) -> Result<(), ManifestError> {
    for (i, t) in taints.iter().enumerate() {
        if t.key.is_empty() {
            return Err(ManifestError::at(format!("{path}[{i}].key"), "a taint needs a key"));
        }
        label_syntax::taint(t).map_err(|e| ManifestError::at(format!("{path}[{i}]"), e.to_string()))?;
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
        RequirementError::Values { .. } | RequirementError::NotInteger { .. } | RequirementError::Label(_) => "values",
        RequirementError::MinValues { .. } => "minValues",
    }
}

impl Validate for NodePool {
    fn validate(&self) -> Result<(), ManifestError> {
        crate::model::manifest::check_type_meta(
            &self.api_version,
            &self.kind,
            NODEPOOL_API_VERSION,
            "NodePool",
            " (convert v1beta1 NodePools as Karpenter's v1 migration guide says)",
        )?;
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
            // Each value may become the node's label (Karpenter's `ValidateRequirement`
            // checks key and values with the apiserver's label rules).
            label_syntax::label_key(&r.key).map_err(|e| ManifestError::at(format!("{REQ}[{i}].key"), e.to_string()))?;
            check_domain(&r.key, format!("{REQ}[{i}].key"))?;
            for v in &r.values {
                label_syntax::label_value(&r.key, v)
                    .map_err(|e| ManifestError::at(format!("{REQ}[{i}].values"), e.to_string()))?;
            }
        }
        Requirements::from_wire(&spec.requirements)
            .map_err(|(i, e)| ManifestError::at(format!("{REQ}[{i}].{}", requirement_field(&e)), e.to_string()))?;
        for (key, value) in &self.spec.template.metadata.labels {
            if RESTRICTED_LABELS.contains(&key.as_str()) {
                return Err(ManifestError::at(
                    format!("spec.template.metadata.labels[{key}]"),
                    format!("label {key:?} is restricted"),
                ));
            }
            label_syntax::label(key, value)
                .map_err(|e| ManifestError::at(format!("spec.template.metadata.labels[{key}]"), e.to_string()))?;
            check_domain(key, format!("spec.template.metadata.labels[{key}]"))?;
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
        self.consolidation_threshold()?;
        self.savings_threshold()?;
        self.zone_balance()?;
        // Karpenter's CEL rules on a static NodePool (`pkg/apis/v1/nodepool.go`).
        if let Some(r) = self.spec.replicas {
            if r < 0 {
                return Err(ManifestError::at("spec.replicas", format!("{r} is below 0")));
            }
            if self.spec.limits.keys().any(|k| k != "nodes") {
                return Err(ManifestError::at(
                    "spec.limits",
                    "only 'limits.nodes' is supported on static NodePools",
                ));
            }
            if self.spec.weight.is_some() {
                return Err(ManifestError::at(
                    "spec.weight",
                    "'weight' is not supported on static NodePools",
                ));
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
                parse_schedule(s).map_err(|m| ManifestError::at(format!("{path}.schedule"), m))?;
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

    /// `spec.template.spec.terminationGracePeriod`: how long a draining node of this pool
    /// may wait for its pods before it goes whatever they say; `None` when unset (or
    /// `Never`): it waits for them.
    pub fn termination_grace_period(&self) -> Option<std::time::Duration> {
        match self.spec.template.spec.termination_grace_period {
            Some(super::duration::NillableDuration::After(d)) => Some(d),
            _ => None,
        }
    }

    /// What a consolidation in this pool must save: its
    /// [`MIN_SAVINGS_PERCENT_ANNOTATION`] and [`MIN_SAVINGS_PER_HOUR_ANNOTATION`], or the
    /// defaults. A value that is not a non-negative number is an error naming the annotation.
    pub fn savings_threshold(&self) -> Result<SavingsThreshold, ManifestError> {
        let read = |key: &str, default: f64| -> Result<f64, ManifestError> {
            match self.metadata.annotations.as_ref().and_then(|a| a.get(key)) {
                None => Ok(default),
                Some(v) => match v.trim().parse::<f64>() {
                    Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
                    _ => Err(ManifestError::at(
                        format!("metadata.annotations[{key}]"),
                        format!("{v:?} is not a non-negative number; write e.g. \"10\" or \"0.01\""),
                    )),
                },
            }
        };
        Ok(SavingsThreshold {
            percent: read(MIN_SAVINGS_PERCENT_ANNOTATION, DEFAULT_MIN_SAVINGS_PERCENT)?,
            per_hour: read(MIN_SAVINGS_PER_HOUR_ANNOTATION, DEFAULT_MIN_SAVINGS_PER_HOUR)?,
        })
    }

    /// `Balanced`'s `k`: the pool's [`CONSOLIDATION_THRESHOLD_ANNOTATION`], or
    /// [`BALANCED_K`]. A value that is not an integer of at least 1 is an error naming the
    /// annotation.
    pub fn consolidation_threshold(&self) -> Result<u32, ManifestError> {
        let key = CONSOLIDATION_THRESHOLD_ANNOTATION;
        match self.metadata.annotations.as_ref().and_then(|a| a.get(key)) {
            None => Ok(BALANCED_K),
            Some(v) => match v.trim().parse::<u32>() {
                Ok(k) if k >= 1 => Ok(k),
                _ => Err(ManifestError::at(
                    format!("metadata.annotations[{key}]"),
                    format!(
                        "{v:?} is not an integer of at least 1; write e.g. \"2\" (a Balanced move must score at least 1/k)"
                    ),
                )),
            },
        }
    }

    /// The price tolerance of the pool's zone balance, as a fraction (0.1 for `"10%"`), when
    /// its [`ZONE_BALANCE_ANNOTATION`] asks for one; `None` when it is absent or `"false"`.
    /// A value that is not `true`, `false` or a percentage from 0 to 100 is an error naming
    /// the annotation.
    pub fn zone_balance(&self) -> Result<Option<f64>, ManifestError> {
        let key = ZONE_BALANCE_ANNOTATION;
        let Some(v) = self.metadata.annotations.as_ref().and_then(|a| a.get(key)) else {
            return Ok(None);
        };
        let t = v.trim();
        match t {
            "false" => return Ok(None),
            "true" => return Ok(Some(0.0)),
            _ => {}
        }
        match t.strip_suffix('%').unwrap_or(t).trim().parse::<f64>() {
            Ok(x) if x.is_finite() && (0.0..=100.0).contains(&x) => Ok(Some(x / 100.0)),
            _ => Err(ManifestError::at(
                format!("metadata.annotations[{key}]"),
                format!(
                    "{v:?} is not a price tolerance; write a percentage from 0 to 100 such as \"10%\", or \"true\" (0%)"
                ),
            )),
        }
    }

    /// Whether consolidation may move pods no controller owns (annotation
    /// [`DISRUPT_BARE_PODS_ANNOTATION`] `"true"`).
    pub fn disrupts_bare_pods(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DISRUPT_BARE_PODS_ANNOTATION))
            .is_some_and(|v| v == "true")
    }

    /// The nodes a static pool keeps (`spec.replicas`), `None` for a pool that scales with
    /// its pods.
    pub fn replicas(&self) -> Option<usize> {
        self.spec.replicas.map(|r| usize::try_from(r).unwrap_or(0))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::manifest::from_yaml;

    #[test]
    fn zone_balance_reads_a_percentage_true_or_false_and_names_a_bad_value() {
        let read = |a: &str| from_yaml::<NodePool>(&pool(a, "{}")).map(|p| p.zone_balance());
        assert_eq!(read("{}").unwrap(), Ok(None));
        assert_eq!(read("{carpool.sh/zone-balance: \"10%\"}").unwrap(), Ok(Some(0.1)));
        assert_eq!(read("{carpool.sh/zone-balance: \" 5 \"}").unwrap(), Ok(Some(0.05)));
        assert_eq!(read("{carpool.sh/zone-balance: \"true\"}").unwrap(), Ok(Some(0.0)));
        assert_eq!(read("{carpool.sh/zone-balance: \"false\"}").unwrap(), Ok(None));
        for bad in ["\"yes\"", "\"150%\"", "\"-1\""] {
            let err = from_yaml::<NodePool>(&pool(&format!("{{carpool.sh/zone-balance: {bad}}}"), "{}")).unwrap_err();
            assert_eq!(err.path, "metadata.annotations[carpool.sh/zone-balance]", "{bad}");
        }
    }

    fn pool(annotations: &str, disruption: &str) -> String {
        format!(
            "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: balanced
  annotations: {annotations}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  disruption: {disruption}
"
        )
    }

    #[test]
    fn balanced_k_is_karpenters_unless_the_annotation_sets_it() {
        let default: NodePool = from_yaml(&pool("{}", "{consolidationPolicy: Balanced}")).unwrap();
        assert_eq!(
            default.spec.disruption.consolidation_policy,
            ConsolidationPolicy::Balanced
        );
        assert_eq!(default.consolidation_threshold(), Ok(BALANCED_K));
        let set: NodePool = from_yaml(&pool(
            "{carpool.sh/consolidation-threshold: \"4\"}",
            "{consolidationPolicy: Balanced}",
        ))
        .unwrap();
        assert_eq!(set.consolidation_threshold(), Ok(4));
        let one: NodePool = from_yaml(&pool("{carpool.sh/consolidation-threshold: \" 1 \"}", "{}")).unwrap();
        assert_eq!(one.consolidation_threshold(), Ok(1));
    }

    #[test]
    fn a_threshold_that_is_not_an_integer_of_at_least_one_makes_the_pool_invalid() {
        for bad in ["\"0\"", "\"-2\"", "\"1.5\"", "\"two\"", "\"\""] {
            let err = from_yaml::<NodePool>(&pool(
                &format!("{{carpool.sh/consolidation-threshold: {bad}}}"),
                "{consolidationPolicy: Balanced}",
            ))
            .unwrap_err();
            assert_eq!(
                err.path, "metadata.annotations[carpool.sh/consolidation-threshold]",
                "{bad}: {err}"
            );
            assert!(err.message.contains("integer of at least 1"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_old_spec_field_is_not_read() {
        // Karpenter's NodePool has no `spec.disruption.consolidationThreshold` (the apiserver
        // prunes it); like any unknown field it is ignored, and k stays Karpenter's.
        let p: NodePool = from_yaml(&pool(
            "{}",
            "{consolidationPolicy: Balanced, consolidationThreshold: 5}",
        ))
        .unwrap();
        assert_eq!(p.consolidation_threshold(), Ok(BALANCED_K));
    }
}
