//! Smoke tests against the local stack: each proves one real behaviour of the components
//! Carpool relies on. Start the stack first (`infra/local/up`), then
//! `cargo test -p carpool-tests --test it -- --include-ignored smoke::` (each test is
//! `#[ignore]`d, so that plain `cargo test` passes without the stack).
//!
//! The tests share one stack and run concurrently: each has its own namespace, NodePool
//! label, DynamoDB table and harness (which watches only the instances tagged with the
//! test's id). Waits are bounded and say what they last saw when they time out.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use carpool::catalog::Catalog;
use carpool::model::Resources;
use carpool_tests::harness::{Config, Report};
use carpool_tests::instance::Instance;
use carpool_tests::launch::{self, Launch};
use carpool_tests::tags::TagTaint;
use carpool_tests::{Harness, Stack, moto, unique, wait};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::RwLockReadGuard;

/// The longest any single wait may take.
const WAIT: Duration = Duration::from_secs(90);
/// The simulated boot time of harness-registered nodes.
const BOOT: Duration = Duration::from_secs(1);
/// The tag that ties an instance to the test (and to that test's harness).
const TEST_TAG: &str = "carpool.sh/test";
/// The instance type the tests launch.
const INSTANCE_TYPE: &str = "m5.large";

// --- a. no nodes: Pending / Unschedulable ----------------------------------------------

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn pods_stay_pending_and_unschedulable_without_nodes() -> Result<()> {
    let mut scene = Scene::new("pending").await?;
    let result = pods_stay_pending(&mut scene).await;
    scene.finish(result).await
}

async fn pods_stay_pending(scene: &mut Scene) -> Result<()> {
    scene.namespace().await?;
    // No node carries this test's NodePool label: as far as these pods go, there are no
    // nodes (other tests may have nodes of their own meanwhile).
    scene.deploy(2).await?;
    scene.wait_unschedulable(2).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for pod in scene.pods().await? {
        let name = pod.metadata.name.unwrap_or_default();
        ensure!(
            pod.spec.and_then(|s| s.node_name).is_none(),
            "pod {name} was bound with no node for it"
        );
        ensure!(phase(&pod.status) == "Pending", "pod {name} is {}", phase(&pod.status));
    }
    Ok(())
}

// --- b. a harness-registered node appears: bound and Running ----------------------------

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn pods_are_bound_and_running_once_a_harness_registered_node_appears() -> Result<()> {
    let mut scene = Scene::new("bind").await?;
    let result = pods_bound_once_node_appears(&mut scene).await;
    scene.finish(result).await
}

async fn pods_bound_once_node_appears(scene: &mut Scene) -> Result<()> {
    scene.namespace().await?;
    scene.deploy(3).await?;
    scene.wait_unschedulable(3).await?;
    scene.start_harness(BOOT).await?;
    let instance = scene.launch(Launch::new(&scene.stack, INSTANCE_TYPE)?).await?;
    scene.wait_running_on(&instance.node_name(), 3, &[]).await?;
    Ok(())
}

// --- c. evictions and PDBs ---------------------------------------------------------------

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn eviction_that_would_break_a_pdb_gets_429_and_one_that_would_not_succeeds() -> Result<()> {
    let mut scene = Scene::new("evict").await?;
    let result = evictions_respect_the_pdb(&mut scene).await;
    scene.finish(result).await
}

async fn evictions_respect_the_pdb(scene: &mut Scene) -> Result<()> {
    scene.namespace().await?;
    scene.start_harness(BOOT).await?;
    let instance = scene.launch(Launch::new(&scene.stack, INSTANCE_TYPE)?).await?;
    scene.deploy(3).await?;
    let node = instance.node_name();
    scene.wait_running_on(&node, 3, &[]).await?;

    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(scene.kube.clone(), &scene.id);
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "app"},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "app"}}},
    });
    pdbs.create(&PostParams::default(), &serde_json::from_value(pdb)?)
        .await?;
    wait::pdb_status(&pdbs, "app", 3, 0, WAIT).await?;

    let pods: Api<Pod> = Api::namespaced(scene.kube.clone(), &scene.id);
    let victim = scene.pods().await?[0]
        .metadata
        .name
        .clone()
        .context("pod without a name")?;
    match pods.evict(&victim, &EvictParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 429 => {
            ensure!(s.message.contains("disruption budget"), "429 for another reason: {s:?}")
        }
        other => bail!("an eviction that breaks the PDB answered {other:?}, not 429"),
    }

    pdbs.patch(
        "app",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 2}})),
    )
    .await?;
    wait::pdb_status(&pdbs, "app", 3, 1, WAIT).await?;
    pods.evict(&victim, &EvictParams::default())
        .await
        .with_context(|| format!("evicting {victim} with one disruption allowed"))?;

    // kwok finishes the eviction's delete; the ReplicaSet makes a new pod.
    wait::until(
        &format!("the evicted pod {victim} to be gone"),
        WAIT,
        async || match pods.get_opt(&victim).await? {
            None => Ok(()),
            Some(p) => bail!("still there, phase {}", phase(&p.status)),
        },
    )
    .await?;
    scene.wait_running_on(&node, 3, std::slice::from_ref(&victim)).await?;
    let names: Vec<_> = scene
        .pods()
        .await?
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    eprintln!("evicted {victim}; the pods now: {names:?}");
    Ok(())
}

// --- d. an EC2 instance becomes a Ready Node; termination removes it ---------------------

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn ec2_instance_becomes_a_ready_node_and_its_termination_removes_it() -> Result<()> {
    let mut scene = Scene::new("node").await?;
    let result = instance_node_lifecycle(&mut scene).await;
    scene.finish(result).await
}

async fn instance_node_lifecycle(scene: &mut Scene) -> Result<()> {
    scene.start_harness(BOOT).await?;
    let taint = TagTaint::new("example.com/dedicated", "smoke", "NoSchedule");
    let instance = scene
        .launch(Launch::new(&scene.stack, INSTANCE_TYPE)?.taints(std::slice::from_ref(&taint))?)
        .await?;
    let name = instance.node_name();
    let node = wait_node_ready(&scene.nodes(), &name).await?;

    let labels = node.metadata.labels.clone().unwrap_or_default();
    for (key, value) in [
        ("node.kubernetes.io/instance-type", INSTANCE_TYPE),
        ("topology.kubernetes.io/zone", instance.zone.as_str()),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("karpenter.sh/nodepool", scene.id.as_str()),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
        ("karpenter.k8s.aws/instance-family", "m5"),
    ] {
        ensure!(
            labels.get(key).map(String::as_str) == Some(value),
            "label {key}: {:?}",
            labels.get(key)
        );
    }
    let spec = node.spec.clone().unwrap_or_default();
    ensure!(
        spec.provider_id == Some(format!("aws:///{}/{}", instance.zone, instance.id)),
        "{spec:?}"
    );
    ensure!(
        spec.taints.unwrap_or_default().iter().any(|t| *t == taint.to_k8s()),
        "taint {taint:?} missing"
    );
    let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
    let expected = &Catalog::embedded()?
        .get(INSTANCE_TYPE)
        .context("m5.large not in catalog")?
        .allocatable;
    ensure!(
        Resources::from_k8s(&allocatable)? == *expected,
        "allocatable {allocatable:?}"
    );

    launch::terminate(&scene.ec2, std::slice::from_ref(&instance.id)).await?;
    wait_node_gone(&scene.nodes(), &name).await?;
    let report = scene.stop_harness().await?;
    ensure!(
        report.registered == [name.clone()] && report.deleted == [name],
        "{report:?}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn instance_tagged_never_register_gets_no_node() -> Result<()> {
    let mut scene = Scene::new("never").await?;
    let result = never_register(&mut scene).await;
    scene.finish(result).await
}

async fn never_register(scene: &mut Scene) -> Result<()> {
    scene.start_harness(BOOT).await?;
    // The silent one first: by the time the other registers, it has waited as long.
    let silent = scene
        .launch(Launch::new(&scene.stack, INSTANCE_TYPE)?.never_register())
        .await?;
    let joins = scene.launch(Launch::new(&scene.stack, INSTANCE_TYPE)?).await?;
    wait_node_ready(&scene.nodes(), &joins.node_name()).await?;
    let nodes = scene.nodes().list(&ListParams::default()).await?;
    let silent_provider = Some(format!("aws:///{}/{}", silent.zone, silent.id));
    ensure!(
        !nodes
            .items
            .iter()
            .any(|n| n.spec.as_ref().is_some_and(|s| s.provider_id == silent_provider)),
        "{} is tagged never-register but has a Node",
        silent.id
    );
    Ok(())
}

async fn wait_node_ready(nodes: &Api<Node>, name: &str) -> Result<Node> {
    wait::until(&format!("Node {name} to be Ready"), WAIT, async || {
        let node = nodes.get_opt(name).await?.context("no such Node yet")?;
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone());
        match ready.as_deref() {
            Some("True") => Ok(node),
            other => bail!("Ready={other:?}"),
        }
    })
    .await
}

async fn wait_node_gone(nodes: &Api<Node>, name: &str) -> Result<()> {
    wait::until(&format!("Node {name} to be deleted"), WAIT, async || {
        match nodes.get_opt(name).await? {
            None => Ok(()),
            Some(_) => bail!("still there"),
        }
    })
    .await
}

// --- e. DynamoDB conditional write conflict ----------------------------------------------

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn dynamodb_conditional_write_conflict_is_conditional_check_failed() -> Result<()> {
    let _shared = carpool_tests::shared().await;
    let ddb = Stack::load()?.dynamodb().await?;
    let table = unique("carpool-smoke");
    ddb.create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .send()
        .await?;
    let put = |owner: &str| {
        ddb.put_item()
            .table_name(&table)
            .item("pk", AttributeValue::S("LEASE#provisioner".into()))
            .item("owner", AttributeValue::S(owner.into()))
            .condition_expression("attribute_not_exists(pk)")
            .send()
    };
    let first = put("a").await;
    let second = put("b").await;
    ddb.delete_table().table_name(&table).send().await?;

    first.context("the first conditional put")?;
    let err = second
        .err()
        .context("the second conditional put succeeded")?
        .into_service_error();
    ensure!(
        err.is_conditional_check_failed_exception(),
        "not ConditionalCheckFailedException: {err:?}"
    );
    ensure!(
        err.code() == Some("ConditionalCheckFailedException"),
        "code {:?}",
        err.code()
    );
    Ok(())
}

// --- moto reset -------------------------------------------------------------------------

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn moto_reset_clears_instances_and_seed_restores_the_world() -> Result<()> {
    let _exclusive = carpool_tests::exclusive().await;
    let stack = Stack::load()?;
    let ec2 = stack.ec2().await?;
    let before = Launch::new(&stack, INSTANCE_TYPE)?
        .tag(TEST_TAG, &unique("reset"))
        .run(&ec2)
        .await?;

    let stack = moto::reset_and_seed(&stack).await?;
    let cluster = stack.cluster()?;
    let ours = ec2
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:carpool.sh/cluster")
                .values(cluster)
                .build(),
        )
        .send()
        .await?;
    let ids: Vec<_> = ours
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter_map(|i| i.instance_id())
        .collect();
    ensure!(!ids.contains(&before.id.as_str()), "{} survived the reset", before.id);

    let subnets = ec2
        .describe_subnets()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:karpenter.sh/discovery")
                .values(cluster)
                .build(),
        )
        .send()
        .await?;
    let mut seeded: Vec<_> = subnets
        .subnets()
        .iter()
        .filter_map(|s| s.subnet_id())
        .map(str::to_string)
        .collect();
    let mut expected = stack.subnet_ids()?;
    seeded.sort();
    expected.sort();
    ensure!(seeded == expected, "subnets {seeded:?}, env file says {expected:?}");
    // The reseeded world is usable: an instance launches into it.
    let after = Launch::new(&stack, INSTANCE_TYPE)?.run(&ec2).await?;
    launch::terminate(&ec2, &[after.id]).await
}

// --- the scene of one test -------------------------------------------------------------

/// What one test created, so that it can be removed whatever the outcome.
struct Scene {
    stack: Stack,
    kube: kube::Client,
    ec2: aws_sdk_ec2::Client,
    /// Unique: the namespace, the NodePool label and the test tag value.
    id: String,
    namespace: bool,
    harness: Option<Harness>,
    instances: Vec<String>,
    _shared: RwLockReadGuard<'static, ()>,
}

impl Scene {
    async fn new(prefix: &str) -> Result<Self> {
        let shared = carpool_tests::shared().await;
        let stack = Stack::load()?;
        Ok(Scene {
            kube: stack.kube_client().await?,
            ec2: stack.ec2().await?,
            id: unique(prefix),
            stack,
            namespace: false,
            harness: None,
            instances: Vec::new(),
            _shared: shared,
        })
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.kube.clone())
    }

    /// Creates the test's namespace and waits for its default ServiceAccount.
    async fn namespace(&mut self) -> Result<()> {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.id}});
        Api::<Namespace>::all(self.kube.clone())
            .create(&PostParams::default(), &serde_json::from_value(ns)?)
            .await?;
        self.namespace = true;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.kube.clone(), &self.id);
        wait::until("the default ServiceAccount", WAIT, async || {
            accounts.get_opt("default").await?.map(|_| ()).context("not yet")
        })
        .await
    }

    /// A Deployment `app` of pause pods that only fit nodes of the test's NodePool.
    async fn deploy(&self, replicas: i32) -> Result<()> {
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "app"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "app"}},
                "template": {
                    "metadata": {"labels": {"app": "app"}},
                    "spec": {
                        "nodeSelector": {"karpenter.sh/nodepool": self.id},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{
                            "name": "app",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }],
                    },
                },
            },
        });
        Api::<Deployment>::namespaced(self.kube.clone(), &self.id)
            .create(&PostParams::default(), &serde_json::from_value(deployment)?)
            .await?;
        Ok(())
    }

    async fn pods(&self) -> Result<Vec<Pod>> {
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), &self.id);
        Ok(pods.list(&ListParams::default().labels("app=app")).await?.items)
    }

    /// Waits until `count` pods exist and kube-scheduler marked each PodScheduled=False
    /// with reason Unschedulable.
    async fn wait_unschedulable(&self, count: usize) -> Result<()> {
        wait::until(
            &format!("{count} pods PodScheduled=False/Unschedulable"),
            WAIT,
            async || {
                let pods = self.pods().await?;
                let states: Vec<_> = pods
                    .iter()
                    .map(|p| {
                        let c = p
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
                        c.map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
                    })
                    .collect();
                let unschedulable = states
                    .iter()
                    .filter(|s| s.as_ref().is_some_and(|(st, r)| st == "False" && r == "Unschedulable"));
                if pods.len() == count && unschedulable.count() == count {
                    Ok(())
                } else {
                    bail!("{} pods, PodScheduled (status, reason): {states:?}", pods.len())
                }
            },
        )
        .await
    }

    /// Waits until exactly `count` pods are Running on `node`, none of them named in `not`.
    async fn wait_running_on(&self, node: &str, count: usize, not: &[String]) -> Result<()> {
        wait::until(&format!("{count} pods Running on {node}"), WAIT, async || {
            let pods = self.pods().await?;
            let seen: Vec<_> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let bound = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
                    (name, bound, phase(&p.status))
                })
                .collect();
            let good = seen
                .iter()
                .filter(|(name, bound, ph)| bound == node && ph == "Running" && !not.contains(name));
            if seen.len() == count && good.count() == count {
                Ok(())
            } else {
                bail!("(pod, node, phase): {seen:?}")
            }
        })
        .await
    }

    async fn start_harness(&mut self, delay: Duration) -> Result<()> {
        let config = Config::from_stack(&self.stack)?
            .registration_delay(delay)
            .only_tagged(TEST_TAG, &self.id);
        self.harness = Some(Harness::start(config, self.ec2.clone(), self.kube.clone()));
        Ok(())
    }

    async fn stop_harness(&mut self) -> Result<Report> {
        let report = self.harness.take().context("no harness")?.stop().await?;
        ensure!(report.errors.is_empty(), "the harness saw errors: {:?}", report.errors);
        Ok(report)
    }

    /// Launches an instance for this test: its NodePool and test tags added.
    async fn launch(&mut self, launch: Launch) -> Result<Instance> {
        let instance = launch.nodepool(&self.id).tag(TEST_TAG, &self.id).run(&self.ec2).await?;
        self.instances.push(instance.id.clone());
        Ok(instance)
    }

    /// Removes what the test created, then returns its result (or the cleanup's error).
    async fn finish(mut self, result: Result<()>) -> Result<()> {
        let cleanup = self.cleanup().await;
        result?;
        cleanup.context("cleaning up")
    }

    async fn cleanup(&mut self) -> Result<()> {
        if self.namespace {
            let dp = DeleteParams::background();
            match Api::<Namespace>::all(self.kube.clone()).delete(&self.id, &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        launch::terminate(&self.ec2, &self.instances).await?;
        if self.harness.is_some() {
            // The harness deletes the Nodes of the terminated instances.
            let nodes = self.nodes();
            let id = self.id.clone();
            wait::until("the test's Nodes to be deleted", WAIT, async || {
                let selector = format!("karpenter.sh/nodepool={id}");
                let left = nodes.list(&ListParams::default().labels(&selector)).await?.items.len();
                if left == 0 { Ok(()) } else { bail!("{left} left") }
            })
            .await?;
            self.stop_harness().await?;
        }
        Ok(())
    }
}

fn phase(status: &Option<k8s_openapi::api::core::v1::PodStatus>) -> String {
    status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
}
