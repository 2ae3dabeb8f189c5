//! End to end on the local stack: the provisioner's handler, invoked in-process, against
//! the real apiserver and kube-scheduler, moto's EC2 and DynamoDB, with the harness
//! playing the kubelet for the instances it launches.
//!
//! Each test has a cluster name of its own (so its EC2 tags, its harness and its
//! DynamoDB partition are its own), a NodePool, an EC2NodeClass and a namespace; its pods
//! select its NodePool. Tests run one at a time (they all watch the cluster's pending
//! pods).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use carpool::catalog::Catalog;
use carpool::decide::provisioning::unschedulable::Kind;
use carpool::fakes::FakeClock;
use carpool::model::EC2NodeClass;
use carpool::model::well_known::WAVE_TAINT;
use carpool::ports::{
    Cloud, CloudError, Instance, InstanceState, LaunchRequest, OfferingKey, OnDemandPrice, SpotPrice, StateStore,
    Timer, ZonalOffering,
};
use carpool::run::config::Config;
use carpool::run::provision::RunReport;
use carpool_adapters::clock::TokioClock;
use carpool_adapters::dynamodb::DynamoStore;
use carpool_adapters::kube_cluster::KubeCluster;
use carpool_provisioner::handler::App;
use carpool_tests::pod_clock::PodClock;
use carpool_tests::scene::Scene as Base;
use carpool_tests::schedule_log::ReleaseLog;
use carpool_tests::{exclusive, wait};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(180);

/// The shared scene, and how this test's runs launch.
struct Scene {
    base: Base,
    /// Launch in waves (the default); a test without a harness, whose nodes never come
    /// up, turns them off so that its run does not wait for a release.
    waves: bool,
}

impl std::ops::Deref for Scene {
    type Target = Base;

    fn deref(&self) -> &Base {
        &self.base
    }
}

impl Scene {
    async fn new(prefix: &str, limits: Option<serde_json::Value>) -> Result<Self> {
        let base = Base::with_pool(prefix, |pool| {
            let mut pool = pool.requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"]);
            if let Some(limits) = limits {
                pool = pool.limits(limits);
            }
            pool.build()
        })
        .await?;
        Ok(Scene { base, waves: true })
    }

    fn config(&self, watch: Duration) -> Result<Config> {
        let mut config = self.config_with(|k| match k {
            // Measuring the options of issue 17 by hand: the wave grace (0: no waves) and
            // the fit to kube-scheduler's placement, from the test's environment.
            "CARPOOL_WAVE_GRACE_SECONDS" | "CARPOOL_FIT_TO_SCHEDULER" => std::env::var(k).ok(),
            _ => None,
        })?;
        config.watch = watch;
        if !self.waves {
            config.wave_grace = Duration::ZERO;
        }
        Ok(config)
    }

    async fn app<C: Cloud, T: Timer>(
        &self,
        cloud: C,
        clock: T,
        watch: Duration,
    ) -> Result<App<C, KubeCluster, DynamoStore, T>> {
        Ok(App::new(
            cloud,
            KubeCluster::new(self.kube.clone()),
            self.store().await?,
            clock,
            self.config(watch)?,
            Catalog::embedded()?.region("us-east-1")?,
        ))
    }

    /// A Deployment of `replicas` pods selecting this test's NodePool, spread over zones.
    async fn deployment(&self, app: &str, replicas: i32, cpu: &str, memory: &str) -> Result<()> {
        self.deployment_with(app, replicas, cpu, memory, true).await
    }

    /// A Deployment of `replicas` pods selecting this test's NodePool, spread over zones
    /// when `spread` (`maxSkew: 1`, `DoNotSchedule`).
    async fn deployment_with(&self, app: &str, replicas: i32, cpu: &str, memory: &str, spread: bool) -> Result<()> {
        let mut d = self.base.deployment(app, replicas, cpu, memory);
        if spread {
            d["spec"]["template"]["spec"]["topologySpreadConstraints"] = json!([{"maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": app}}}]);
        }
        self.create_deployment(d).await
    }

    async fn wait_unschedulable(&self, n: usize) -> Result<()> {
        wait::unschedulable(&self.kube, &self.name, n, WAIT).await
    }

    /// Waits until all `n` pods of the scene are bound or marked unschedulable by
    /// kube-scheduler; returns how many are marked.
    async fn wait_bound_or_unschedulable(&self, n: usize) -> Result<usize> {
        wait::until(&format!("{n} pods bound or marked unschedulable"), WAIT, async || {
            let pods = self.pods().await?;
            let bound = pods
                .iter()
                .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                .count();
            let marked = pods
                .iter()
                .filter(|p| {
                    p.status.iter().flat_map(|s| s.conditions.iter().flatten()).any(|c| {
                        c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
                    })
                })
                .count();
            if pods.len() == n && bound + marked == n {
                Ok(marked)
            } else {
                bail!("{bound} bound and {marked} marked of {}", pods.len())
            }
        })
        .await
    }

    async fn wait_running(&self, n: usize) -> Result<Vec<Pod>> {
        wait::until(&format!("{n} pods Running"), WAIT, async || {
            let pods = self.pods().await?;
            let running = pods
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            if running == n {
                Ok(pods)
            } else {
                // Which pods are not Running, where, and what kube-scheduler last said.
                let stuck: Vec<String> = pods
                    .iter()
                    .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Running"))
                    .map(|p| {
                        let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
                        let said = p
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
                            .and_then(|c| c.message.clone())
                            .unwrap_or_default();
                        format!("{} on {node:?}: {said}", pod_key(p))
                    })
                    .collect();
                bail!("{running} of {} Running; not Running: {stuck:?}", pods.len())
            }
        })
        .await
    }
}

fn deadline(from_now: Duration) -> SystemTime {
    SystemTime::now() + from_now
}

fn instance_of(node: &Node) -> Option<String> {
    let id = node.spec.as_ref()?.provider_id.as_deref()?.rsplit('/').next()?;
    Some(id.to_string())
}

fn pod_key(p: &Pod) -> String {
    carpool::decide::provisioning::pod::key_of(&p.metadata)
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn fifty_pending_pods_with_a_zone_spread_run_on_nodes_one_handler_run_launched() -> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::new("e2e-fifty", None).await?;
    let harness = scene.harness().await?;
    let result = fifty(&scene).await;
    scene.finish(Some(harness), result).await
}

/// Where the pods of one handler run landed, against the plan of its first batch.
struct Landing {
    /// Pods on the node the plan put them on.
    exact: usize,
    /// Pods on another node of the same first batch, in the same zone and capacity type.
    equivalent: usize,
    /// Pods on any node of the first batch (its launch wave).
    in_wave: usize,
    /// Pods in all.
    pods: usize,
    /// Nodes the first batch launched, and their cost per hour.
    planned_nodes: usize,
    planned_cost: f64,
    /// Nodes the run launched in all (the re-checks' included), and their cost per hour.
    nodes: usize,
    cost: f64,
    /// Pending → CreateFleet and pending → Running, per pod, in ms.
    to_fleet_ms: Vec<u64>,
    to_running_ms: Vec<u64>,
}

impl Landing {
    /// Reads where every pod of the scene runs, the launch records and what the pod clock
    /// saw, for the handler run `report`.
    async fn read(
        scene: &Scene,
        report: &RunReport,
        pods: &[Pod],
        seen: &std::collections::BTreeMap<String, carpool_tests::pod_clock::Seen>,
    ) -> Result<Landing> {
        let first = report.batches.first().context("a batch")?;
        let launched: Vec<_> = report.launched().cloned().collect();
        let nodes: HashMap<String, Node> = Api::<Node>::all(scene.kube.clone())
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
            .collect();
        let launched_ids: HashSet<&str> = launched.iter().map(|l| l.instance_id.as_str()).collect();
        let first_ids: HashSet<&str> = first.launched.iter().map(|l| l.instance_id.as_str()).collect();
        // Where the plan put each pod: the launch records name their pods.
        let planned: HashMap<String, String> = scene
            .store()
            .await?
            .list_launches()
            .await?
            .into_iter()
            .filter_map(|l| Some((l.instance_id?, l.pods)))
            .flat_map(|(id, pods)| pods.into_iter().map(move |p| (p, id.clone())))
            .collect();
        let by_id: HashMap<&str, &carpool::run::provision::report::Launched> =
            launched.iter().map(|l| (l.instance_id.as_str(), l)).collect();
        let (mut exact, mut equivalent, mut in_wave) = (0, 0, 0);
        // Per launched node: its type and zone, the pods planned onto it and those on it.
        let mut table: std::collections::BTreeMap<&str, (Vec<String>, Vec<String>)> = Default::default();
        let app_of = |key: &str| {
            key.rsplit('/')
                .next()
                .unwrap_or(key)
                .split('-')
                .next()
                .unwrap_or("")
                .to_string()
        };
        for (pod, id) in &planned {
            if let Some(l) = by_id.get(id.as_str()) {
                table.entry(l.instance_id.as_str()).or_default().0.push(app_of(pod));
            }
        }
        for pod in pods {
            let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone()).context("bound")?;
            let node = nodes.get(&node_name).context("the pod's node exists")?;
            let id = instance_of(node).context("the node has a providerID")?;
            ensure!(
                launched_ids.contains(id.as_str()),
                "{} is on {node_name}, which Carpool did not launch",
                pod_key(pod)
            );
            if let Some(l) = by_id.get(id.as_str()) {
                table
                    .entry(l.instance_id.as_str())
                    .or_default()
                    .1
                    .push(app_of(&pod_key(pod)));
            }
            if first_ids.contains(id.as_str()) {
                in_wave += 1;
            }
            let Some(plan) = planned.get(&pod_key(pod)) else {
                continue;
            };
            if plan == &id {
                exact += 1;
            } else if let (Some(a), Some(b)) = (by_id.get(plan.as_str()), by_id.get(id.as_str()))
                && first_ids.contains(id.as_str())
                && a.zone == b.zone
                && a.capacity_type == b.capacity_type
            {
                equivalent += 1;
            }
        }
        for (id, (mut plan, mut got)) in table {
            plan.sort();
            got.sort();
            let l = by_id[id];
            eprintln!(
                "node {id} {} {} {}: planned {plan:?}, runs {got:?}",
                l.instance_type,
                l.zone,
                l.capacity_type.label()
            );
        }
        Ok(Landing {
            exact,
            equivalent,
            in_wave,
            pods: pods.len(),
            planned_nodes: first.launched.len(),
            planned_cost: first.cost_per_hour_added,
            nodes: launched.len(),
            cost: report.batches.iter().map(|b| b.cost_per_hour_added).sum(),
            to_fleet_ms: report
                .batches
                .iter()
                .flat_map(|b| b.pending_to_fleet_ms.iter().copied())
                .collect(),
            to_running_ms: seen.values().filter_map(|s| s.pending_to_running_ms()).collect(),
        })
    }

    /// What the issue asks of a run: kube-scheduler used the capacity as planned, so the
    /// re-checks launched nothing; every pod runs on a node of the first batch; the node
    /// count and the cost are the plan's.
    ///
    /// `CARPOOL_E2E_STRICT=1` (the by-hand runs of issue 17) holds every run to that. By
    /// default, as in CI, two nodes more are tolerated: the wave is handed to its pods all
    /// at once, but kube-scheduler still takes them in its backoff queue's order, which
    /// the fit replays only in samples, and in about one run of ten of the 50-pod test it
    /// strands one or two pods that the run then launches for (see the closing note of
    /// issue 17). The design before waves launched 1 to 3 more in every run.
    fn expect_as_planned(&self, report: &RunReport) -> Result<()> {
        let strict = std::env::var("CARPOOL_E2E_STRICT").is_ok_and(|v| v == "1");
        let tolerated = if strict { 0 } else { 2 };
        let later: Vec<_> = report.batches.iter().skip(1).flat_map(|b| b.launched.iter()).collect();
        ensure!(
            later.len() <= tolerated,
            "the re-check launched {} more nodes: {later:?}",
            later.len()
        );
        ensure!(
            self.planned_nodes + later.len() == self.nodes,
            "{} nodes for {} planned and {} re-checked",
            self.nodes,
            self.planned_nodes,
            later.len()
        );
        if later.is_empty() {
            ensure!(
                (self.cost - self.planned_cost).abs() < 1e-9,
                "{:.4} USD/h for {:.4} planned",
                self.cost,
                self.planned_cost
            );
        }
        let re_checked: usize = later.iter().map(|l| l.pods).sum();
        ensure!(
            self.in_wave + re_checked >= self.pods,
            "{} of {} pods on the nodes launched for them",
            self.in_wave,
            self.pods
        );
        Ok(())
    }

    /// One line, the same for every e2e that measures it, for a table over runs.
    fn print(&self, test: &str) {
        use carpool::run::provision::report::quantile;
        eprintln!(
            "LANDING {test}: {}/{n} pods on the planned node, {}/{n} on an equivalent one (same zone and capacity type), {}/{n} in the wave; {} nodes ({} planned), {:.4} USD/h ({:.4} planned); pending -> CreateFleet p50 {:?} p99 {:?} ms; pending -> Running p50 {:?} p99 {:?} ms",
            self.exact,
            self.equivalent,
            self.in_wave,
            self.nodes,
            self.planned_nodes,
            self.cost,
            self.planned_cost,
            quantile(&self.to_fleet_ms, 0.5),
            quantile(&self.to_fleet_ms, 0.99),
            quantile(&self.to_running_ms, 0.5),
            quantile(&self.to_running_ms, 0.99),
            n = self.pods,
        );
    }
}

async fn fifty(scene: &Scene) -> Result<()> {
    let clock = PodClock::start(scene.kube.clone(), &scene.name);
    scene.deployment("small", 20, "250m", "512Mi").await?;
    scene.deployment("medium", 20, "500m", "1Gi").await?;
    scene.deployment("large", 10, "1", "2Gi").await?;
    scene.wait_unschedulable(50).await?;
    let releases = ReleaseLog::start(scene.kube.clone(), WAVE_TAINT);

    let app = scene
        .app(scene.cloud().await?, TokioClock, Duration::from_secs(20))
        .await?;
    let report = app.handle("run-1", deadline(Duration::from_secs(60))).await?;
    ensure!(report.launched().count() > 0, "{report:?}");
    let first = report.batches.first().context("a batch")?;
    ensure!(
        first.pods_on_new_nodes == 50,
        "the first batch plans every pod onto a new node: {:?}",
        report.batches
    );
    eprintln!(
        "batches (pods seen, nodes launched, pods on them): {:?}",
        report
            .batches
            .iter()
            .map(|b| (b.pods_seen, b.launched.len(), b.pods_on_new_nodes))
            .collect::<Vec<_>>()
    );
    print_wave(&report);
    let pods = scene.wait_running(50).await;
    print_schedule(scene, releases, &report).await?;
    let pods = pods?;
    let landing = Landing::read(scene, &report, &pods, &clock.stop().await?).await?;
    landing.print("fifty");
    landing.expect_as_planned(&report)?;
    // A run right after: every pod is provided for; nothing more is launched.
    let again = app.handle("run-2", deadline(Duration::from_secs(30))).await?;
    ensure!(again.launched().count() == 0, "{:?}", again.batches);

    // Five more pods, and two runs at once: the lease lets one of them work.
    let api: Api<DynamicObject> = Api::namespaced_with(
        scene.kube.clone(),
        &scene.name,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("apps", "v1", "Deployment"), "deployments"),
    );
    api.patch(
        "large",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"replicas": 15}})),
    )
    .await?;
    // kube-scheduler may bind some of the five to room left on the nodes already there
    // (the plan's slack, or a second batch's node): wait until each new pod is bound or
    // marked unschedulable, and expect Carpool to launch for exactly those marked.
    let marked = scene.wait_bound_or_unschedulable(55).await?;
    let (a, b) = tokio::join!(
        app.handle("run-3", deadline(Duration::from_secs(30))),
        app.handle("run-4", deadline(Duration::from_secs(30)))
    );
    let (a, b): (RunReport, RunReport) = (a?, b?);
    ensure!(
        a.lease_held_by.is_some() != b.lease_held_by.is_some(),
        "exactly one run holds the lease: {:?} / {:?}",
        a.lease_held_by,
        b.lease_held_by
    );
    let worker = if a.lease_held_by.is_none() { &a } else { &b };
    // Each is provided for: on a new node, or on room a node has once the batch's other
    // pods are on their new nodes (the planner places a batch together, so a spread may
    // admit a pod there that kube-scheduler refused alone; it binds it when they come up).
    let planned = worker.batches.first().map_or(0, |b| b.pods_planned);
    let on_new: usize = worker.batches.iter().map(|b| b.pods_on_new_nodes).sum();
    ensure!(
        planned == marked && on_new <= marked && on_new > 0,
        "{marked} pods marked unschedulable: {:?}",
        worker.batches
    );
    scene.wait_running(55).await?;
    Ok(())
}

/// Prints how the first batch's plan was fitted to kube-scheduler and which nodes its
/// wave released, and why.
fn print_wave(report: &RunReport) {
    if let Some(first) = report.batches.first() {
        eprintln!("fitted to kube-scheduler: {:?}", first.fitting);
        eprintln!(
            "first batch: snapshot {} ms, plan {} ms, launch {} ms",
            first.snapshot_ms, first.plan_ms, first.launch_ms
        );
    }
    eprintln!(
        "handed to their pods: {:?}",
        report
            .handed
            .iter()
            .map(|h| (&h.wave, h.tier, h.pods))
            .collect::<Vec<_>>()
    );
    eprintln!(
        "released from their wave: {:?}",
        report
            .released
            .iter()
            .chain(report.housekeeping.iter().flat_map(|h| h.released.iter()))
            .map(|u| (&u.node, &u.why))
            .collect::<Vec<_>>()
    );
}

/// Prints, in time order, when each node of the wave lost its startup taint and where
/// kube-scheduler bound each pod: the trace that tells a stranded pod's story.
async fn print_schedule(
    scene: &Scene,
    releases: carpool_tests::schedule_log::ReleaseLog,
    report: &RunReport,
) -> Result<()> {
    let released = releases.stop().await?;
    let bound = carpool_tests::schedule_log::bindings(scene.kube.clone(), &scene.name).await?;
    let types: HashMap<String, String> = Api::<Node>::all(scene.kube.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| {
            let t = n
                .metadata
                .labels
                .as_ref()?
                .get("node.kubernetes.io/instance-type")?
                .clone();
            Some((n.metadata.name?, t))
        })
        .collect();
    // From the first hand-off, or else the first release or binding.
    let handed = report
        .handed
        .iter()
        .map(|h| SystemTime::UNIX_EPOCH + Duration::from_millis(h.at.unsigned_abs()));
    let Some(start) = handed
        .chain(released.values().copied())
        .chain(bound.iter().map(|b| b.at))
        .min()
    else {
        return Ok(());
    };
    let ms = |t: SystemTime| t.duration_since(start).map_or(0, |d| d.as_millis());
    let mut lines: Vec<(SystemTime, String)> = released
        .iter()
        .map(|(n, t)| {
            (
                *t,
                format!("released {n} ({})", types.get(n).map_or("?", String::as_str)),
            )
        })
        .collect();
    lines.extend(report.handed.iter().map(|h| {
        (
            SystemTime::UNIX_EPOCH + Duration::from_millis(h.at.unsigned_abs()),
            format!("handed tier {} of {} to {} pods", h.tier, h.wave, h.pods),
        )
    }));
    lines.extend(bound.iter().map(|b| {
        let app = b.pod.split('-').next().unwrap_or("");
        (
            b.at,
            format!(
                "bound {app} {} -> {} ({})",
                b.pod,
                b.node,
                types.get(&b.node).map_or("?", String::as_str)
            ),
        )
    }));
    let failed = carpool_tests::schedule_log::failures(scene.kube.clone(), &scene.name).await?;
    lines.extend(failed.iter().filter(|f| f.at >= start).map(|f| {
        let app = f.pod.split('-').next().unwrap_or("");
        let said: String = f.message.chars().take(240).collect();
        (f.at, format!("failed {app} {}: {said}", f.pod))
    }));
    lines.sort_by_key(|l| l.0);
    for (t, line) in lines {
        eprintln!("SCHEDULE +{}ms {line}", ms(t));
    }
    Ok(())
}

// The stress case: no spread to hold the scheduler to the plan, and the pods created
// smallest first, so that kube-scheduler's queue (queuesort/priority_sort.go `Less`: the
// older first) hands it the tiny pods first and its least-allocated scoring
// (noderesources/least_allocated.go) spreads them over the biggest, emptiest nodes, the
// room the plan kept for the 3-CPU pods created last; memory-heavy pods mix the ratios.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn mixed_sizes_created_smallest_first_run_on_the_nodes_one_handler_run_launched() -> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::new("e2e-mixed", None).await?;
    let harness = scene.harness().await?;
    let result = mixed(&scene).await;
    scene.finish(Some(harness), result).await
}

async fn mixed(scene: &Scene) -> Result<()> {
    const PODS: usize = 48;
    let clock = PodClock::start(scene.kube.clone(), &scene.name);
    for (app, replicas, cpu, memory) in [
        ("tiny", 24, "100m", "256Mi"),
        ("small", 12, "500m", "1Gi"),
        ("mem", 6, "1", "6Gi"),
        ("large", 6, "3", "4Gi"),
    ] {
        scene.deployment_with(app, replicas, cpu, memory, false).await?;
        // Creation times a second apart at least (the apiserver keeps them to the second).
        tokio::time::sleep(Duration::from_millis(1_100)).await;
    }
    scene.wait_unschedulable(PODS).await?;
    let releases = ReleaseLog::start(scene.kube.clone(), WAVE_TAINT);
    let app = scene
        .app(scene.cloud().await?, TokioClock, Duration::from_secs(20))
        .await?;
    let report = app.handle("run-1", deadline(Duration::from_secs(60))).await?;
    let first = report.batches.first().context("a batch")?;
    ensure!(first.pods_on_new_nodes == PODS, "{:?}", report.batches);
    print_wave(&report);
    let pods = scene.wait_running(PODS).await;
    print_schedule(scene, releases, &report).await?;
    let pods = pods?;
    let landing = Landing::read(scene, &report, &pods, &clock.stop().await?).await?;
    landing.print("mixed");
    landing.expect_as_planned(&report)?;
    let again = app.handle("run-2", deadline(Duration::from_secs(30))).await?;
    ensure!(again.launched().count() == 0, "{:?}", again.batches);
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_nodepool_limit_stops_launches_at_the_limit_and_reports_the_pods_left_over() -> Result<()> {
    let _stack = exclusive().await;
    let mut scene = Scene::new("e2e-limit", Some(json!({"cpu": "8"}))).await?;
    // No harness: its nodes never come up, so no wave to wait for.
    scene.waves = false;
    let result = async {
        scene.deployment("big", 20, "1", "1Gi").await?;
        scene.wait_unschedulable(20).await?;
        let app = scene
            .app(scene.cloud().await?, TokioClock, Duration::from_secs(3))
            .await?;
        let report = app.handle("run-1", deadline(Duration::from_secs(60))).await?;
        let catalog = Catalog::embedded()?;
        let cpus: i64 = report
            .launched()
            .map(|l| catalog.get(&l.instance_type).map_or(0, |t| t.capacity.cpu_millis))
            .sum();
        ensure!(
            cpus > 0 && cpus <= 8000,
            "{cpus}m launched under an 8-CPU limit: {:?}",
            report.batches
        );
        let batch = report.batches.first().context("a batch")?;
        let left: Vec<_> = batch.unschedulable.iter().filter(|u| u.has(Kind::Limits)).collect();
        ensure!(!left.is_empty(), "{:?}", batch.unschedulable);
        ensure!(batch.pods_on_new_nodes + left.len() == 20, "{batch:?}");
        eprintln!(
            "limit: {} pods on {cpus}m of new CPU, {} left over, e.g. {:?}",
            batch.pods_on_new_nodes,
            left.len(),
            left[0]
        );
        Ok(())
    }
    .await;
    scene.finish(None, result).await
}

/// EC2 through the real adapter, except that the first launch finds its cheapest
/// offering out of capacity, as CreateFleet reports it (moto never does).
struct OutOfCapacityOnce<C> {
    inner: C,
    failed: std::sync::Mutex<Option<OfferingKey>>,
}

impl<C: Cloud> Cloud for OutOfCapacityOnce<C> {
    async fn launch(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        let offering = OfferingKey {
            instance_type: request.instance_types[0].clone(),
            zone: request.zone.clone(),
            capacity_type: request.capacity_type,
        };
        {
            let mut failed = self.failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if failed.is_none() {
                *failed = Some(offering.clone());
                return Err(CloudError::InsufficientCapacity {
                    offerings: vec![offering],
                });
            }
        }
        let mut rest = request.clone();
        rest.instance_types.retain(|t| {
            self.failed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_ref()
                .is_none_or(|f| {
                    !(f.instance_type == *t && f.zone == request.zone && f.capacity_type == request.capacity_type)
                })
        });
        self.inner.launch(&rest).await
    }
    async fn network(&self, node_class: &EC2NodeClass) -> Result<carpool::ports::ResolvedNetwork, CloudError> {
        self.inner.network(node_class).await
    }
    async fn instance_profile(
        &self,
        node_class: &EC2NodeClass,
        deployment: &str,
    ) -> Result<Option<String>, CloudError> {
        self.inner.instance_profile(node_class, deployment).await
    }
    async fn images(&self, node_class: &EC2NodeClass) -> Result<Vec<carpool::ports::ResolvedImage>, CloudError> {
        self.inner.images(node_class).await
    }
    async fn get(&self, id: &str) -> Result<Instance, CloudError> {
        self.inner.get(id).await
    }
    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.inner.list().await
    }
    async fn terminate(&self, id: &str) -> Result<(), CloudError> {
        self.inner.terminate(id).await
    }
    async fn spot_prices(&self, types: &[String]) -> Result<Vec<SpotPrice>, CloudError> {
        self.inner.spot_prices(types).await
    }
    async fn on_demand_prices(&self, types: &[String]) -> Result<Vec<OnDemandPrice>, CloudError> {
        self.inner.on_demand_prices(types).await
    }
    async fn offerings(&self) -> Result<Vec<ZonalOffering>, CloudError> {
        self.inner.offerings().await
    }
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn insufficient_capacity_on_the_cheapest_offering_launches_the_next_best_in_the_same_run() -> Result<()> {
    let _stack = exclusive().await;
    let mut scene = Scene::new("e2e-ice", None).await?;
    // No harness: its nodes never come up, so no wave to wait for.
    scene.waves = false;
    let result = async {
        scene.deployment("web", 4, "500m", "1Gi").await?;
        scene.wait_unschedulable(4).await?;
        let cloud = OutOfCapacityOnce {
            inner: scene.cloud().await?,
            failed: std::sync::Mutex::new(None),
        };
        let app = scene.app(cloud, TokioClock, Duration::from_secs(3)).await?;
        let report = app.handle("run-1", deadline(Duration::from_secs(60))).await?;
        let failed = app
            .cloud
            .failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let failed = failed.context("a launch was failed")?;
        let batch = report.batches.first().context("a batch")?;
        ensure!(batch.rounds >= 2, "{batch:?}");
        ensure!(!batch.launch_errors.is_empty());
        ensure!(!batch.launched.is_empty(), "{batch:?}");
        for l in &batch.launched {
            ensure!(
                !(l.instance_type == failed.instance_type
                    && l.zone == failed.zone
                    && l.capacity_type == failed.capacity_type),
                "{l:?} is the offering that failed"
            );
        }
        ensure!(batch.pods_on_new_nodes == 4);
        let unavailable = app.store.unavailable_offerings(SystemTime::now()).await?;
        ensure!(
            unavailable
                .iter()
                .any(|u| u.instance_type == failed.instance_type && u.zone == failed.zone)
        );
        eprintln!("after {failed:?} ran out: launched {:?}", batch.launched);
        Ok(())
    }
    .await;
    scene.finish(None, result).await
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn an_instance_that_never_registers_is_terminated_after_the_registration_ttl() -> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::new("e2e-ttl", None).await?;
    let result = async {
        scene.deployment("web", 2, "250m", "256Mi").await?;
        scene.wait_unschedulable(2).await?;
        // No harness: the instance never becomes a Node. The test clock stands in for time.
        let clock = FakeClock::at(SystemTime::now());
        let app = scene.app(scene.cloud().await?, clock, Duration::from_secs(3)).await?;
        let report = app.handle("run-1", SystemTime::now() + Duration::from_secs(60)).await?;
        let id = report.launched().next().context("a launch")?.instance_id.clone();
        // The pods go away; fifteen minutes later the next run cleans up.
        Api::<DynamicObject>::namespaced_with(
            scene.kube.clone(),
            &scene.name,
            &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("apps", "v1", "Deployment"), "deployments"),
        )
        .delete("web", &DeleteParams::default())
        .await?;
        app.clock.advance(Duration::from_secs(901));
        let later = app
            .handle(
                "run-2",
                carpool::ports::Clock::now(&app.clock) + Duration::from_secs(60),
            )
            .await?;
        let why = expect_terminated(&app.cloud, &later, &id, "did not register").await?;
        eprintln!("terminated {id}: {why}");
        Ok(())
    }
    .await;
    scene.finish(None, result).await
}

/// Issue 26: `kubectl delete node` on a Carpool node drains it, then terminates its
/// instance, as Karpenter's termination finalizer does (`Controller.finalize` in
/// kubernetes-sigs/karpenter `pkg/controllers/node/termination/controller.go`): the
/// provisioner's housekeeping puts `carpool.sh/termination` on the Node when it
/// registers, the delete only marks it, and the interruption function's sweep evicts its
/// pods (each shutting down for its grace period), terminates the instance and removes
/// the finalizer, and the Node goes.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn kubectl_delete_node_drains_the_node_then_terminates_its_instance() -> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::new("e2e-delnode", None).await?;
    let harness = scene.harness().await?;
    let result = async {
        let mut d = scene.base.deployment("web", 2, "250m", "256Mi");
        d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(5);
        scene.base.create_deployment(d).await?;
        scene.wait_unschedulable(2).await?;
        let app = scene
            .app(scene.cloud().await?, TokioClock, Duration::from_secs(5))
            .await?;
        let report = app.handle("run-1", deadline(Duration::from_secs(60))).await?;
        let id = report.launched().next().context("a launch")?.instance_id.clone();
        scene.wait_running(2).await?;
        // The housekeeping of a run registers the node (its NODE# record) and puts the
        // finalizer on it.
        app.handle("run-2", deadline(Duration::from_secs(30))).await?;
        let nodes = Api::<Node>::all(scene.kube.clone());
        let listed = nodes
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|n| instance_of(n).as_deref() == Some(id.as_str()))
            .context("the instance's Node")?;
        let node = listed.metadata.name.clone().context("a Node without a name")?;
        ensure!(
            listed
                .metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == "carpool.sh/termination")),
            "no finalizer on {node}: {:?}",
            listed.metadata.finalizers
        );
        let before: HashSet<String> = scene
            .pods()
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();

        // `kubectl delete node`, as the admin: the Node is only marked.
        nodes.delete(&node, &DeleteParams::default()).await?;
        let marked = nodes.get_opt(&node).await?.context("the Node went at once")?;
        ensure!(marked.metadata.deletion_timestamp.is_some());

        // The interruption function's sweeps, a few seconds apart.
        let region = Catalog::embedded()?.region("us-east-1")?;
        let cluster = KubeCluster::new(scene.kube.clone());
        let settings = carpool::run::disruption::InterruptionSettings {
            provision: carpool::run::provision::Settings::from_config(&app.config, app.config.watch),
            drain_deadline: Duration::from_secs(20),
            ..carpool::run::disruption::InterruptionSettings::default()
        };
        let mut outcomes = Vec::new();
        for sweep in 0..12 {
            let disrupter = carpool::run::disruption::Disrupter::new(
                &app.cloud,
                &cluster,
                &app.store,
                &TokioClock,
                settings.clone(),
                &format!("sweep-{sweep}"),
            );
            let reports = disrupter
                .sweep(&region, SystemTime::now() + Duration::from_secs(30))
                .await?;
            outcomes.extend(reports.iter().map(|r| format!("{:?}", r.outcome)));
            if nodes.get_opt(&node).await?.is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        eprintln!("sweeps: {outcomes:?}");
        ensure!(
            nodes.get_opt(&node).await?.is_none(),
            "the Node is still there: {outcomes:?}"
        );
        let state = app.cloud.get(&id).await.map(|i| i.state);
        ensure!(
            matches!(
                state,
                Ok(InstanceState::ShuttingDown | InstanceState::Terminated) | Err(CloudError::NotFound { .. })
            ),
            "{state:?}"
        );
        // Its pods were evicted (their ReplicaSet made new ones), not lost with the Node.
        let after: HashSet<String> = scene
            .pods()
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        ensure!(
            before.is_disjoint(&after) && after.len() == 2,
            "before {before:?}, after {after:?}"
        );
        Ok(())
    }
    .await;
    scene.finish(Some(harness), result).await
}

/// That `report`'s housekeeping terminated instance `id` for a reason that says `because`,
/// and that EC2 has it going or gone; the reason.
async fn expect_terminated(cloud: &impl Cloud, report: &RunReport, id: &str, because: &str) -> Result<String> {
    let terminated: Vec<&(String, String)> = report.housekeeping.iter().flat_map(|h| &h.terminated).collect();
    let why = terminated
        .iter()
        .find(|(i, why)| i == id && why.contains(because))
        .map(|(_, why)| why.clone())
        .with_context(|| format!("{terminated:?}"))?;
    let state = cloud.get(id).await.map(|i| i.state);
    ensure!(
        matches!(
            state,
            Ok(InstanceState::ShuttingDown | InstanceState::Terminated) | Err(CloudError::NotFound { .. })
        ),
        "{state:?}"
    );
    Ok(why)
}

/// Karpenter's alpha NodeOverlay (cluster-scoped).
fn nodeoverlays() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", "v1alpha1", "NodeOverlay"),
        "nodeoverlays",
    )
}

// Issue 30: a NodeOverlay that makes m6i 30% cheaper turns the provisioner's launches to
// m6i where list prices choose m6a, and the launches are recorded at the adjusted price.
// The overlay is cluster-scoped, so the test holds the stack alone and deletes it after.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_nodeoverlay_making_m6i_30_percent_cheaper_turns_the_launches_to_m6i() -> Result<()> {
    let _stack = exclusive().await;
    let base = Base::with_pool("e2e-overlay", |pool| {
        pool.requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
            .requirement("karpenter.k8s.aws/instance-family", "In", &["m5", "m6a", "m6i"])
            .build()
    })
    .await?;
    // No harness: its nodes never come up, so no wave to wait for.
    let scene = Scene { base, waves: false };
    let overlay_name = format!("{}-m6i", scene.name);
    let overlays: Api<DynamicObject> = Api::all_with(scene.kube.clone(), &nodeoverlays());
    let result = async {
        scene.deployment_with("web", 8, "1", "3Gi", false).await?;
        scene.wait_unschedulable(8).await?;
        // At list prices, the same cluster is planned on m6a.
        let kube = KubeCluster::new(scene.kube.clone());
        let snapshot = carpool::run::observe::read_snapshot(&kube).await?;
        let region = Catalog::embedded()?.region("us-east-1")?;
        let listed = carpool::decide::provisioning_plan(&snapshot, &region);
        let listed_families: HashSet<String> = listed
            .nodes
            .iter()
            .filter(|n| n.nodepool == scene.name)
            .map(|n| n.instance_type.split('.').next().unwrap_or_default().to_string())
            .collect();
        ensure!(
            listed_families == HashSet::from(["m6a".to_string()]),
            "list prices plan {listed_families:?}"
        );

        let overlay = json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": overlay_name},
            "spec": {
                "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m6i"]}],
                "priceAdjustment": "-30%",
            },
        });
        overlays
            .create(&kube::api::PostParams::default(), &serde_json::from_value(overlay)?)
            .await?;
        let cloud = scene.cloud().await?;
        let app = scene.app(cloud, TokioClock, Duration::from_secs(3)).await?;
        let report = app.handle("run-1", deadline(Duration::from_secs(60))).await?;
        let batch = report.batches.first().context("a batch")?;
        ensure!(batch.pods_on_new_nodes == 8, "{batch:?}");
        ensure!(
            !batch.skipped.iter().any(|s| s.object.starts_with("NodeOverlay/")),
            "{:?}",
            batch.skipped
        );
        let catalog = Catalog::embedded()?;
        for l in report.launched() {
            ensure!(l.instance_type.starts_with("m6i."), "launched {l:?}");
            let it = catalog.get(&l.instance_type).context("a known type")?;
            let list = region
                .prices()
                .list_price(it, &l.zone, l.capacity_type)
                .context("a list price")?;
            ensure!(
                (l.price_per_hour - 0.7 * list).abs() < 1e-9,
                "{l:?} is recorded at {} against a list price of {list}",
                l.price_per_hour
            );
            // What moto launched.
            let instance = app.cloud.get(&l.instance_id).await?;
            ensure!(instance.instance_type == l.instance_type, "{instance:?}");
        }
        eprintln!(
            "with the overlay: {:?}",
            report
                .launched()
                .map(|l| (&l.instance_type, l.price_per_hour))
                .collect::<Vec<_>>()
        );
        Ok(())
    }
    .await;
    let deleted = overlays.delete(&overlay_name, &DeleteParams::default()).await;
    let result = scene.finish(None, result).await;
    if let Err(e) = deleted
        && !matches!(&e, kube::Error::Api(s) if s.code == 404)
    {
        eprintln!("could not delete NodeOverlay {overlay_name}: {e}");
    }
    result
}
