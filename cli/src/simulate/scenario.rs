//! A scenario file: the workload, the NodePools and EC2NodeClasses, the node groups of
//! the Cluster Autoscaler baseline, and the world's rates (boot time, spot interruptions,
//! capacity errors). The format is documented in `examples/scenarios/README.md`.

use std::collections::BTreeMap;
use std::path::Path;

use carpool::model::Resources;
use carpool::model::{CapacityType, Quantity};
use serde::Deserialize;
use serde_json::Value;

/// A scenario that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file cannot be read.
    #[error("cannot read scenario {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The YAML does not match the format.
    #[error("scenario {path}: {message} (see examples/scenarios/README.md for the format)")]
    Format {
        /// The path.
        path: String,
        /// What serde says, with the field's path.
        message: String,
    },
    /// A value is out of range or names something that does not exist.
    #[error("scenario {path}: {message}")]
    Invalid {
        /// The path.
        path: String,
        /// What is wrong, and how to fix it.
        message: String,
    },
}

/// Requests of one pod.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requests {
    /// CPU (`500m`, `2`).
    #[serde(deserialize_with = "quantity_text")]
    pub cpu: String,
    /// Memory (`1Gi`).
    #[serde(deserialize_with = "quantity_text")]
    pub memory: String,
    /// NVIDIA GPUs.
    #[serde(default)]
    pub gpu: u32,
}

/// A quantity written as a string (`500m`) or a bare number (`2`, `0.5`).
fn quantity_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        S(String),
        I(i64),
        F(f64),
    }
    Ok(match Text::deserialize(d)? {
        Text::S(s) => s,
        Text::I(i) => i.to_string(),
        Text::F(f) => f.to_string(),
    })
}

impl Requests {
    /// As resources (one pod slot included).
    pub fn resources(&self) -> Result<Resources, String> {
        let cpu: Quantity = self.cpu.parse().map_err(|e| format!("cpu {:?}: {e}", self.cpu))?;
        let memory: Quantity = self
            .memory
            .parse()
            .map_err(|e| format!("memory {:?}: {e}", self.memory))?;
        let mut r = Resources {
            cpu_millis: cpu.millis_ceil(),
            memory: memory.units_ceil(),
            pods: 1,
            ..Resources::default()
        };
        if self.gpu > 0 {
            r.set(GPU, i64::from(self.gpu));
        }
        Ok(r)
    }
}

/// The extended resource of NVIDIA GPUs.
pub const GPU: &str = "nvidia.com/gpu";

/// A replica count over time.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Replicas {
    /// Always this many.
    Constant(u32),
    /// From each `at_hour` on, `replicas` (the first step applies from hour 0).
    Steps(Vec<Step>),
    /// A day's curve: `min` at `peak_hour - 12`, `max` at `peak_hour`, a cosine between.
    Diurnal {
        /// The trough.
        min: u32,
        /// The peak.
        max: u32,
        /// The hour of the peak (UTC, 0-24).
        peak_hour: f64,
    },
}

/// One step of [`Replicas::Steps`].
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// From this hour of the simulation on.
    pub at_hour: f64,
    /// This many replicas.
    pub replicas: u32,
}

impl Replicas {
    /// How many replicas at `hour` of the simulation.
    pub fn at(&self, hour: f64) -> u32 {
        match self {
            Replicas::Constant(n) => *n,
            Replicas::Steps(steps) => steps
                .iter()
                .rfind(|s| s.at_hour <= hour)
                .or(steps.first())
                .map_or(0, |s| s.replicas),
            Replicas::Diurnal { min, max, peak_hour } => {
                let phase = (hour - peak_hour) / 24.0 * std::f64::consts::TAU;
                let share = (1.0 + phase.cos()) / 2.0;
                (f64::from(*min) + share * f64::from(max.saturating_sub(*min))).round() as u32
            }
        }
    }
}

/// A topology spread constraint over the workload's own pods (`app=<name>`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spread {
    /// `topology.kubernetes.io/zone` or `kubernetes.io/hostname`.
    pub topology_key: String,
    /// `maxSkew`.
    #[serde(default = "one")]
    pub max_skew: i32,
    /// `DoNotSchedule` (hard, the default) or `ScheduleAnyway`.
    #[serde(default = "do_not_schedule")]
    pub when_unsatisfiable: String,
}

fn one() -> i32 {
    1
}

fn do_not_schedule() -> String {
    "DoNotSchedule".into()
}

/// A required node-affinity requirement.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    /// The label.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub operator: String,
    /// The values.
    #[serde(default)]
    pub values: Vec<String>,
}

/// A toleration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toleration {
    /// The taint key (empty with `Exists`: every taint).
    #[serde(default)]
    pub key: String,
    /// `Equal` (the default) or `Exists`.
    #[serde(default)]
    pub operator: Option<String>,
    /// The value, for `Equal`.
    #[serde(default)]
    pub value: Option<String>,
    /// The effect (empty: every effect).
    #[serde(default)]
    pub effect: Option<String>,
}

/// A PodDisruptionBudget over the workload's pods.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pdb {
    /// `minAvailable`: an integer or a percentage.
    #[serde(default)]
    pub min_available: Option<Value>,
    /// `maxUnavailable`: an integer or a percentage.
    #[serde(default)]
    pub max_unavailable: Option<Value>,
}

/// What every pod of a Deployment or a Job looks like.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodTemplate {
    /// Requests.
    pub requests: Requests,
    /// `nodeSelector`.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity (one term, its requirements ANDed).
    #[serde(default)]
    pub node_affinity: Vec<Requirement>,
    /// Tolerations.
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// Topology spread constraints over the workload's pods.
    #[serde(default)]
    pub spread: Vec<Spread>,
    /// Required pod anti-affinity to the workload's own pods, over this topology key.
    #[serde(default)]
    pub anti_affinity: Option<String>,
    /// `karpenter.sh/do-not-disrupt: "true"` on the pods.
    #[serde(default)]
    pub do_not_disrupt: bool,
}

/// A Deployment.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    /// Its name (and the `app` label of its pods).
    pub name: String,
    /// Its namespace.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Its replicas over time.
    #[serde(with = "serde_yaml_ng::with::singleton_map")]
    pub replicas: Replicas,
    /// Its pods.
    #[serde(flatten)]
    pub pod: PodTemplate,
    /// Its PDB.
    #[serde(default)]
    pub pdb: Option<Pdb>,
}

fn default_namespace() -> String {
    "default".into()
}

/// Batch Jobs arriving over time.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// The name (each arrival is `<name>-<n>`).
    pub name: String,
    /// The namespace.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The first arrival, in hours from the start.
    pub first_at_hour: f64,
    /// Hours between arrivals (absent: one arrival).
    #[serde(default)]
    pub every_hours: Option<f64>,
    /// Pods per arrival (they run at once).
    pub parallelism: u32,
    /// How long each pod runs once bound, in minutes.
    pub duration_minutes: f64,
    /// Its pods.
    #[serde(flatten)]
    pub pod: PodTemplate,
}

/// A node group of the Cluster Autoscaler baseline: one instance type, one capacity type.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeGroup {
    /// The name.
    pub name: String,
    /// The instance type.
    pub instance_type: String,
    /// `on-demand` (the default) or `spot`.
    #[serde(default = "on_demand")]
    pub capacity_type: String,
    /// The labels its nodes carry.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The taints its nodes carry (`key=value:Effect`).
    #[serde(default)]
    pub taints: Vec<String>,
    /// The most nodes it may have.
    #[serde(default = "hundred")]
    pub max: u32,
}

fn on_demand() -> String {
    "on-demand".into()
}

fn hundred() -> u32 {
    100
}

/// A spot pool's interruption rate.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolRate {
    /// The instance type (absent: every type).
    #[serde(default)]
    pub instance_type: Option<String>,
    /// The zone (absent: every zone).
    #[serde(default)]
    pub zone: Option<String>,
    /// Interruptions per instance-hour.
    pub per_hour: f64,
}

/// An offering out of capacity for a while.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacityOutage {
    /// The instance type.
    pub instance_type: String,
    /// The zone (absent: every zone of the region).
    #[serde(default)]
    pub zone: Option<String>,
    /// `spot` (the default) or `on-demand`.
    #[serde(default = "spot")]
    pub capacity_type: String,
    /// From this hour.
    #[serde(default)]
    pub from_hour: f64,
    /// To this hour (absent: the end).
    #[serde(default)]
    pub to_hour: Option<f64>,
}

fn spot() -> String {
    "spot".into()
}

/// The simulated world's rates.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorldSpec {
    /// Seconds from launch to a Ready Node: uniform between these two.
    #[serde(default = "boot")]
    pub boot_seconds: [f64; 2],
    /// Spot interruptions per instance-hour, unless a pool says otherwise.
    #[serde(default)]
    pub spot_interruptions_per_hour: f64,
    /// Per-pool rates (the first that matches).
    #[serde(default)]
    pub spot_pools: Vec<PoolRate>,
    /// Offerings out of capacity.
    #[serde(default)]
    pub capacity_errors: Vec<CapacityOutage>,
}

fn boot() -> [f64; 2] {
    [45.0, 90.0]
}

impl Default for WorldSpec {
    fn default() -> Self {
        WorldSpec {
            boot_seconds: boot(),
            spot_interruptions_per_hour: 0.0,
            spot_pools: Vec::new(),
            capacity_errors: Vec::new(),
        }
    }
}

/// A scenario.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// What it shows.
    #[serde(default)]
    pub description: String,
    /// Hours simulated unless `--hours` says otherwise.
    #[serde(default = "day")]
    pub hours: f64,
    /// Where the clock starts (RFC 3339, UTC); the diurnal curves are in this day's hours.
    #[serde(default = "midnight")]
    pub start: String,
    /// The world.
    #[serde(default)]
    pub world: WorldSpec,
    /// Deployments.
    #[serde(default)]
    pub deployments: Vec<Deployment>,
    /// Jobs.
    #[serde(default)]
    pub jobs: Vec<Job>,
    /// Karpenter `karpenter.sh/v1` NodePools, as written for Karpenter.
    pub nodepools: Vec<Value>,
    /// Karpenter `karpenter.k8s.aws/v1` EC2NodeClasses.
    pub ec2nodeclasses: Vec<Value>,
    /// Karpenter `karpenter.sh/v1alpha1` NodeOverlays: the prices the user pays, for every
    /// strategy (optional).
    #[serde(default)]
    pub nodeoverlays: Vec<Value>,
    /// The node groups of the Cluster Autoscaler baseline.
    pub node_groups: Vec<NodeGroup>,
}

fn day() -> f64 {
    24.0
}

fn midnight() -> String {
    "2026-12-01T00:00:00Z".into()
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&shown, &text)
    }

    /// Reads and checks a scenario's text.
    pub fn parse(path: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let scenario: Scenario = serde_path_to_error::deserialize(de).map_err(|e| ScenarioError::Format {
            path: path.to_string(),
            message: e.inner().to_string(),
        })?;
        scenario.validate().map_err(|message| ScenarioError::Invalid {
            path: path.to_string(),
            message,
        })?;
        Ok(scenario)
    }

    fn validate(&self) -> Result<(), String> {
        if self.deployments.is_empty() && self.jobs.is_empty() {
            return Err("no deployments and no jobs: add at least one workload".into());
        }
        if self.nodepools.is_empty() || self.ec2nodeclasses.is_empty() {
            return Err("needs at least one NodePool and one EC2NodeClass".into());
        }
        if self.node_groups.is_empty() {
            return Err("needs at least one entry in node_groups (the Cluster Autoscaler baseline)".into());
        }
        if self.hours.is_nan() || self.hours <= 0.0 {
            return Err(format!("hours must be above 0, not {}", self.hours));
        }
        let [lo, hi] = self.world.boot_seconds;
        if !(lo >= 0.0 && hi >= lo) {
            return Err(format!(
                "world.boot_seconds must be [min, max] with 0 <= min <= max, not [{lo}, {hi}]"
            ));
        }
        if self.start.parse::<jiff::Timestamp>().is_err() {
            return Err(format!(
                "start {:?} is not an RFC 3339 time such as 2026-12-01T00:00:00Z",
                self.start
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (name, pod) in self
            .deployments
            .iter()
            .map(|d| (&d.name, &d.pod))
            .chain(self.jobs.iter().map(|j| (&j.name, &j.pod)))
        {
            if !names.insert(name.clone()) {
                return Err(format!("two workloads are named {name:?}: names must differ"));
            }
            pod.requests.resources().map_err(|e| format!("workload {name}: {e}"))?;
            for s in &pod.spread {
                if !matches!(s.when_unsatisfiable.as_str(), "DoNotSchedule" | "ScheduleAnyway") || s.max_skew < 1 {
                    return Err(format!(
                        "workload {name}: a spread needs max_skew >= 1 and when_unsatisfiable DoNotSchedule or ScheduleAnyway"
                    ));
                }
            }
            for r in &pod.node_affinity {
                if !matches!(r.operator.as_str(), "In" | "NotIn" | "Exists" | "DoesNotExist") {
                    return Err(format!(
                        "workload {name}: node_affinity operator {:?} is not In, NotIn, Exists or DoesNotExist",
                        r.operator
                    ));
                }
            }
        }
        for d in &self.deployments {
            let ok = match &d.replicas {
                Replicas::Constant(n) => *n <= MAX_PODS,
                Replicas::Steps(steps) => {
                    !steps.is_empty() && steps.iter().all(|s| s.at_hour.is_finite() && s.replicas <= MAX_PODS)
                }
                Replicas::Diurnal { min, max, peak_hour } => min <= max && *max <= MAX_PODS && peak_hour.is_finite(),
            };
            if !ok {
                return Err(format!(
                    "deployment {}: replicas must be at most {MAX_PODS}, steps a non-empty list with finite at_hour, diurnal min <= max with a finite peak_hour",
                    d.name
                ));
            }
        }
        for j in &self.jobs {
            if !j.first_at_hour.is_finite()
                || j.first_at_hour < 0.0
                || j.parallelism > MAX_PODS
                || j.every_hours.is_some_and(|e| e < 1.0 / 60.0)
            {
                return Err(format!(
                    "job {}: first_at_hour must be a finite hour >= 0, parallelism at most {MAX_PODS}, every_hours at least a minute (0.0167)",
                    j.name
                ));
            }
        }
        for j in &self.jobs {
            if j.parallelism == 0
                || j.duration_minutes.is_nan()
                || j.duration_minutes <= 0.0
                || j.every_hours.is_some_and(|e| e.is_nan() || e <= 0.0)
            {
                return Err(format!(
                    "job {}: parallelism and duration_minutes must be above 0, and every_hours too when set",
                    j.name
                ));
            }
        }
        for g in &self.node_groups {
            capacity_type(&g.capacity_type).map_err(|e| format!("node group {}: {e}", g.name))?;
            for t in &g.taints {
                parse_taint(t).map_err(|e| format!("node group {}: {e}", g.name))?;
            }
        }
        for o in &self.world.capacity_errors {
            capacity_type(&o.capacity_type).map_err(|e| format!("capacity error {}: {e}", o.instance_type))?;
        }
        Ok(())
    }
}

/// The most replicas, or pods per Job arrival, a scenario may ask for.
const MAX_PODS: u32 = 20_000;

/// `spot` or `on-demand`.
pub fn capacity_type(text: &str) -> Result<CapacityType, String> {
    match text {
        "spot" => Ok(CapacityType::Spot),
        "on-demand" => Ok(CapacityType::OnDemand),
        other => Err(format!("capacity type {other:?} is neither spot nor on-demand")),
    }
}

/// `key=value:Effect` or `key:Effect`.
pub fn parse_taint(text: &str) -> Result<(String, Option<String>, String), String> {
    let (kv, effect) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("taint {text:?} is not key=value:Effect"))?;
    if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        return Err(format!(
            "taint {text:?}: effect {effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    Ok(match kv.split_once('=') {
        Some((k, v)) => (k.to_string(), Some(v.to_string()), effect.to_string()),
        None => (kv.to_string(), None, effect.to_string()),
    })
}
