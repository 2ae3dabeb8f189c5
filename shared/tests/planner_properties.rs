//! Properties of the planner on generated snapshots: the independent checker accepts every
//! plan, and a pod reported unschedulable cannot be placed even alone.

use carpool::catalog::Catalog;
use carpool::decide::checker::check;
use carpool::decide::provisioning_plan;
use carpool::decide::unschedulable::Kind;
use carpool::fixtures::{NodePoolBuilder, PodBuilder};
use carpool::snapshot::Snapshot;
use proptest::prelude::*;
use serde_json::{Value, json};

#[derive(Clone, Debug)]
struct PodSpec {
    app: usize,
    cpu_m: u32,
    mem_mi: u32,
    arch: Option<&'static str>,
    tolerates_gpu_taint: bool,
    gpu: bool,
}

fn arb_pod() -> impl Strategy<Value = PodSpec> {
    (
        0usize..4,
        prop::sample::select(vec![100u32, 250, 500, 1000, 2000, 4000, 16000, 300_000]),
        prop::sample::select(vec![128u32, 512, 1024, 4096, 16384, 65536]),
        prop::sample::select(vec![None, Some("arm64"), Some("amd64"), Some("sparc")]),
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(app, cpu_m, mem_mi, arch, tolerates_gpu_taint, gpu)| PodSpec {
            app,
            cpu_m,
            mem_mi,
            arch,
            tolerates_gpu_taint,
            gpu,
        })
}

fn pod_json(i: usize, p: &PodSpec) -> Value {
    let app = format!("app{}", p.app);
    let mut pod = PodBuilder::new(&format!("p{i}"))
        .label("app", &app)
        .request("cpu", &format!("{}m", p.cpu_m))
        .request("memory", &format!("{}Mi", p.mem_mi))
        .phase("Pending");
    if p.gpu {
        pod = pod.limit("nvidia.com/gpu", "1");
    }
    if let Some(arch) = p.arch {
        pod = pod.node_selector("kubernetes.io/arch", arch);
    }
    if p.tolerates_gpu_taint {
        pod = pod.toleration("nvidia.com/gpu", "Exists", None, "");
    }
    // Constraints depend on the app only, so that pods of one app agree on them:
    // app1 spreads over zones, app2 is anti-affine by hostname.
    if p.app == 1 {
        pod = pod.spec(
            "topologySpreadConstraints",
            json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}}}]),
        );
    }
    if p.app == 2 {
        pod = pod.spec(
            "affinity",
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": app}}}]}}),
        );
    }
    pod.build()
}

fn pools(gpu_pool: bool, limit_cpu: Option<u32>) -> Vec<Value> {
    let mut out = vec![];
    let mut general = NodePoolBuilder::new("general")
        .node_class("d")
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
        .requirement(
            "topology.kubernetes.io/zone",
            "In",
            &["us-east-1a", "us-east-1b", "us-east-1c"],
        );
    if let Some(cpu) = limit_cpu {
        general = general.limit_cpu(&cpu.to_string());
    }
    out.push(general.build());
    if gpu_pool {
        out.push(
            NodePoolBuilder::new("gpu")
                .node_class("d")
                .weight(10)
                .taint("nvidia.com/gpu", "NoSchedule")
                .requirement("karpenter.k8s.aws/instance-family", "In", &["g5", "g6"])
                .build(),
        );
    }
    out
}

fn snapshot(items: Vec<Value>) -> Snapshot {
    let mut s = Snapshot::default();
    s.add_text("generated.json", &json!({"kind": "List", "items": items}).to_string())
        .unwrap();
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    #[test]
    fn the_checker_accepts_every_plan_and_unschedulable_pods_cannot_be_placed_alone(
        pods in prop::collection::vec(arb_pod(), 1..25),
        gpu_pool in any::<bool>(),
        limit_cpu in prop::option::weighted(0.2, 8u32..64),
        daemonset in any::<bool>(),
    ) {
        let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
        let mut items = pools(gpu_pool, limit_cpu);
        if daemonset {
            items.push(json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
                "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}}}]}}}}));
        }
        let pool_items = items.clone();
        items.extend(pods.iter().enumerate().map(|(i, p)| pod_json(i, p)));
        let s = snapshot(items);
        let plan = provisioning_plan(&s, &region);
        let violations = check(&s, &region, &plan);
        prop_assert!(violations.is_empty(), "{:#?}", violations);

        // A pod unschedulable for its own sake (not limits or other pods) stays so alone.
        for u in &plan.unschedulable {
            if u.has(Kind::Limits) || u.has(Kind::Topology) {
                continue;
            }
            let i: usize = u.pod.trim_start_matches("default/p").parse().unwrap();
            let mut alone = pool_items.clone();
            alone.push(pod_json(i, &pods[i]));
            let alone_plan = provisioning_plan(&snapshot(alone), &region);
            prop_assert_eq!(alone_plan.unschedulable.len(), 1, "{} was unschedulable ({}) but plans alone", u.pod, u.reason());
        }
    }
}
