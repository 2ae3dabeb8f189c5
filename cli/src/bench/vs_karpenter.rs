//! `carpool bench karpenter-world`: the world that Carpool and the real Karpenter (its
//! kwok cloud provider, `sigs.k8s.io/karpenter/kwok`) are measured in, side by side.
//!
//! - **The instance-types file** (`--out`), which Karpenter's kwok provider reads from
//!   `INSTANCE_TYPES_FILE_PATH` (`kwok/cloudprovider/helpers.go`, `InstanceTypeOptions`):
//!   per type its name, architecture, operating systems, `resources` (the capacity) and
//!   offerings (`Price`, `Available`, `Requirements` on zone and capacity type). The types
//!   are the embedded catalog's in us-east-1 that the benchmark's NodePools can choose
//!   ([`world_types`]: c, m and r of generation 5 and later, and the g4dn, g5 and g6 GPU
//!   families), in the zones the local stack has subnets in ([`ZONES`]), at Carpool's
//!   on-demand and spot prices. kwok gives every type the overhead
//!   [`KWOK_KUBE_RESERVED_CPU_MILLIS`] and [`KWOK_KUBE_RESERVED_MEMORY`] (`newInstanceType`),
//!   and a node's allocatable is capacity less that overhead; so the capacity written is
//!   Carpool's allocatable (`catalog::allocatable` with the default node settings, what the
//!   kubelet harness registers) plus that overhead, and the two autoscalers see the same
//!   room on every type.
//! - **The manifests** (`--scenario` and `--manifests`): from a `carpool simulate`
//!   scenario, the workload at its peak (`workload.yaml`: namespaces, one Deployment per
//!   Deployment of the scenario at its most replicas, one per Job at its parallelism, each
//!   annotated with its replicas after the consolidation phase's scale-down
//!   ([`scale_down_to`]), and a PDB for each: the scenario's, or `maxUnavailable: 1`), the
//!   scenario's NodePools, both with the same disruption settings
//!   (`WhenEmptyOrUnderutilized` after [`CONSOLIDATE_AFTER`], the scenario's budgets), for Karpenter (`karpenter.yaml`: each pool's
//!   `karpenter.k8s.aws/*` requirements, which kwok's types do not carry, replaced by
//!   `node.kubernetes.io/instance-type In` the types they allow, and its `nodeClassRef` a
//!   KWOKNodeClass) and for Carpool (`carpool.yaml`: the pools as written, each with an
//!   EC2NodeClass of its name on the local stack's subnets).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use carpool::catalog::RegionCatalog;
use carpool::catalog::allocatable::{NodeSettings, allocatable, capacity};
use carpool::model::requirements::{NodeSelectorRequirement, Requirements};
use carpool::model::{CapacityType, InstanceType, Resources};
use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The CPU kwok's provider reserves on every type (`KubeReserved` in `newInstanceType`).
pub const KWOK_KUBE_RESERVED_CPU_MILLIS: i64 = 100;
/// The memory kwok's provider reserves on every type (10Mi).
pub const KWOK_KUBE_RESERVED_MEMORY: i64 = 10 << 20;
/// The zones of the world: those the local stack's seed gives subnets in (Carpool can
/// launch nowhere else there).
pub const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
/// The GPU families of the world.
pub const GPU_FAMILIES: [&str; 3] = ["g4dn", "g5", "g6"];
/// The largest types of the world (the benchmark's NodePools allow up to 32 vCPUs, some
/// none of the limit; 64 keeps the file, and Karpenter's start, small).
pub const MAX_VCPU: u32 = 64;
/// The KWOKNodeClass every Karpenter NodePool of the benchmark refers to.
pub const KWOK_NODE_CLASS: &str = "default";
/// The label every pod of the workload carries, so the measurement finds them.
pub const BENCH_LABEL: &str = "carpool.sh/bench";
/// The annotation on each Deployment of the workload: its replicas in the consolidation
/// phase, after the scale-down ([`scale_down_to`]).
pub const SCALE_DOWN_ANNOTATION: &str = "carpool.sh/bench-scale-down-to";
/// Both autoscalers' NodePools consolidate `WhenEmptyOrUnderutilized` this long after a
/// node's pods last changed (the scenario's own `consolidateAfter` is replaced: the
/// benchmark's consolidation phase is bounded to minutes).
pub const CONSOLIDATE_AFTER: &str = "10s";

/// Arguments of `carpool bench karpenter-world`.
#[derive(Args, Debug)]
pub struct WorldArgs {
    /// Where to write Karpenter's instance-types file (JSON).
    #[arg(long)]
    out: PathBuf,
    /// A `carpool simulate` scenario whose workload and NodePools to write as manifests.
    #[arg(long, requires = "manifests")]
    scenario: Option<PathBuf>,
    /// The folder for the manifests (workload.yaml, karpenter.yaml, carpool.yaml).
    #[arg(long, requires = "scenario")]
    manifests: Option<PathBuf>,
}

/// One requirement as kwok's file writes it (Kubernetes' `NodeSelectorRequirement`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KwokRequirement {
    /// The label.
    pub key: String,
    /// `In`.
    pub operator: String,
    /// The values.
    pub values: Vec<String>,
}

/// One offering as kwok's file writes it (Go field names: `cloudprovider.Offering`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KwokOffering {
    /// $/h.
    pub price: f64,
    /// Always true (kwok sets it anyway).
    pub available: bool,
    /// Zone and capacity type.
    pub requirements: Vec<KwokRequirement>,
}

/// One instance type as kwok's file writes it (`InstanceTypeOptions`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KwokInstanceType {
    /// The type's name.
    pub name: String,
    /// Its offerings.
    pub offerings: Vec<KwokOffering>,
    /// `amd64` or `arm64`.
    pub architecture: String,
    /// `linux`.
    pub operating_systems: Vec<String>,
    /// The capacity, as Kubernetes quantities.
    pub resources: BTreeMap<String, String>,
}

impl KwokInstanceType {
    /// The price of one offering, if the type has it.
    #[cfg(test)]
    pub fn price(&self, zone: &str, capacity_type: &str) -> Option<f64> {
        self.offerings.iter().find_map(|o| {
            let has = |k: &str, v: &str| {
                o.requirements
                    .iter()
                    .any(|r| r.key == k && r.values.iter().any(|x| x == v))
            };
            (has("topology.kubernetes.io/zone", zone) && has("karpenter.sh/capacity-type", capacity_type))
                .then_some(o.price)
        })
    }
}

/// The allocatable Carpool's nodes of a type get (what the kubelet harness registers).
pub fn carpool_allocatable(it: &InstanceType) -> Resources {
    let settings = NodeSettings::default();
    allocatable(it, &capacity(it, &settings), &settings)
}

/// The capacity to write for Karpenter: Carpool's allocatable plus kwok's overhead.
pub fn kwok_capacity(it: &InstanceType) -> Resources {
    let mut c = carpool_allocatable(it);
    c.cpu_millis += KWOK_KUBE_RESERVED_CPU_MILLIS;
    c.memory += KWOK_KUBE_RESERVED_MEMORY;
    c
}

/// The types of the world: c, m and r of generation 5 and later, and the GPU families, of
/// at most [`MAX_VCPU`] vCPUs, not metal, offered on demand in the world's zones.
pub fn world_types<'a>(region: &RegionCatalog<'a>) -> Vec<&'a InstanceType> {
    let mut out: Vec<&InstanceType> = region
        .types()
        .iter()
        .copied()
        .filter(|t| {
            let cmr = ["c", "m", "r"].contains(&t.category.as_str()) && t.generation.is_some_and(|g| g >= 5);
            (cmr || GPU_FAMILIES.contains(&t.family.as_str()))
                && t.vcpu <= MAX_VCPU
                && !t.size.starts_with("metal")
                && ZONES
                    .iter()
                    .any(|z| region.prices().price(t, z, CapacityType::OnDemand).is_some())
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Karpenter's instance-types file for the world's types.
pub fn instance_types_file(region: &RegionCatalog<'_>) -> Vec<KwokInstanceType> {
    let mut out = Vec::new();
    for it in world_types(region) {
        let mut offerings = Vec::new();
        for zone in ZONES {
            for ct in CapacityType::ALL {
                if let Some(price) = region.prices().price(it, zone, ct) {
                    offerings.push(KwokOffering {
                        price,
                        available: true,
                        requirements: vec![
                            KwokRequirement {
                                key: "karpenter.sh/capacity-type".into(),
                                operator: "In".into(),
                                values: vec![ct.label().into()],
                            },
                            KwokRequirement {
                                key: "topology.kubernetes.io/zone".into(),
                                operator: "In".into(),
                                values: vec![zone.into()],
                            },
                        ],
                    });
                }
            }
        }
        if offerings.is_empty() {
            continue;
        }
        let resources = kwok_capacity(it).to_k8s().into_iter().map(|(k, v)| (k, v.0)).collect();
        out.push(KwokInstanceType {
            name: it.name.clone(),
            offerings,
            architecture: it.arch.label().to_string(),
            operating_systems: vec!["linux".into()],
            resources,
        });
    }
    out
}

/// Runs `carpool bench karpenter-world`.
pub fn run(args: &WorldArgs, region: &RegionCatalog<'_>) -> Result<()> {
    let file = instance_types_file(region);
    write(&args.out, &serde_json::to_string_pretty(&file)?)?;
    let offerings: usize = file.iter().map(|t| t.offerings.len()).sum();
    eprintln!(
        "wrote {}: {} instance types, {} offerings in {}",
        args.out.display(),
        file.len(),
        offerings,
        ZONES.join(", ")
    );
    if let (Some(scenario), Some(dir)) = (&args.scenario, &args.manifests) {
        let text = std::fs::read_to_string(scenario).with_context(|| format!("reading {}", scenario.display()))?;
        let scenario: Value =
            serde_yaml_ng::from_str(&text).with_context(|| format!("parsing {}", scenario.display()))?;
        let world: BTreeSet<String> = file.iter().map(|t| t.name.clone()).collect();
        let m = manifests(&scenario, region, &world)?;
        std::fs::create_dir_all(dir)?;
        write(&dir.join("workload.yaml"), &yaml_docs(&m.workload)?)?;
        write(&dir.join("karpenter.yaml"), &yaml_docs(&m.karpenter)?)?;
        write(&dir.join("carpool.yaml"), &yaml_docs(&m.carpool)?)?;
        eprintln!(
            "wrote {}/{{workload,karpenter,carpool}}.yaml: {} pods",
            dir.display(),
            m.pods
        );
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn yaml_docs(objects: &[Value]) -> Result<String> {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(o)?);
    }
    Ok(out)
}

/// The manifests of one scenario.
pub struct Manifests {
    /// Namespaces, Deployments, PDBs.
    pub workload: Vec<Value>,
    /// KWOKNodeClass and the NodePools for Karpenter.
    pub karpenter: Vec<Value>,
    /// EC2NodeClasses and the NodePools for Carpool.
    pub carpool: Vec<Value>,
    /// The pods of the workload.
    pub pods: u64,
}

/// The replicas of a Deployment of `peak` replicas after the benchmark's scale-down: a
/// third, rounded up, at least 1; and, when its PDB's `minAvailable` is a number, at least
/// one more than that (up to `peak`), so that the PDB still allows a disruption.
pub fn scale_down_to(peak: u64, pdb: Option<&Value>) -> u64 {
    let third = peak.div_ceil(3).max(1);
    let min_available = pdb.and_then(|p| p.get("min_available")).and_then(Value::as_u64);
    match min_available {
        Some(m) => third.max(m + 1).min(peak.max(1)),
        None => third,
    }
}

/// A scenario's replica count at its peak.
fn peak_replicas(replicas: &Value) -> u64 {
    if let Some(n) = replicas.get("constant").and_then(Value::as_u64) {
        return n;
    }
    if let Some(steps) = replicas.get("steps").and_then(Value::as_array) {
        return steps
            .iter()
            .filter_map(|s| s.get("replicas").and_then(Value::as_u64))
            .max()
            .unwrap_or(0);
    }
    if let Some(d) = replicas.get("diurnal") {
        return d.get("max").and_then(Value::as_u64).unwrap_or(0);
    }
    0
}

fn quantity(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The pod template of a scenario's Deployment or Job (as `carpool simulate` builds it).
fn pod_template(w: &Value, app: &str) -> Result<Value> {
    let req = w.get("requests").context("requests")?;
    let mut requests = json!({
        "cpu": quantity(req.get("cpu")).context("requests.cpu")?,
        "memory": quantity(req.get("memory")).context("requests.memory")?,
    });
    let mut limits = json!({});
    if let Some(gpu) = req.get("gpu").and_then(Value::as_u64).filter(|g| *g > 0) {
        requests["nvidia.com/gpu"] = json!(gpu.to_string());
        limits["nvidia.com/gpu"] = json!(gpu.to_string());
    }
    let mut spec = json!({"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": requests, "limits": limits}}]});
    if let Some(sel) = w
        .get("node_selector")
        .filter(|s| s.as_object().is_some_and(|o| !o.is_empty()))
    {
        spec["nodeSelector"] = sel.clone();
    }
    let mut tolerations = vec![json!({"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"})];
    for t in w.get("tolerations").and_then(Value::as_array).into_iter().flatten() {
        let mut v = json!({"key": t.get("key").cloned().unwrap_or(json!(""))});
        for f in ["operator", "value", "effect"] {
            if let Some(x) = t.get(f) {
                v[f] = x.clone();
            }
        }
        tolerations.push(v);
    }
    spec["tolerations"] = Value::Array(tolerations);
    let own = json!({"matchLabels": {"app": app}});
    let mut affinity = serde_json::Map::new();
    if let Some(reqs) = w
        .get("node_affinity")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
    {
        affinity.insert(
            "nodeAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": reqs}]}}),
        );
    }
    if let Some(key) = w.get("anti_affinity").and_then(Value::as_str) {
        affinity.insert(
            "podAntiAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": own, "topologyKey": key}]}),
        );
    }
    if !affinity.is_empty() {
        spec["affinity"] = Value::Object(affinity);
    }
    if let Some(spread) = w.get("spread").and_then(Value::as_array).filter(|a| !a.is_empty()) {
        spec["topologySpreadConstraints"] = Value::Array(
            spread
                .iter()
                .map(|s| {
                    json!({"maxSkew": s.get("max_skew").and_then(Value::as_i64).unwrap_or(1),
                        "topologyKey": s.get("topology_key").cloned().unwrap_or(Value::Null),
                        "whenUnsatisfiable": s.get("when_unsatisfiable").and_then(Value::as_str).unwrap_or("DoNotSchedule"),
                        "labelSelector": own})
                })
                .collect(),
        );
    }
    let mut annotations = serde_json::Map::new();
    if w.get("do_not_disrupt").and_then(Value::as_bool) == Some(true) {
        annotations.insert("karpenter.sh/do-not-disrupt".into(), json!("true"));
    }
    Ok(json!({"metadata": {"labels": {"app": app, BENCH_LABEL: "true"}, "annotations": annotations}, "spec": spec}))
}

/// The instance types of the world a scenario NodePool allows (its requirements on the
/// types' own labels: `karpenter.k8s.aws/*`, arch, os, instance type).
fn allowed_types(pool: &Value, region: &RegionCatalog<'_>, world: &BTreeSet<String>) -> Result<Vec<String>> {
    let wire: Vec<NodeSelectorRequirement> =
        serde_json::from_value(pool["spec"]["template"]["spec"]["requirements"].clone()).context("requirements")?;
    let reqs = Requirements::from_wire(&wire).map_err(|(i, e)| anyhow::anyhow!("requirements[{i}]: {e}"))?;
    let mut out = Vec::new();
    for it in region.types() {
        if !world.contains(&it.name) {
            continue;
        }
        let labels = it.labels();
        let ok = reqs.iter().all(|r| {
            let k = r.key();
            if !(labels.contains_key(k) || k.starts_with("karpenter.k8s.aws/")) {
                return true;
            }
            match labels.get(k) {
                Some(v) => r.has(v),
                None => r.allows_absent(),
            }
        });
        if ok {
            out.push(it.name.clone());
        }
    }
    out.sort();
    Ok(out)
}

/// The manifests of a scenario (see the module doc).
pub fn manifests(scenario: &Value, region: &RegionCatalog<'_>, world: &BTreeSet<String>) -> Result<Manifests> {
    let mut workload = Vec::new();
    let mut namespaces = BTreeSet::new();
    let mut apps = Vec::new();
    let mut pods = 0;
    for d in scenario
        .get("deployments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        apps.push((d, peak_replicas(d.get("replicas").unwrap_or(&Value::Null))));
    }
    for j in scenario.get("jobs").and_then(Value::as_array).into_iter().flatten() {
        apps.push((j, j.get("parallelism").and_then(Value::as_u64).unwrap_or(0)));
    }
    let mut objects = Vec::new();
    for (w, replicas) in apps {
        let name = w
            .get("name")
            .and_then(Value::as_str)
            .context("a workload without a name")?;
        let ns = w.get("namespace").and_then(Value::as_str).unwrap_or("default");
        namespaces.insert(ns.to_string());
        pods += replicas;
        // Every workload gets a PDB: the scenario's, or at most one pod unavailable.
        let default_pdb = json!({"max_unavailable": 1});
        let pdb = w.get("pdb").unwrap_or(&default_pdb);
        let down = scale_down_to(replicas, Some(pdb)).to_string();
        objects.push(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "annotations": {SCALE_DOWN_ANNOTATION: down}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                "template": pod_template(w, name).with_context(|| format!("workload {name}"))?}}));
        let mut spec = json!({"selector": {"matchLabels": {"app": name}}});
        for (from, to) in [("min_available", "minAvailable"), ("max_unavailable", "maxUnavailable")] {
            if let Some(v) = pdb.get(from) {
                spec[to] = v.clone();
            }
        }
        objects.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}));
    }
    for ns in namespaces.iter().filter(|n| *n != "default") {
        workload.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    workload.extend(objects);

    let mut karpenter = vec![
        json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
        "metadata": {"name": KWOK_NODE_CLASS}}),
    ];
    let mut carpool = Vec::new();
    let mut classes = BTreeSet::new();
    for pool in scenario
        .get("nodepools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = pool["metadata"]["name"].as_str().context("a NodePool without a name")?;
        let types = allowed_types(pool, region, world).with_context(|| format!("NodePool {name}"))?;
        // The same disruption settings in both autoscalers' pools (the scenario's budgets kept).
        let mut pool = pool.clone();
        pool["spec"]["disruption"]["consolidationPolicy"] = json!("WhenEmptyOrUnderutilized");
        pool["spec"]["disruption"]["consolidateAfter"] = json!(CONSOLIDATE_AFTER);
        let pool = &pool;
        if types.is_empty() {
            bail!("NodePool {name} allows none of the world's instance types");
        }
        let mut k = pool.clone();
        let reqs: Vec<Value> = pool["spec"]["template"]["spec"]["requirements"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| {
                let key = r["key"].as_str().unwrap_or("");
                !key.starts_with("karpenter.k8s.aws/") && key != "node.kubernetes.io/instance-type"
            })
            .cloned()
            .chain([json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types})])
            .collect();
        k["spec"]["template"]["spec"]["requirements"] = Value::Array(reqs);
        k["spec"]["template"]["spec"]["nodeClassRef"] =
            json!({"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": KWOK_NODE_CLASS});
        karpenter.push(k);
        if let Some(class) = pool["spec"]["template"]["spec"]["nodeClassRef"]["name"].as_str() {
            classes.insert(class.to_string());
        }
        carpool.push(pool.clone());
    }
    let mut out_classes: Vec<Value> = classes
        .iter()
        .map(|name| {
            json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
                "spec": {"role": "CarpoolNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "carpool-local"}}],
                    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "carpool-local"}}]}})
        })
        .collect();
    out_classes.extend(carpool);
    Ok(Manifests {
        workload,
        karpenter,
        carpool: out_classes,
        pods,
    })
}

#[cfg(test)]
mod tests {
    use carpool::catalog::Catalog;
    use carpool::model::Quantity;

    use super::*;

    fn units(q: &str, cpu: bool) -> i64 {
        let q: Quantity = q.parse().unwrap();
        if cpu { q.millis_ceil() } else { q.units_ceil() }
    }

    #[test]
    fn the_instance_types_file_parses_back_with_the_catalogs_types_zones_prices_and_allocatable() {
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
        let text = serde_json::to_string(&instance_types_file(&region)).unwrap();
        let file: Vec<KwokInstanceType> = serde_json::from_str(&text).unwrap();
        let expected = world_types(&region);
        let names: Vec<&str> = file.iter().map(|t| t.name.as_str()).collect();
        let want: Vec<&str> = expected.iter().map(|t| t.name.as_str()).collect();
        assert!(names == want, "{} types written, {} expected", names.len(), want.len());
        assert!(file.iter().any(|t| t.name == "m6i.large"));
        assert!(file.iter().any(|t| t.name.starts_with("g5.")));
        for (t, it) in file.iter().zip(&expected) {
            assert_eq!(t.architecture, it.arch.label());
            // Every zone of the world, both capacity types, at Carpool's prices.
            for zone in ZONES {
                for ct in CapacityType::ALL {
                    assert_eq!(
                        t.price(zone, ct.label()),
                        region.prices().price(it, zone, ct),
                        "{} {zone} {}",
                        t.name,
                        ct.label()
                    );
                }
            }
            assert_eq!(t.offerings.len(), ZONES.len() * 2, "{}", t.name);
            // Capacity less kwok's overhead is Carpool's allocatable, resource by resource.
            let alloc = carpool_allocatable(it);
            assert_eq!(
                alloc, it.allocatable,
                "{}: the harness registers the catalog's allocatable",
                t.name
            );
            let get = |k: &str, cpu: bool| units(&t.resources[k], cpu);
            assert_eq!(
                get("cpu", true) - KWOK_KUBE_RESERVED_CPU_MILLIS,
                alloc.cpu_millis,
                "{}",
                t.name
            );
            assert_eq!(
                get("memory", false) - KWOK_KUBE_RESERVED_MEMORY,
                alloc.memory,
                "{}",
                t.name
            );
            assert_eq!(get("pods", false), alloc.pods, "{}", t.name);
            assert_eq!(get("ephemeral-storage", false), alloc.ephemeral_storage, "{}", t.name);
            for (k, v) in &alloc.extended {
                assert_eq!(get(k, false), *v, "{} {k}", t.name);
            }
            if it.gpu_count > 0 {
                assert_eq!(get("nvidia.com/gpu", false), i64::from(it.gpu_count), "{}", t.name);
            }
        }
    }

    #[test]
    fn a_scenario_becomes_the_same_workload_and_equivalent_pools() {
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
        let world: BTreeSet<String> = world_types(&region).iter().map(|t| t.name.clone()).collect();
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/scenarios/mixed-microservices.yaml"
        ))
        .unwrap();
        let scenario: Value = serde_yaml_ng::from_str(&text).unwrap();
        let m = manifests(&scenario, &region, &world).unwrap();
        assert!(m.pods > 40);
        let pool = m.karpenter.iter().find(|o| o["kind"] == "NodePool").unwrap();
        let reqs = pool["spec"]["template"]["spec"]["requirements"].as_array().unwrap();
        assert!(
            reqs.iter()
                .all(|r| !r["key"].as_str().unwrap().starts_with("karpenter.k8s.aws/"))
        );
        let types = reqs
            .iter()
            .find(|r| r["key"] == "node.kubernetes.io/instance-type")
            .unwrap()["values"]
            .as_array()
            .unwrap();
        assert!(types.iter().any(|t| t == "m6i.xlarge"));
        assert!(!types.iter().any(|t| t == "m5.xlarge"), "generation must be > 5");
        assert!(!types.iter().any(|t| t == "m6i.16xlarge"), "cpu must be < 33");
        assert_eq!(
            pool["spec"]["template"]["spec"]["nodeClassRef"]["kind"],
            "KWOKNodeClass"
        );
        assert!(m.carpool.iter().any(|o| o["kind"] == "EC2NodeClass"));
        // The same disruption settings in both autoscalers' pools.
        let disruption = |objects: &[Value]| -> Vec<Value> {
            objects
                .iter()
                .filter(|o| o["kind"] == "NodePool")
                .map(|o| o["spec"]["disruption"].clone())
                .collect()
        };
        let (k, c) = (disruption(&m.karpenter), disruption(&m.carpool));
        assert!(!k.is_empty());
        assert_eq!(k, c);
        for d in &k {
            assert_eq!(d["consolidationPolicy"], "WhenEmptyOrUnderutilized");
            assert_eq!(d["consolidateAfter"], CONSOLIDATE_AFTER);
        }
        // Every Deployment has a PDB and its replicas after the scale-down.
        let deployments: Vec<&Value> = m.workload.iter().filter(|o| o["kind"] == "Deployment").collect();
        for d in &deployments {
            let name = &d["metadata"]["name"];
            assert!(
                m.workload
                    .iter()
                    .any(|o| o["kind"] == "PodDisruptionBudget" && &o["metadata"]["name"] == name),
                "{name} has no PDB"
            );
            let down: u64 = d["metadata"]["annotations"][SCALE_DOWN_ANNOTATION]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            let peak = d["spec"]["replicas"].as_u64().unwrap();
            assert!(down >= 1 && down <= peak.max(1), "{name}: {down} of {peak}");
        }
        let pricing = m
            .workload
            .iter()
            .find(|o| o["metadata"]["name"] == "pricing" && o["kind"] == "PodDisruptionBudget");
        assert_eq!(pricing.unwrap()["spec"]["maxUnavailable"], 1);
    }

    #[test]
    fn the_scale_down_keeps_a_third_and_room_for_one_disruption() {
        assert_eq!(scale_down_to(10, None), 4);
        assert_eq!(scale_down_to(9, Some(&json!({"max_unavailable": 1}))), 3);
        assert_eq!(scale_down_to(1, None), 1);
        assert_eq!(scale_down_to(0, None), 1);
        assert_eq!(scale_down_to(3, Some(&json!({"min_available": 2}))), 3);
        assert_eq!(scale_down_to(6, Some(&json!({"min_available": 2}))), 3);
        assert_eq!(scale_down_to(2, Some(&json!({"min_available": 1}))), 2);
        assert_eq!(scale_down_to(6, Some(&json!({"min_available": "50%"}))), 2);
    }
}
