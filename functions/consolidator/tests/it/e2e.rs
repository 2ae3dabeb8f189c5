//! End to end on the local stack: a Deployment scaled from 40 pods down to 8 is
//! consolidated by the consolidator's runs, against the real apiserver, kube-scheduler,
//! disruption controller and Eviction API, moto's EC2 and DynamoDB, with the harness
//! playing the kubelet. The PDB's status is watched throughout; a pod annotated
//! `karpenter.sh/do-not-disrupt` keeps its node.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use carpool::catalog::Catalog;
use carpool::decide::disruption::DisruptionCommand;
use carpool::ports::{Cloud, StateStore};
use carpool::run::consolidate::{ConsolidationSettings, Consolidator};
use carpool_adapters::kube_cluster::KubeCluster;
use carpool_tests::scene::{Scene as Base, resource};
use carpool_tests::{exclusive, wait};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

pub(crate) const WAIT: Duration = Duration::from_secs(240);

/// The shared scene, and the clock of this test's runs.
pub(crate) struct Scene {
    pub(crate) base: Base,
    /// How far the runs' clock is ahead of the wall clock: a test moves it on after
    /// killing a run, as the next scheduled run comes once the dead run's lease lapsed.
    ahead: std::sync::Mutex<Duration>,
}

impl std::ops::Deref for Scene {
    type Target = Base;

    fn deref(&self) -> &Base {
        &self.base
    }
}

/// The wall clock, `ahead` of it.
struct AheadClock(Duration);

impl carpool::ports::Clock for AheadClock {
    fn now(&self) -> SystemTime {
        SystemTime::now() + self.0
    }
}

impl carpool::ports::Timer for AheadClock {
    fn sleep(&self, duration: Duration) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(duration))
    }
}

impl Scene {
    async fn new(prefix: &str) -> Result<Self> {
        Self::with_budget(prefix, "100%").await
    }

    async fn with_budget(prefix: &str, budget: &str) -> Result<Self> {
        Self::build(prefix, budget, &["on-demand"], None).await
    }

    /// A scene whose NodePool allows `capacity` types, of the instance `families` when given.
    pub(crate) async fn build(
        prefix: &str,
        budget: &str,
        capacity: &[&str],
        families: Option<&[&str]>,
    ) -> Result<Self> {
        Self::build_with(prefix, budget, capacity, families, None).await
    }

    /// [`Scene::build`], with the NodePool's `terminationGracePeriod` when given.
    async fn build_with(
        prefix: &str,
        budget: &str,
        capacity: &[&str],
        families: Option<&[&str]>,
        termination_grace: Option<&str>,
    ) -> Result<Self> {
        let base = Base::with_pool(prefix, |pool| {
            let pool = pool.requirement("karpenter.sh/capacity-type", "In", capacity);
            let pool = match families {
                Some(f) => pool.requirement("karpenter.k8s.aws/instance-family", "In", f),
                None => pool,
            };
            let mut pool = pool.build();
            pool["spec"]["disruption"] = json!({"consolidateAfter": "0s", "budgets": [{"nodes": budget}]});
            if let Some(tgp) = termination_grace {
                pool["spec"]["template"]["spec"]["terminationGracePeriod"] = json!(tgp);
            }
            pool
        })
        .await?;
        Ok(Scene {
            base,
            ahead: std::sync::Mutex::new(Duration::ZERO),
        })
    }

    /// A scene whose NodePool consolidates with Karpenter's `Balanced` policy, which the
    /// real NodePool CRD (kubernetes-sigs/karpenter v1.15, installed by the local stack)
    /// accepts.
    async fn balanced(prefix: &str) -> Result<Self> {
        let base = Base::with_pool(prefix, |pool| {
            let mut pool = pool
                .requirement("karpenter.sh/capacity-type", "In", &["on-demand"])
                .build();
            pool["spec"]["disruption"] = json!({"consolidationPolicy": "Balanced", "consolidateAfter": "0s",
                "budgets": [{"nodes": "100%"}]});
            pool
        })
        .await?;
        Ok(Scene {
            base,
            ahead: std::sync::Mutex::new(Duration::ZERO),
        })
    }

    /// A Deployment of `replicas` pods selecting this test's NodePool; `annotations` on
    /// its pods.
    pub(crate) async fn deployment(
        &self,
        app: &str,
        replicas: i32,
        cpu: &str,
        annotations: serde_json::Value,
    ) -> Result<()> {
        let mut d = self.base.deployment(app, replicas, cpu, "512Mi");
        d["spec"]["template"]["metadata"]["annotations"] = annotations;
        d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(2);
        self.create_deployment(d).await
    }

    pub(crate) async fn scale(&self, app: &str, replicas: i32) -> Result<()> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.kube.clone(),
            &self.name,
            &resource("apps", "v1", "Deployment", "deployments"),
        );
        api.patch(
            app,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn running(&self) -> Result<Vec<Pod>> {
        Ok(self
            .pods()
            .await?
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .collect())
    }

    pub(crate) async fn wait_running(&self, n: usize) -> Result<Vec<Pod>> {
        wait::until(&format!("{n} pods Running"), WAIT, async || {
            let pods = self.running().await?;
            if pods.len() == n && self.pods().await?.len() == n {
                Ok(pods)
            } else {
                bail!("{} of {n} Running", pods.len())
            }
        })
        .await
    }

    /// This test's nodes: name, instance type, capacity type.
    pub(crate) async fn nodes(&self) -> Result<Vec<(String, String, String)>> {
        Ok(Api::<Node>::all(self.kube.clone())
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|n| {
                let l = n.metadata.labels?;
                (l.get("karpenter.sh/nodepool") == Some(&self.name)).then(|| {
                    (
                        n.metadata.name.unwrap_or_default(),
                        l.get("node.kubernetes.io/instance-type").cloned().unwrap_or_default(),
                        l.get("karpenter.sh/capacity-type").cloned().unwrap_or_default(),
                    )
                })
            })
            .collect())
    }

    /// One consolidator run, as the Lambda makes it (a short re-check).
    pub(crate) async fn consolidate(&self, owner: &str) -> Result<carpool::run::consolidate::ConsolidationReport> {
        let store = self.store().await?;
        self.consolidate_on(&store, owner).await
    }

    /// Consolidator runs, `pause` apart, until two in a row neither command nor step (at
    /// most `runs`), none rolling back: the methods of the commands made.
    pub(crate) async fn settle(
        &self,
        prefix: &str,
        runs: usize,
        pause: Duration,
    ) -> Result<Vec<carpool::decide::disruption::Method>> {
        let mut methods = Vec::new();
        let mut quiet = 0;
        for run in 0..runs {
            let report = self.consolidate(&format!("{prefix}-{run}")).await?;
            ensure!(report.rolled_back.is_empty(), "rolled back: {:?}", report.rolled_back);
            quiet = if report.command.is_none() && report.steps.is_empty() {
                quiet + 1
            } else {
                0
            };
            methods.extend(report.command.map(|c| c.method));
            if quiet == 2 {
                return Ok(methods);
            }
            tokio::time::sleep(pause).await;
        }
        bail!("the consolidator did not settle: {methods:?}")
    }

    /// One consolidator run in dry run.
    async fn consolidate_dry(&self, owner: &str) -> Result<carpool::run::consolidate::ConsolidationReport> {
        let store = self.store().await?;
        self.run_on(&store, owner, true).await
    }

    /// One consolidator run on `store`.
    async fn consolidate_on<S: StateStore>(
        &self,
        store: &S,
        owner: &str,
    ) -> Result<carpool::run::consolidate::ConsolidationReport> {
        self.run_on(store, owner, false).await
    }

    async fn run_on<S: StateStore>(
        &self,
        store: &S,
        owner: &str,
        dry_run: bool,
    ) -> Result<carpool::run::consolidate::ConsolidationReport> {
        let cloud = self.cloud().await?;
        let cluster = KubeCluster::new(self.kube.clone());
        let region = Catalog::embedded()?.region("us-east-1")?;
        let mut settings = ConsolidationSettings {
            recheck_delay: Duration::from_secs(2),
            drain_slice: Duration::from_secs(30),
            ..ConsolidationSettings::from_config(&self.config()?)
        };
        settings.provision.dry_run = dry_run;
        let clock = AheadClock(*self.ahead.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
        let until = carpool::ports::Clock::now(&clock) + Duration::from_secs(90);
        let c = Consolidator::new(&cloud, &cluster, store, &clock, settings, owner);
        Ok(c.run(&region, until).await?)
    }
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_deployment_scaled_from_forty_to_four_is_consolidated_with_its_pdb_held_and_the_do_not_disrupt_pod_kept()
-> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::new("e2e-cons").await?;
    let harness = scene.harness().await?;
    let result = scaled_down(&scene).await;
    scene.finish(harness, result).await
}

async fn scaled_down(scene: &Scene) -> Result<()> {
    scene.deployment("web", 40, "500m", json!({})).await?;
    scene
        .deployment("keeper", 1, "100m", json!({"karpenter.sh/do-not-disrupt": "true"}))
        .await?;
    let p = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": scene.name},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "web"}}}});
    Api::<PodDisruptionBudget>::namespaced(scene.kube.clone(), &scene.name)
        .create(&PostParams::default(), &serde_json::from_value(p)?)
        .await?;
    wait::unschedulable(&scene.kube, &scene.name, 41, WAIT).await?;
    let first = scene.provision(Duration::from_secs(30)).await?;
    ensure!(first.launched().count() >= 2, "{first:?}");
    scene.wait_running(41).await?;
    let before = scene.nodes().await?;
    eprintln!("before the scale-down: {} nodes {before:?}", before.len());

    scene.scale("web", 4).await?;
    let running = scene.wait_running(5).await?;
    let keeper_node = running
        .iter()
        .find(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .map(String::as_str)
                == Some("keeper")
        })
        .and_then(|p| p.spec.as_ref()?.node_name.clone())
        .context("the keeper's node")?;

    // Issue 26, item 8: in dry run the consolidator reports the command it would run and
    // changes nothing: no taint, eviction, record, launch or termination.
    let instances: Vec<String> = scene.cloud().await?.list().await?.into_iter().map(|i| i.id).collect();
    let mut would = Vec::new();
    for run in 0..3 {
        let report = scene.consolidate_dry(&format!("dry-{run}")).await?;
        if let Some(command) = &report.command {
            eprintln!("dry run {run}: would {:?} {:?}", command.method, command.nodes);
            would.push(command.method);
        }
        ensure!(report.evicted == 0 && report.steps.is_empty(), "{report:?}");
        ensure!(
            scene.store().await?.list_disruptions().await?.is_empty(),
            "dry run wrote a record"
        );
        let tainted: Vec<String> = Api::<Node>::all(scene.kube.clone())
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| t.iter().any(|t| t.key == "carpool.sh/disrupted"))
            })
            .filter_map(|n| n.metadata.name)
            .collect();
        ensure!(tainted.is_empty(), "dry run tainted {tainted:?}");
        let now: Vec<String> = scene.cloud().await?.list().await?.into_iter().map(|i| i.id).collect();
        ensure!(now == instances, "dry run launched or terminated");
    }
    ensure!(!would.is_empty(), "the dry runs reported no command");

    let (stop, fewest, violations, watcher) = scene.watch_pdb("web");
    let mut commands: Vec<DisruptionCommand> = Vec::new();
    let mut evicted = 0;
    let mut quiet = 0;
    for run in 0..16 {
        let report = scene.consolidate(&format!("cons-{run}")).await?;
        eprintln!(
            "run {run}: command {:?} steps {:?} rolled back {:?} evicted {} abandoned {:?}",
            report
                .command
                .as_ref()
                .map(|c| (c.method, c.nodes.clone(), c.savings_per_hour)),
            report.steps,
            report.rolled_back,
            report.evicted,
            report.abandoned
        );
        ensure!(report.rolled_back.is_empty(), "rolled back: {:?}", report.rolled_back);
        commands.extend(report.command.clone());
        evicted += report.evicted;
        let idle = report.command.is_none() && report.steps.is_empty();
        quiet = if idle { quiet + 1 } else { 0 };
        if quiet == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    ensure!(quiet == 2, "the consolidator did not settle: {commands:?}");
    scene.wait_running(5).await?;
    stop.store(true, Ordering::SeqCst);
    watcher.await?;
    ensure!(
        violations.load(Ordering::SeqCst) == 0,
        "the PDB had fewer healthy pods than desired"
    );
    eprintln!(
        "fewest healthy web pods during consolidation: {}",
        fewest.load(Ordering::SeqCst)
    );

    let after = scene.nodes().await?;
    eprintln!(
        "after: {} nodes {after:?}; commands: {:?}",
        after.len(),
        commands
            .iter()
            .map(|c| (c.method, c.nodes.len(), c.savings_per_hour))
            .collect::<Vec<_>>()
    );
    ensure!(!commands.is_empty(), "nothing was consolidated");
    // The scale-down empties the biggest node: the ReplicaSet deletes first the pods on the
    // node with the most of their kind (`getPodsToDelete` ranks by
    // `getPodsRankedByRelatedPodsOnSameNode`, pkg/controller/replicaset/replica_set.go), and
    // the replacement of another node must then evict through the PDB.
    ensure!(evicted > 0, "no pod was evicted, so the PDB was never put to the test");
    ensure!(
        after.len() < before.len(),
        "{} nodes before, {} after",
        before.len(),
        after.len()
    );
    ensure!(
        after.iter().any(|(n, _, _)| n == &keeper_node),
        "the do-not-disrupt pod's node {keeper_node} was removed"
    );
    for c in &commands {
        ensure!(
            !c.nodes.contains(&keeper_node),
            "a command touched the do-not-disrupt node: {c:?}"
        );
        if c.nodes.len() == 1 {
            let removed = before
                .iter()
                .find(|(n, _, _)| n == &c.nodes[0])
                .map(|(_, t, _)| t.clone());
            for r in &c.replacements {
                ensure!(
                    removed.as_ref().is_none_or(|t| !r.instance_types.contains(t)),
                    "{} replaced by its own type: {c:?}",
                    c.nodes[0]
                );
            }
        }
    }
    ensure!(scene.store().await?.list_disruptions().await?.is_empty());

    // The cheapest valid set: the do-not-disrupt pod pins its node, so what is left costs
    // no more than that node plus planning afresh, around it, the pods that are not on it.
    // (The pin can cost more than planning every pod afresh: the pinned node's spare room
    // may be too small for the rest, which then needs a node of its own.)
    let region = Catalog::embedded()?.region("us-east-1")?;
    let price = |t: &str| {
        region
            .types()
            .iter()
            .find(|it| it.name == t)
            .and_then(|it| region.prices().on_demand(&it.name))
            .unwrap_or(0.0)
    };
    let left: f64 = after.iter().map(|(_, t, _)| price(t)).sum();
    let pinned = after
        .iter()
        .find(|(n, _, _)| n == &keeper_node)
        .map_or(0.0, |(_, t, _)| price(t));
    let mut fresh = carpool::run::observe::read_snapshot(&KubeCluster::new(scene.kube.clone())).await?;
    fresh
        .nodes
        .retain(|n| n.metadata.name.as_deref() == Some(keeper_node.as_str()));
    fresh
        .pods
        .retain(|p| p.metadata.namespace.as_deref() == Some(scene.name.as_str()));
    for p in &mut fresh.pods {
        let Some(spec) = p.spec.as_mut() else { continue };
        if spec.node_name.as_deref() == Some(keeper_node.as_str()) {
            continue;
        }
        spec.node_name = None;
        p.status = Some(serde_json::from_value(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}))?);
    }
    let plan = carpool::decide::provisioning_plan(&fresh, &region);
    let bound = pinned + plan.cost_per_hour;
    eprintln!(
        "left ${left:.4}/h; the pinned node ${pinned:.4}/h and the other pods planned afresh around it ${:.4}/h",
        plan.cost_per_hour
    );
    ensure!(left <= bound * 1.05 + 1e-9, "${left:.4}/h left, ${bound:.4}/h would do");
    Ok(())
}

/// Counts, while it runs, the most nodes of the scene tainted `carpool.sh/disrupted` at once.
fn watch_disrupted(scene: &Scene) -> (Arc<AtomicBool>, Arc<AtomicI32>, tokio::task::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicI32::new(0));
    let nodes = Api::<Node>::all(scene.kube.clone());
    let pool = scene.name.clone();
    let (s, m) = (stop.clone(), most.clone());
    let task = tokio::spawn(async move {
        while !s.load(Ordering::SeqCst) {
            if let Ok(list) = nodes.list(&ListParams::default()).await {
                let tainted = list
                    .items
                    .iter()
                    .filter(|n| n.metadata.labels.as_ref().and_then(|l| l.get("karpenter.sh/nodepool")) == Some(&pool))
                    .filter(|n| {
                        n.spec
                            .as_ref()
                            .and_then(|s| s.taints.as_ref())
                            .is_some_and(|ts| ts.iter().any(|t| t.key == "carpool.sh/disrupted"))
                    })
                    .count();
                m.fetch_max(i32::try_from(tainted).unwrap_or(i32::MAX), Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    (stop, most, task)
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_budget_of_one_node_and_runs_killed_after_the_taint_and_after_the_launch_each_resume_without_launching_twice()
-> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::with_budget("e2e-cons-crash", "1").await?;
    let harness = scene.harness().await?;
    let result = budget_and_crashes(&scene).await;
    scene.finish(harness, result).await
}

/// Runs the consolidator on a store that dies at `call`, dropping the run when it hangs
/// there (as a Lambda timeout would); `true` when it died.
async fn killed_at(scene: &Scene, call: &str, owner: &str) -> Result<bool> {
    let store = scene.store().await?;
    let point = carpool::fakes::CrashPoint::at(call, 0);
    let dying = carpool::fakes::Crashable::new(&store, &point);
    let run = tokio::time::timeout(Duration::from_secs(60), scene.consolidate_on(&dying, owner)).await;
    match run {
        Err(_) if point.fired() => {
            // The next scheduled run comes once the dead run's lease has lapsed.
            *scene.ahead.lock().map_err(|_| anyhow::anyhow!("poisoned"))? += Duration::from_secs(300);
            Ok(true)
        }
        Err(_) => bail!("the run hung without the store dying"),
        Ok(report) => {
            let report = report?;
            eprintln!(
                "{owner}: not killed: {:?}",
                report.command.as_ref().map(|c| (c.method, c.nodes.clone()))
            );
            Ok(false)
        }
    }
}

async fn budget_and_crashes(scene: &Scene) -> Result<()> {
    scene.deployment("web", 30, "500m", json!({})).await?;
    wait::unschedulable(&scene.kube, &scene.name, 30, WAIT).await?;
    scene.provision(Duration::from_secs(30)).await?;
    scene.wait_running(30).await?;
    scene.scale("web", 3).await?;
    scene.wait_running(3).await?;
    let before = scene.nodes().await?;
    eprintln!("before: {before:?}");
    let (stop, most, watcher) = watch_disrupted(scene);
    let cloud = scene.cloud().await?;
    let launched = async || -> Result<usize> {
        Ok(cloud
            .list()
            .await?
            .iter()
            .filter(|i| i.launch_id.starts_with("disrupt-"))
            .count())
    };

    // Killed between the taint and the replacement's launch record (the runs before it,
    // whose commands launch nothing, go through).
    let mut killed_after_taint = false;
    for k in 0..6 {
        if killed_at(scene, "create_launch", &format!("kill-taint-{k}")).await? {
            killed_after_taint = true;
            break;
        }
    }
    ensure!(killed_after_taint, "no run launched a replacement");
    ensure!(launched().await? == 0, "nothing was launched before the kill");

    // The next run rolls it back and starts it afresh; it is killed right after the
    // replacement's launch, at its records' first update.
    let store = scene.store().await?;
    let point = carpool::fakes::CrashPoint::at("update_disruption", 0);
    let dying = carpool::fakes::Crashable::new(&store, &point);
    let run = tokio::time::timeout(Duration::from_secs(60), scene.consolidate_on(&dying, "after-kill-1")).await;
    ensure!(run.is_err() && point.fired(), "the second run was not killed: {run:?}");
    *scene.ahead.lock().map_err(|_| anyhow::anyhow!("poisoned"))? += Duration::from_secs(300);
    let with_kill = launched().await?;
    ensure!(with_kill == 1, "{with_kill} replacements launched");

    // The next runs resume it and launch nothing more.
    let report = scene.consolidate("after-kill-2").await?;
    eprintln!(
        "after the second kill: steps {:?}, rolled back {:?}",
        report.steps, report.rolled_back
    );
    ensure!(report.rolled_back.is_empty(), "{report:?}");
    let killed_after_launch = true;

    let mut quiet = 0;
    for run in 0..16 {
        let report = scene.consolidate(&format!("cons-{run}")).await?;
        ensure!(report.rolled_back.is_empty(), "rolled back: {:?}", report.rolled_back);
        if let Some(c) = &report.command {
            ensure!(
                c.nodes.len() == 1,
                "a budget of one node, and a command on {:?}",
                c.nodes
            );
        }
        quiet = if report.command.is_none() && report.steps.is_empty() {
            quiet + 1
        } else {
            0
        };
        if quiet == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    stop.store(true, Ordering::SeqCst);
    watcher.await?;
    ensure!(quiet == 2, "the consolidator did not settle");
    scene.wait_running(3).await?;
    let after = scene.nodes().await?;
    eprintln!(
        "after: {after:?}; killed after the taint: {killed_after_taint}, after the launch: {killed_after_launch}; \
         most nodes disrupted at once: {}",
        most.load(Ordering::SeqCst)
    );
    ensure!(most.load(Ordering::SeqCst) <= 1, "more than one node disrupted at once");
    ensure!(after.len() < before.len(), "nothing consolidated");
    ensure!(launched().await? == with_kill, "a replacement was launched twice");
    ensure!(scene.store().await?.list_disruptions().await?.is_empty());
    Ok(())
}

/// aws/karpenter-provider-aws #3480 and #7832: Karpenter leaves a node on on-demand after a
/// spot fallback. Here spot is out of capacity when the pods arrive (the provisioner's
/// `ICE#` records for every spot offering of the pool, as a capacity error leaves them), so
/// they land on on-demand; once those records lapse, the consolidator moves them to spot.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_node_on_demand_because_spot_ran_out_returns_to_spot_once_spot_is_available_again() -> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::build("e2e-cons-spot", "100%", &["spot", "on-demand"], Some(&["c6a", "m6a"])).await?;
    let harness = scene.harness().await?;
    let result = back_to_spot(&scene).await;
    scene.finish(harness, result).await
}

async fn back_to_spot(scene: &Scene) -> Result<()> {
    let store = scene.store().await?;
    let region = Catalog::embedded()?.region("us-east-1")?;
    let until = carpool::ports::epoch_millis(SystemTime::now() + Duration::from_secs(180));
    for t in region.types().iter().filter(|t| t.family == "c6a" || t.family == "m6a") {
        for z in region.zones() {
            store
                .mark_unavailable(&carpool::ports::UnavailableOffering {
                    instance_type: t.name.clone(),
                    zone: z.clone(),
                    capacity_type: carpool::model::CapacityType::Spot,
                    until,
                    reclaimed: false,
                })
                .await?;
        }
    }
    scene.deployment("web", 6, "500m", json!({})).await?;
    wait::unschedulable(&scene.kube, &scene.name, 6, WAIT).await?;
    scene.provision(Duration::from_secs(20)).await?;
    scene.wait_running(6).await?;
    let before = scene.nodes().await?;
    eprintln!("while spot is out: {before:?}");
    ensure!(
        !before.is_empty() && before.iter().all(|(_, _, c)| c == "on-demand"),
        "{before:?}"
    );
    // Spot is still out: nothing moves.
    let report = scene.consolidate("still-out").await?;
    ensure!(report.command.is_none(), "{:?}", report.command);

    // Four minutes later the records have lapsed.
    *scene.ahead.lock().map_err(|_| anyhow::anyhow!("poisoned"))? += Duration::from_secs(240);
    let methods = scene.settle("spot", 12, Duration::from_secs(2)).await?;
    scene.wait_running(6).await?;
    let after = scene.nodes().await?;
    eprintln!("after: {after:?}; methods {methods:?}");
    // Back on spot: node by node (return-to-spot), or merged onto one spot node when that
    // is cheaper still (multi-node consolidation, whose replacement may be spot).
    ensure!(!methods.is_empty(), "nothing moved back to spot");
    ensure!(
        !after.is_empty() && after.iter().all(|(_, _, c)| c == "spot"),
        "{after:?}"
    );
    Ok(())
}

// --- a class moved to another security group --------------------------------------------

/// Issue 28: a node whose instance's security groups are no longer its EC2NodeClass's is
/// drifted and replaced, on moto, whose instances report the launch template's groups
/// (infra/local/moto-server). Karpenter's `isSecurityGroupDrifted`
/// (aws/karpenter-provider-aws `pkg/cloudprovider/drift.go`): the instance's group ids,
/// compared as a set with the class's resolved ones.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_class_moved_to_another_security_group_replaces_its_nodes_with_nodes_in_that_group() -> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::build("e2e-cons-sg", "100%", &["on-demand"], Some(&["c6a"])).await?;
    let harness = scene.harness().await?;
    let result = moved_group(&scene).await;
    scene.finish(harness, result).await
}

async fn moved_group(scene: &Scene) -> Result<()> {
    scene.deployment("web", 3, "500m", json!({})).await?;
    wait::unschedulable(&scene.kube, &scene.name, 3, WAIT).await?;
    scene.provision(Duration::from_secs(20)).await?;
    scene.wait_running(3).await?;
    // Nothing drifts while the class is unchanged (the launch's own groups are the class's).
    let report = scene.consolidate("unchanged").await?;
    ensure!(report.command.is_none(), "{:?}", report.command);

    let group = scene.move_class_to_new_security_group("moved").await?;
    let methods = scene.settle("sg", 10, Duration::from_secs(2)).await?;
    ensure!(
        methods.contains(&carpool::decide::disruption::Method::Drift),
        "no drift: {methods:?}"
    );
    scene.wait_running(3).await?;
    let instances: Vec<_> = scene
        .cloud()
        .await?
        .list()
        .await?
        .into_iter()
        .filter(|i| i.nodepool == scene.name && !i.is_gone())
        .collect();
    ensure!(!instances.is_empty(), "no instance left");
    for i in &instances {
        ensure!(
            i.network.security_groups == [group.clone()],
            "{} is in {:?}, the class selects {group}",
            i.id,
            i.network.security_groups
        );
    }
    Ok(())
}

// --- the instance goes once its pods have shut down ------------------------------------

/// Issue 27: a node being consolidated is terminated only after its pods are gone, each
/// given its 30-s grace period (kwok's `pod-terminate` stage keeps an evicted pod
/// Terminating until its `deletionTimestamp`), and within the NodePool's
/// `terminationGracePeriod`. Karpenter's termination controller waits the same way
/// (`Controller.finalize`: `awaitDrain`, `awaitVolumeDetachment`, then the instance, in
/// kubernetes-sigs/karpenter `pkg/controllers/node/termination/controller.go`).
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_consolidated_node_is_terminated_only_after_its_pods_have_shut_down_and_within_the_pools_grace_period()
-> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::build_with("e2e-cons-grace", "100%", &["on-demand"], None, Some("3m")).await?;
    let harness = scene.harness().await?;
    let result = shut_down_first(&scene).await;
    scene.finish(harness, result).await
}

/// What the watcher saw of one pod.
#[derive(Debug, Default)]
struct PodSeen {
    node: String,
    /// First seen terminating.
    terminating: Option<SystemTime>,
    /// First seen gone.
    gone: Option<SystemTime>,
    /// Last seen present.
    present: Option<SystemTime>,
}

/// When each pod was seen terminating and gone, and each instance terminated, by a
/// watcher polling every 250 ms. Each observation is stamped so that the order it proves
/// is safe: a pod's presence with the time its list was asked for (it existed at some
/// time after that), an instance's termination with the time its list answered (it was
/// terminated before that).
#[derive(Default)]
struct Seen {
    /// By pod name.
    pods: std::collections::BTreeMap<String, PodSeen>,
    /// Instance id → first seen no longer running.
    terminated: std::collections::BTreeMap<String, SystemTime>,
    /// The instances running at the last poll.
    running: Vec<String>,
}

async fn shut_down_first(scene: &Scene) -> Result<()> {
    let mut d = scene.base.deployment("web", 6, "500m", "512Mi");
    d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(30);
    d["spec"]["template"]["spec"]["containers"][0]["lifecycle"] =
        json!({"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 25"]}}});
    scene.create_deployment(d).await?;
    wait::unschedulable(&scene.kube, &scene.name, 6, WAIT).await?;
    scene.provision(Duration::from_secs(20)).await?;
    scene.wait_running(6).await?;
    scene.scale("web", 1).await?;
    // The scale-down's own deletions take their 30 s too.
    scene.wait_running(1).await?;
    let nodes_before = scene.nodes().await?;
    ensure!(nodes_before.len() >= 2, "{nodes_before:?}");
    let instance_of: std::collections::BTreeMap<String, String> = Api::<Node>::all(scene.kube.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| {
            let id = carpool::model::node::instance_id_from_provider_id(n.spec.as_ref()?.provider_id.as_deref()?)?
                .to_string();
            Some((n.metadata.name?, id))
        })
        .collect();

    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (seen, stop) = (seen.clone(), stop.clone());
        let pods: Api<Pod> = Api::namespaced(scene.kube.clone(), &scene.name);
        let cloud = scene.cloud().await?;
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let now = SystemTime::now();
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    let mut seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let present: Vec<String> = list.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
                    for p in &list.items {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
                        let e = seen.pods.entry(name).or_insert(PodSeen {
                            node,
                            ..PodSeen::default()
                        });
                        if p.metadata.deletion_timestamp.is_some() && e.terminating.is_none() {
                            e.terminating = Some(now);
                        }
                        e.present = Some(now);
                    }
                    for (name, e) in seen.pods.iter_mut() {
                        if !present.contains(name) && e.gone.is_none() {
                            e.gone = Some(now);
                        }
                    }
                }
                if let Ok(instances) = cloud.list().await {
                    // The cloud lists live instances: one that leaves the list, or stops
                    // running, was terminated by the time the list answered.
                    let now = SystemTime::now();
                    let mut seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let running: Vec<String> = instances
                        .iter()
                        .filter(|i| i.state == carpool::ports::InstanceState::Running)
                        .map(|i| i.id.clone())
                        .collect();
                    for id in std::mem::take(&mut seen.running) {
                        if !running.contains(&id) {
                            seen.terminated.entry(id).or_insert(now);
                        }
                    }
                    seen.running = running;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };

    let started = SystemTime::now();
    let mut quiet = 0;
    let mut consolidated = 0;
    for run in 0..20 {
        let report = scene.consolidate(&format!("grace-{run}")).await?;
        eprintln!(
            "run {run}: command {:?} steps {:?} evicted {} rolled back {:?}",
            report.command.as_ref().map(|c| (c.method, c.nodes.clone())),
            report.steps,
            report.evicted,
            report.rolled_back
        );
        ensure!(report.rolled_back.is_empty(), "rolled back: {:?}", report.rolled_back);
        consolidated += report.nodes_consolidated;
        quiet = if report.command.is_none() && report.steps.is_empty() {
            quiet + 1
        } else {
            0
        };
        if quiet == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    stop.store(true, Ordering::SeqCst);
    watcher.await?;
    ensure!(quiet == 2, "the consolidator did not settle");
    ensure!(consolidated >= 1, "nothing was consolidated");

    let seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut checked = 0;
    for (node, instance) in &instance_of {
        let Some(terminated) = seen.terminated.get(instance) else {
            continue;
        };
        let evicted: Vec<(&String, SystemTime, Option<SystemTime>, Option<SystemTime>)> = seen
            .pods
            .iter()
            .filter(|(_, p)| &p.node == node && p.terminating.is_some_and(|t| t >= started))
            .map(|(name, p)| (name, p.terminating.unwrap_or(started), p.gone, p.present))
            .collect();
        eprintln!("node {node} ({instance}) terminated by {terminated:?}; its pods: {evicted:?}");
        for (pod, terminating, gone, present) in &evicted {
            let gone = gone.with_context(|| format!("pod {pod} of {node} never went"))?;
            // The pod existed at some time after `present`, the instance was terminated
            // before `terminated`: the pod outlived its instance if the one is after the
            // other.
            ensure!(
                present.is_none_or(|p| p <= *terminated),
                "{node}'s instance was terminated before its pod {pod} had shut down"
            );
            let grace = gone.duration_since(*terminating).unwrap_or_default();
            ensure!(
                grace >= Duration::from_secs(28),
                "pod {pod} shut down in {grace:?}, not its 30 s"
            );
            let within = terminated.duration_since(*terminating).unwrap_or_default();
            ensure!(
                within <= Duration::from_secs(180 + 15),
                "{node} went {within:?} after its drain began: past the pool's 3-minute terminationGracePeriod"
            );
        }
        checked += usize::from(!evicted.is_empty());
    }
    ensure!(
        checked >= 1,
        "no consolidated node had a pod to wait for: {:?}",
        seen.pods
    );
    Ok(())
}

/// Issue 28: a NodePool with `consolidationPolicy: Balanced` is accepted by Karpenter's own
/// NodePool CRD and consolidates: after a scale-down from twelve pods to two, the
/// consolidator removes the nodes left empty, as Karpenter deletes empty nodes under every
/// policy (kubernetes-sigs/karpenter `pkg/controllers/disruption/controller.go`: "Delete
/// empty nodes across all consolidation policies"); the score of a move that replaces or
/// deletes a node with pods (`balanced.go` `ScoreMove`) is tested on the decision
/// (`shared/tests/it/disruption.rs`).
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_balanced_nodepool_is_accepted_and_consolidates_after_a_scale_down() -> Result<()> {
    let _stack = exclusive().await;
    let scene = Scene::balanced("e2e-bal").await?;
    let harness = scene.harness().await?;
    let result = async {
        scene.deployment("web", 12, "1500m", json!({})).await?;
        wait::unschedulable(&scene.kube, &scene.name, 12, WAIT).await?;
        scene.provision(Duration::from_secs(20)).await?;
        scene.wait_running(12).await?;
        let before = scene.nodes().await?;
        ensure!(before.len() >= 2, "{before:?}");
        scene.scale("web", 2).await?;
        scene.wait_running(2).await?;
        let methods = scene.settle("bal", 12, Duration::from_secs(3)).await?;
        scene.wait_running(2).await?;
        let after = scene.nodes().await?;
        eprintln!(
            "Balanced: {} nodes before, {} after; {methods:?}",
            before.len(),
            after.len()
        );
        ensure!(!methods.is_empty(), "nothing was consolidated");
        ensure!(
            after.len() < before.len(),
            "{} nodes before, {} after",
            before.len(),
            after.len()
        );
        Ok(())
    }
    .await;
    scene.finish(harness, result).await
}
