//! Generated cluster dumps for the benchmarks: Karpenter's scheduling-benchmark mix and the
//! packing suite. Deterministic (a fixed-seed LCG), so runs compare.

use carpool::catalog::RegionCatalog;
use carpool::fixtures::{NodePoolBuilder, PodBuilder};
use carpool::snapshot::Snapshot;
use serde_json::{Value, json};

/// A small deterministic generator (Knuth's MMIX LCG).
pub struct Lcg(u64);

impl Lcg {
    /// A generator with a seed.
    pub fn new(seed: u64) -> Self {
        Lcg(seed)
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        &items[((self.0 >> 33) as usize) % items.len()]
    }
}

/// A pending pod.
pub fn pod(name: &str, app: &str, cpu: &str, memory: &str) -> Value {
    PodBuilder::new(name)
        .namespace("bench")
        .label("app", app)
        .requests(cpu, memory)
        .unschedulable()
        .build()
}

/// Sets a field of a pod's spec.
pub fn with_spec(mut pod: Value, key: &str, value: Value) -> Value {
    pod["spec"][key] = value;
    pod
}

/// A NodePool.
pub fn nodepool(name: &str, requirements: Value) -> Value {
    NodePoolBuilder::new(name).requirements(requirements).build()
}

/// A DaemonSet on every node.
pub fn daemonset(name: &str, cpu: &str, memory: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
           "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}}, "spec": {
               "tolerations": [{"operator": "Exists"}],
               "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}})
}

/// Reads generated items into a snapshot.
pub fn snapshot(items: Vec<Value>) -> Snapshot {
    let mut s = Snapshot::default();
    // Generated JSON always parses; an error here is a bug in this file.
    if let Err(e) = s.add_text("generated", &json!({"kind": "List", "items": items}).to_string()) {
        eprintln!("carpool: internal error: generated scenario does not parse: {e}");
    }
    s
}

/// The names of `n` instance types of categories c, m and r offered in the region, in
/// name order: the benchmark's instance-type universe.
pub fn instance_types(region: &RegionCatalog<'_>, n: usize) -> Vec<String> {
    region
        .types()
        .iter()
        .filter(|t| ["c", "m", "r"].contains(&t.category.as_str()) && t.generation.is_some_and(|g| g > 2))
        .take(n)
        .map(|t| t.name.clone())
        .collect()
}

const CPU: [&str; 5] = ["100m", "250m", "500m", "1", "2"];
const MEMORY: [&str; 6] = ["128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"];

/// Karpenter's scheduling benchmark mix: `n` pods in fifths (generic, zonal spread,
/// hostname spread, zonal pod affinity, hostname pod anti-affinity), on one NodePool
/// limited to `types` instance types.
pub fn karpenter_mix(region: &RegionCatalog<'_>, n: usize, types: usize) -> Snapshot {
    let mut rng = Lcg::new(42);
    let names = instance_types(region, types);
    let mut items = vec![nodepool(
        "bench",
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": names}]),
    )];
    for i in 0..n {
        let (cpu, mem) = (*rng.pick(&CPU), *rng.pick(&MEMORY));
        let kind = i % 5;
        let app = ["generic", "zonal-spread", "host-spread", "zonal-affinity", "host-anti"][kind];
        let p = pod(&format!("{app}-{i}"), app, cpu, mem);
        let selector = json!({"matchLabels": {"app": app}});
        items.push(match kind {
            1 | 2 => with_spec(
                p,
                "topologySpreadConstraints",
                json!([{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector,
                        "topologyKey": if kind == 1 { "topology.kubernetes.io/zone" } else { "kubernetes.io/hostname" }}]),
            ),
            3 => with_spec(p, "affinity", json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": selector}]}})),
            4 => with_spec(p, "affinity", json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}]}})),
            _ => p,
        });
    }
    snapshot(items)
}

/// One scenario of the packing suite.
pub struct Scenario {
    /// Its name.
    pub name: &'static str,
    /// Whether it mixes pod shapes (the goal is 10% below the baseline there).
    pub mixed: bool,
    /// The dump.
    pub snapshot: Snapshot,
}

fn deployment(app: &str, n: usize, cpu: &str, mem: &str) -> Vec<Value> {
    (0..n).map(|i| pod(&format!("{app}-{i}"), app, cpu, mem)).collect()
}

fn general_pool() -> Value {
    nodepool(
        "default",
        json!([{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                               {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]}]),
    )
}

fn system() -> Vec<Value> {
    vec![
        daemonset("aws-node", "25m", "64Mi"),
        daemonset("kube-proxy", "100m", "64Mi"),
        daemonset("node-exporter", "50m", "64Mi"),
    ]
}

fn scenario(name: &'static str, mixed: bool, mut items: Vec<Value>) -> Scenario {
    items.extend(system());
    Scenario {
        name,
        mixed,
        snapshot: snapshot(items),
    }
}

/// The packing suite: varied shapes, constraints and sizes, from 10 to 10,000 pods.
pub fn packing_suite() -> Vec<Scenario> {
    let mut rng = Lcg::new(7);
    let mut random_mix = vec![general_pool()];
    for i in 0..10_000 {
        let (cpu, mem) = *rng.pick(&[
            ("250m", "512Mi"),
            ("4", "2Gi"),
            ("500m", "16Gi"),
            ("2", "8Gi"),
            ("1", "1Gi"),
            ("8", "4Gi"),
            ("250m", "8Gi"),
        ]);
        random_mix.push(pod(&format!("r-{i}"), &format!("shape-{cpu}-{mem}"), cpu, mem));
    }
    let zone_spread = |app: &str, n: usize, cpu: &str, mem: &str| -> Vec<Value> {
        deployment(app, n, cpu, mem)
            .into_iter()
            .map(|p| {
                with_spec(
                    p,
                    "topologySpreadConstraints",
                    json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}}}]),
                )
            })
            .collect()
    };
    let anti = |app: &str, n: usize, cpu: &str, mem: &str| -> Vec<Value> {
        deployment(app, n, cpu, mem)
            .into_iter()
            .map(|p| {
                with_spec(
                    p,
                    "affinity",
                    json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}]}}),
                )
            })
            .collect()
    };
    let gpu_pods = |app: &str, n: usize| -> Vec<Value> {
        deployment(app, n, "4", "16Gi")
            .into_iter()
            .map(|p| {
                let p = with_spec(p, "tolerations", json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]));
                with_spec(p, "containers", json!([{"name": "c", "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]))
            })
            .collect()
    };
    let arm = |app: &str, n: usize, cpu: &str, mem: &str| -> Vec<Value> {
        deployment(app, n, cpu, mem)
            .into_iter()
            .map(|p| with_spec(p, "nodeSelector", json!({"kubernetes.io/arch": "arm64"})))
            .collect()
    };
    let gpu_pool = {
        let mut p = nodepool(
            "gpu",
            json!([{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g5", "g6", "g6e"]}]),
        );
        p["spec"]["template"]["spec"]["taints"] = json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]);
        p
    };
    let cat = |parts: Vec<Vec<Value>>| -> Vec<Value> { parts.into_iter().flatten().collect() };
    vec![
        scenario(
            "tiny-web-10",
            false,
            cat(vec![vec![general_pool()], deployment("web", 10, "250m", "512Mi")]),
        ),
        scenario(
            "uniform-small-1000",
            false,
            cat(vec![vec![general_pool()], deployment("svc", 1000, "100m", "128Mi")]),
        ),
        scenario(
            "uniform-large-200",
            false,
            cat(vec![vec![general_pool()], deployment("big", 200, "8", "32Gi")]),
        ),
        scenario(
            "cpu-heavy-500",
            false,
            cat(vec![vec![general_pool()], deployment("enc", 500, "4", "2Gi")]),
        ),
        scenario(
            "memory-heavy-500",
            false,
            cat(vec![vec![general_pool()], deployment("cache", 500, "500m", "16Gi")]),
        ),
        scenario(
            "huge-pods-50",
            false,
            cat(vec![vec![general_pool()], deployment("db", 50, "30", "200Gi")]),
        ),
        scenario(
            "mixed-cpu-memory-1000",
            true,
            cat(vec![
                vec![general_pool()],
                deployment("enc", 500, "4", "2Gi"),
                deployment("cache", 500, "500m", "16Gi"),
            ]),
        ),
        scenario(
            "mixed-three-shapes-3000",
            true,
            cat(vec![
                vec![general_pool()],
                deployment("enc", 1000, "2", "1Gi"),
                deployment("cache", 1000, "250m", "8Gi"),
                deployment("web", 1000, "500m", "1Gi"),
            ]),
        ),
        Scenario {
            name: "mixed-random-10000",
            mixed: true,
            snapshot: snapshot(cat(vec![random_mix, system()])),
        },
        scenario(
            "mixed-arm-and-any-800",
            true,
            cat(vec![
                vec![general_pool()],
                arm("arm-enc", 400, "4", "2Gi"),
                deployment("cache", 400, "500m", "16Gi"),
            ]),
        ),
        scenario(
            "zone-spread-1200",
            false,
            cat(vec![
                vec![general_pool()],
                zone_spread("api", 600, "1", "2Gi"),
                zone_spread("worker", 600, "2", "1Gi"),
            ]),
        ),
        scenario(
            "anti-affinity-and-filler-600",
            false,
            cat(vec![
                vec![general_pool()],
                anti("db", 100, "2", "8Gi"),
                deployment("web", 500, "250m", "512Mi"),
            ]),
        ),
        scenario(
            "gpu-and-cpu-80",
            false,
            cat(vec![
                vec![gpu_pool, general_pool()],
                gpu_pods("infer", 40),
                deployment("web", 40, "500m", "1Gi"),
            ]),
        ),
        scenario(
            "heavy-daemonsets-800",
            false,
            cat(vec![
                vec![general_pool(), daemonset("security-agent", "1", "2Gi")],
                deployment("web", 800, "250m", "512Mi"),
            ]),
        ),
    ]
}
