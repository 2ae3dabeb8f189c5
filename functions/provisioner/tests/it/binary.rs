//! The real `provisioner` binary, run as Lambda runs it, against the local stack.
//!
//! The test plays the Lambda Runtime API ([`runtime_api`]) and hands the binary one
//! scheduled EventBridge event. The binary authenticates to the apiserver as Lambda's role
//! would on EKS: with an EKS bearer token, which the stack's token webhook maps (like
//! aws-auth) to the user `carpool` in the group `carpool:controller`, so the ClusterRole of
//! `infra/rbac/` is what it may do. It finds the test's pending pods, launches instances in
//! moto and answers with its run summary.
//!
//! It measures, and prints: the cold start (spawn to the first `/next`), the invocation
//! (event handed out to response received) and the process's peak RSS (`VmHWM`, read just
//! before the process is killed while it waits for its next event). Timing is printed,
//! never asserted.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use aws_sdk_ec2::types::Filter;
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder};
use carpool_adapters::dynamodb::DynamoStore;
use carpool_tests::{Stack, exclusive, unique, wait};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

use crate::runtime_api::{Call, Invocation, RuntimeApi};

const WAIT: Duration = Duration::from_secs(120);
const REPLICAS: usize = 3;
const NODE_ROLE: &str = "CarpoolNodeRole";
const NODE_PROFILE: &str = "CarpoolNodeProfile";
const EVENT: &str = include_str!("../fixtures/scheduled-event.json");
const REQUEST_ID: &str = "8476a536-e9f4-11e8-9739-2dfe598c3fcd";

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn nodepools() -> ApiResource {
    resource("karpenter.sh", "v1", "NodePool", "nodepools")
}

fn nodeclasses() -> ApiResource {
    resource("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses")
}

/// What the test created: a cluster name of its own (its EKS cluster in moto, its EC2
/// tags, its DynamoDB table and partition), a namespace, a NodePool and an EC2NodeClass.
struct Scene {
    stack: Stack,
    kube: kube::Client,
    name: String,
    table: String,
    /// Pending pods: the Deployment's replicas, or bare pods created directly.
    pods: usize,
    /// `CARPOOL_DRY_RUN`.
    dry_run: bool,
}

impl Scene {
    async fn new() -> Result<Self> {
        let stack = Stack::load()?;
        let kube = stack.kube_client().await?;
        let name = unique("bin");
        Ok(Scene {
            table: format!("{name}-state"),
            stack,
            kube,
            name,
            pods: REPLICAS,
            dry_run: false,
        })
    }

    /// `n` bare pending pods of five shapes, a fifth of them spread over zones, created
    /// 64 at a time (the ReplicaSet controller would take minutes at its default QPS).
    async fn create_pods(&self, n: usize) -> Result<()> {
        use futures_util::{StreamExt, TryStreamExt};
        let api = Api::<Pod>::namespaced(self.kube.clone(), &self.name);
        let shapes = [
            ("250m", "512Mi"),
            ("500m", "1Gi"),
            ("1", "2Gi"),
            ("2", "4Gi"),
            ("100m", "128Mi"),
        ];
        futures_util::stream::iter(0..n)
            .map(|i| {
                let api = api.clone();
                let (cpu, memory) = shapes[i % shapes.len()];
                let app = format!("app-{}", i % 5);
                let mut pod = json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("p-{i}"), "labels": {"app": app}},
                    "spec": {
                        "nodeSelector": {"karpenter.sh/nodepool": self.name},
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
                });
                if i % 5 == 1 {
                    pod["spec"]["topologySpreadConstraints"] = json!([{"maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": app}}}]);
                }
                async move {
                    let pod: Pod = serde_json::from_value(pod)?;
                    api.create(&PostParams::default(), &pod).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(64)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// The EKS cluster in moto (the token webhook accepts tokens for the clusters moto
    /// knows), the DynamoDB table, the RBAC of `infra/rbac/`, and the Kubernetes objects.
    async fn create(&self) -> Result<()> {
        let sdk = self.stack.aws_config().await?;
        let subnets = self.stack.subnet_ids()?;
        let vpc = aws_sdk_eks::types::VpcConfigRequest::builder()
            .set_subnet_ids(Some(subnets))
            .security_group_ids(self.stack.get("CARPOOL_SECURITY_GROUP_ID")?)
            .build();
        aws_sdk_eks::Client::new(&sdk)
            .create_cluster()
            .name(&self.name)
            .role_arn(format!("arn:aws:iam::123456789012:role/{}-cluster", self.name))
            .resources_vpc_config(vpc)
            .send()
            .await
            .context("CreateCluster in moto")?;
        DynamoStore::new(self.stack.dynamodb().await?, &self.table, &self.name)
            .create_table_if_missing()
            .await?;
        self.apply_rbac()?;

        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.name}});
        Api::<Namespace>::all(self.kube.clone())
            .create(&PostParams::default(), &serde_json::from_value(ns)?)
            .await?;
        let class = EC2NodeClassBuilder::new(&self.name)
            .role(NODE_ROLE)
            .discovery("carpool-local")
            .al2023()
            .build();
        let pool = NodePoolBuilder::new(&self.name)
            .node_class(&self.name)
            .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
            .requirement("kubernetes.io/arch", "In", &["amd64"])
            .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
            .build();
        for (r, object) in [(nodeclasses(), class), (nodepools(), pool)] {
            Api::<DynamicObject>::all_with(self.kube.clone(), &r)
                .create(&PostParams::default(), &serde_json::from_value(object)?)
                .await?;
        }
        if self.pods != REPLICAS {
            return self.create_pods(self.pods).await;
        }
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "app", "namespace": self.name},
            "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": "app"}},
              "template": {"metadata": {"labels": {"app": "app"}}, "spec": {
                "nodeSelector": {"karpenter.sh/nodepool": self.name},
                "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}}
        });
        Api::<DynamicObject>::namespaced_with(
            self.kube.clone(),
            &self.name,
            &resource("apps", "v1", "Deployment", "deployments"),
        )
        .create(&PostParams::default(), &serde_json::from_value(deployment)?)
        .await?;
        Ok(())
    }

    /// `kubectl apply -f infra/rbac/`: the ClusterRole and binding for `carpool:controller`.
    fn apply_rbac(&self) -> Result<()> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/rbac");
        ensure!(
            dir.is_dir(),
            "{} is missing: it holds the ClusterRole of the group carpool:controller, which the \
             binary's EKS identity is mapped to",
            dir.display()
        );
        let out = Command::new(self.stack.get("CARPOOL_KUBECTL")?)
            .env("KUBECONFIG", self.stack.get("KUBECONFIG")?)
            .arg("apply")
            .arg("-f")
            .arg(&dir)
            .output()
            .context("running kubectl")?;
        ensure!(
            out.status.success(),
            "kubectl apply -f {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    async fn wait_unschedulable(&self) -> Result<()> {
        wait::unschedulable(&self.kube, &self.name, self.pods, WAIT).await
    }

    /// The instances in moto tagged with this test's cluster, not yet terminated.
    async fn instances(&self) -> Result<Vec<String>> {
        let ec2 = self.stack.ec2().await?;
        let out = ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name("tag:carpool.sh/cluster")
                    .values(&self.name)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name("instance-state-name")
                    .set_values(Some(vec!["pending".into(), "running".into()]))
                    .build(),
            )
            .send()
            .await?;
        Ok(out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect())
    }

    /// Removes everything [`Scene::create`] made, and the instances the binary launched;
    /// each step is tried whatever happened before it.
    async fn cleanup(&self) -> Result<()> {
        let mut failed = Vec::new();
        if let Err(e) = Api::<Namespace>::all(self.kube.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
        {
            failed.push(format!("namespace: {e}"));
        }
        for r in [nodepools(), nodeclasses()] {
            if let Err(e) = Api::<DynamicObject>::all_with(self.kube.clone(), &r)
                .delete(&self.name, &DeleteParams::default())
                .await
            {
                failed.push(format!("{}: {e}", r.kind));
            }
        }
        match self.instances().await {
            Ok(ids) if !ids.is_empty() => {
                let ec2 = self.stack.ec2().await?;
                if let Err(e) = ec2.terminate_instances().set_instance_ids(Some(ids)).send().await {
                    failed.push(format!("terminating instances: {e}"));
                }
            }
            Ok(_) => {}
            Err(e) => failed.push(format!("listing instances: {e:#}")),
        }
        if let Err(e) = self
            .stack
            .dynamodb()
            .await?
            .delete_table()
            .table_name(&self.table)
            .send()
            .await
        {
            failed.push(format!("table: {e}"));
        }
        let sdk = self.stack.aws_config().await?;
        if let Err(e) = aws_sdk_eks::Client::new(&sdk)
            .delete_cluster()
            .name(&self.name)
            .send()
            .await
        {
            failed.push(format!("EKS cluster: {e}"));
        }
        ensure!(failed.is_empty(), "cleanup: {}", failed.join("; "));
        Ok(())
    }

    /// The function's environment, as Lambda and the deployment would set it.
    fn env(&self, runtime_api: &str) -> Result<Vec<(&'static str, String)>> {
        let s = &self.stack;
        let ca_file = match s.get("CARPOOL_KUBE_CA_FILE") {
            Ok(f) => f.to_string(),
            Err(_) => format!("{}/pki/ca.crt", s.get("CARPOOL_STACK_STATE")?),
        };
        Ok(vec![
            ("AWS_LAMBDA_RUNTIME_API", runtime_api.to_string()),
            ("AWS_LAMBDA_FUNCTION_NAME", "carpool-provisioner".into()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
            (
                "AWS_LAMBDA_LOG_STREAM_NAME",
                "2026/11/30/[$LATEST]0123456789abcdef".into(),
            ),
            ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/carpool-provisioner".into()),
            ("AWS_REGION", s.region()?.to_string()),
            ("AWS_DEFAULT_REGION", s.region()?.to_string()),
            ("AWS_ENDPOINT_URL", s.aws_endpoint()?.to_string()),
            ("AWS_ACCESS_KEY_ID", s.get("AWS_ACCESS_KEY_ID")?.to_string()),
            ("AWS_SECRET_ACCESS_KEY", s.get("AWS_SECRET_ACCESS_KEY")?.to_string()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ("CARPOOL_CLUSTER_NAME", self.name.clone()),
            ("CARPOOL_TABLE_NAME", self.table.clone()),
            (
                "CARPOOL_AMI_SSM_PARAMETER",
                s.get("CARPOOL_AMI_SSM_PARAMETER")?.to_string(),
            ),
            ("CARPOOL_CLUSTER_ENDPOINT", s.get("CARPOOL_KUBE_APISERVER")?.to_string()),
            ("CARPOOL_CLUSTER_CA_FILE", ca_file),
            ("CARPOOL_WATCH_SECONDS", "5".into()),
            // moto prices every spot offering at 0.00001 USD: plan on the embedded prices.
            ("CARPOOL_LIVE_PRICES", "false".into()),
            ("CARPOOL_DRY_RUN", self.dry_run.to_string()),
            ("CARPOOL_NODE_ROLE", NODE_ROLE.into()),
            ("CARPOOL_NODE_INSTANCE_PROFILE", NODE_PROFILE.into()),
        ])
    }
}

/// The binary, with its stdout and stderr read line by line as it runs.
struct Function {
    child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Function {
    fn spawn(env: Vec<(&'static str, String)>) -> Result<Self> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_provisioner"))
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning the provisioner binary")?;
        let (stdout, stderr) = (Arc::default(), Arc::default());
        let out = child.stdout.take().context("stdout")?;
        let err = child.stderr.take().context("stderr")?;
        let readers = vec![collect(out, &stdout), collect(err, &stderr)];
        Ok(Function {
            child,
            stdout,
            stderr,
            readers,
        })
    }

    /// The peak resident set size so far (`VmHWM`), in KiB.
    fn peak_rss_kib(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("no VmHWM")?;
        Ok(line.split_whitespace().nth(1).context("VmHWM value")?.parse()?)
    }

    /// Whether the process has exited, and how.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kills the process and returns its stdout and stderr lines.
    fn kill(mut self) -> (Vec<String>, Vec<String>) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let take = |lines: &Arc<Mutex<Vec<String>>>| {
            std::mem::take(&mut *lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
        };
        (take(&self.stdout), take(&self.stderr))
    }

    fn output(&self) -> String {
        let join = |lines: &Arc<Mutex<Vec<String>>>| {
            lines
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .join("\n")
        };
        format!("stdout:\n{}\nstderr:\n{}", join(&self.stdout), join(&self.stderr))
    }
}

fn collect(pipe: impl std::io::Read + Send + 'static, into: &Arc<Mutex<Vec<String>>>) -> std::thread::JoinHandle<()> {
    let into = into.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(std::result::Result::ok) {
            into.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(line);
        }
    })
}

/// Waits for the function's next call to the Runtime API, failing early if it exits.
async fn next_call(api: &mut RuntimeApi, function: &mut Function, timeout: Duration) -> Result<Call> {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if let Some(call) = api.call(Duration::from_millis(200)).await {
            return Ok(call);
        }
        if let Some(status) = function.exited() {
            bail!("the binary exited ({status}) with\n{}", function.output());
        }
    }
    bail!(
        "no call to the Runtime API within {timeout:?}; the binary's output:\n{}",
        function.output()
    )
}

/// What one run measured.
struct Measured {
    cold_start: Duration,
    invocation: Duration,
    peak_rss_kib: u64,
    summary: Value,
    stdout: Vec<String>,
}

async fn run_binary(scene: &Scene) -> Result<Measured> {
    let mut api = RuntimeApi::start(vec![Invocation {
        request_id: REQUEST_ID.into(),
        payload: EVENT.as_bytes().to_vec(),
        timeout: Duration::from_secs(90),
        function_arn: "arn:aws:lambda:us-east-1:123456789012:function:carpool-provisioner".into(),
    }])
    .await?;
    let spawned = Instant::now();
    let mut function = Function::spawn(scene.env(api.address())?)?;
    let result = drive(&mut api, &mut function, spawned).await;
    let (stdout, stderr) = function.kill();
    let (cold_start, invocation, peak_rss_kib, summary) = result.with_context(|| {
        format!(
            "the binary's output:\nstdout:\n{}\nstderr:\n{}",
            stdout.join("\n"),
            stderr.join("\n")
        )
    })?;
    ensure!(stderr.is_empty(), "the binary wrote to stderr:\n{}", stderr.join("\n"));
    Ok(Measured {
        cold_start,
        invocation,
        peak_rss_kib,
        summary,
        stdout,
    })
}

/// One invocation, then the held `/next`: (cold start, invocation, peak RSS, the summary).
async fn drive(
    api: &mut RuntimeApi,
    function: &mut Function,
    spawned: Instant,
) -> Result<(Duration, Duration, u64, Value)> {
    let (served, cold_start) = match next_call(api, function, Duration::from_secs(60)).await? {
        Call::Next { at, served: Some(_) } => (at, at - spawned),
        other => bail!("the first call is {other:?}, not /next"),
    };
    let (summary, invocation) = match next_call(api, function, Duration::from_secs(90)).await? {
        Call::Response { at, request_id, body } => {
            ensure!(request_id == REQUEST_ID, "a response for {request_id}");
            (serde_json::from_slice::<Value>(&body)?, at - served)
        }
        Call::Error { request_id, body } => {
            bail!("invocation {request_id} failed: {}", String::from_utf8_lossy(&body))
        }
        Call::InitError { body } => bail!("init error: {}", String::from_utf8_lossy(&body)),
        Call::Other { method, path } => bail!("unexpected request {method} {path}"),
        Call::Next { .. } => bail!("a /next before the invocation's response"),
    };
    match next_call(api, function, Duration::from_secs(10)).await? {
        Call::Next { served: None, .. } => {}
        other => bail!("expected the second /next, got {other:?}"),
    }
    let peak = function.peak_rss_kib()?;
    Ok((cold_start, invocation, peak, summary))
}

async fn check(scene: &mut Scene) -> Result<()> {
    scene.create().await?;
    scene.wait_unschedulable().await?;

    // Issue 26, item 8: in dry run the binary logs what it would launch and launches
    // nothing (no instance, no launch record).
    scene.dry_run = true;
    let dry = run_binary(scene).await?;
    ensure!(
        dry.stdout.iter().any(|l| l.contains("dry run: would launch")),
        "no 'dry run: would launch' line"
    );
    let instances = scene.instances().await?;
    ensure!(instances.is_empty(), "dry run launched {instances:?}");
    scene.dry_run = false;

    let m = run_binary(scene).await?;
    eprintln!(
        "provisioner binary (debug build): cold start {} ms, invocation {} ms, peak RSS {:.1} MiB",
        m.cold_start.as_millis(),
        m.invocation.as_millis(),
        m.peak_rss_kib as f64 / 1024.0
    );
    eprintln!("summary: {}", m.summary);

    let launched = m.summary["nodes_launched"].as_u64().context("nodes_launched")?;
    ensure!(launched >= 1, "the run launched nothing: {}", m.summary);
    let instances = scene.instances().await?;
    ensure!(
        !instances.is_empty(),
        "no instance in moto tagged carpool.sh/cluster={}",
        scene.name
    );
    eprintln!("instances tagged carpool.sh/cluster={}: {instances:?}", scene.name);

    // Every stdout line is one JSON object: a log event or an EMF document.
    let mut logs = 0;
    let mut emf = 0;
    for line in &m.stdout {
        let value: Value =
            serde_json::from_str(line).with_context(|| format!("a stdout line is not one JSON object: {line}"))?;
        ensure!(value.is_object(), "not an object: {line}");
        if value.get("_aws").and_then(|a| a.get("CloudWatchMetrics")).is_some() {
            emf += 1;
        } else {
            ensure!(
                value.get("level").is_some() && value.get("message").is_some(),
                "a log line without level or message: {line}"
            );
            logs += 1;
        }
    }
    ensure!(emf >= 1, "no EMF line (_aws.CloudWatchMetrics) on stdout");
    ensure!(
        m.stdout.iter().any(|l| l.contains("\"message\":\"run\"")),
        "no run summary log line"
    );
    eprintln!("stdout: {logs} JSON log lines, {emf} EMF lines");
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn the_binary_answers_a_scheduled_event_with_launches_authenticated_by_an_eks_token() -> Result<()> {
    let _stack = exclusive().await;
    let mut scene = Scene::new().await?;
    let result = check(&mut scene).await;
    let cleaned = scene.cleanup().await;
    result?;
    cleaned
}

/// The peak memory of the function binary planning 5,000 pending pods read from the real
/// apiserver, in dry-run mode (it plans and logs, launches nothing). A measurement, not a
/// check of a figure: run it by hand, with the stack up, with
/// `cargo test -p carpool-provisioner --test it -- --ignored --exact --nocapture binary::the_binary_plans_five_thousand_pending_pods`
/// (add `--release` to measure the release build). `scripts/test-all` skips it.
#[tokio::test]
#[ignore = "a measurement: creates 5,000 pods; run by hand"]
async fn the_binary_plans_five_thousand_pending_pods() -> Result<()> {
    let _stack = exclusive().await;
    let mut scene = Scene::new().await?;
    scene.pods = 5000;
    scene.dry_run = true;
    let result = async {
        scene.create().await?;
        scene.wait_unschedulable().await?;
        let m = run_binary(&scene).await?;
        eprintln!(
            "provisioner binary, 5000 pending pods, dry run: cold start {} ms, invocation {} ms, peak RSS {:.1} MiB",
            m.cold_start.as_millis(),
            m.invocation.as_millis(),
            m.peak_rss_kib as f64 / 1024.0
        );
        let batch = m
            .stdout
            .iter()
            .find(|l| l.contains("\"message\":\"batch\""))
            .context("a batch line")?;
        let batch: Value = serde_json::from_str(batch)?;
        eprintln!(
            "batch: pods_seen {} plan_ms {} cost_per_hour_added {}",
            batch["pods_seen"], batch["plan_ms"], batch["cost_per_hour_added"]
        );
        ensure!(batch["pods_seen"] == 5000, "{batch}");
        Ok(())
    }
    .await;
    let cleaned = scene.cleanup().await;
    result?;
    cleaned
}

/// Scale on the real apiserver: the binary plans pending pods in a cluster of kwok nodes
/// full of running pods, in dry-run mode. A measurement, not a check of a figure: run it
/// by hand with the stack up,
/// `CARPOOL_SCALE_NODES=1000 CARPOOL_SCALE_RUNNING_PODS=30000 cargo test --release -p carpool-provisioner --test it -- --ignored --exact --nocapture binary::the_binary_plans_pending_pods_in_a_cluster_of_running_pods`
/// (defaults: 1,000 nodes, 30,000 running pods, 2,000 pending). It prints the binary's
/// invocation time, its peak RSS and the batch's snapshot and plan times.
/// `scripts/test-all` skips it.
#[tokio::test]
#[ignore = "a measurement: creates tens of thousands of objects; run by hand"]
async fn the_binary_plans_pending_pods_in_a_cluster_of_running_pods() -> Result<()> {
    let var = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (nodes, running, pending) = (
        var("CARPOOL_SCALE_NODES", 1000),
        var("CARPOOL_SCALE_RUNNING_PODS", 30_000),
        var("CARPOOL_SCALE_PENDING_PODS", 2000),
    );
    let _stack = exclusive().await;
    let mut scene = Scene::new().await?;
    scene.pods = pending;
    scene.dry_run = true;
    let result = async {
        scene.create().await?;
        let created = Instant::now();
        scene.create_running(nodes, running).await?;
        eprintln!(
            "created {nodes} nodes and {running} running pods in {:.0} s",
            created.elapsed().as_secs_f64()
        );
        scene.wait_unschedulable().await?;
        let m = run_binary(&scene).await?;
        let batch = m
            .stdout
            .iter()
            .find(|l| l.contains("\"message\":\"batch\""))
            .context("a batch line")?;
        let batch: Value = serde_json::from_str(batch)?;
        let report: Value = serde_json::from_str(batch["batch"].as_str().unwrap_or("{}"))?;
        let requests = m
            .stdout
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|v| v["ApiserverRequests"].as_u64());
        eprintln!(
            "provisioner binary, {nodes} nodes, {running} running pods, {pending} pending, dry run: \
             cold start {} ms, invocation {} ms, peak RSS {:.1} MiB, apiserver requests {requests:?}; \
             batch: pods_seen {} snapshot_ms {} plan_ms {}",
            m.cold_start.as_millis(),
            m.invocation.as_millis(),
            m.peak_rss_kib as f64 / 1024.0,
            batch["pods_seen"],
            report["snapshot_ms"],
            batch["plan_ms"],
        );
        ensure!(requests.is_some_and(|r| r > 0), "the run counts its apiserver requests");
        ensure!(batch["pods_seen"] == pending, "{batch}");
        Ok(())
    }
    .await;
    let cleaned = scene.cleanup_running().await;
    let cleaned = cleaned.and(scene.cleanup().await);
    result?;
    cleaned
}

impl Scene {
    /// `nodes` kwok Nodes of two types in three zones (not of the test's NodePool), with
    /// `running` pods bound to them directly (`spec.nodeName`: kube-scheduler is not
    /// involved), three quarters full; kwok reports them Running.
    async fn create_running(&self, nodes: usize, running: usize) -> Result<()> {
        use futures_util::{StreamExt, TryStreamExt};
        let node_api = Api::<k8s_openapi::api::core::v1::Node>::all(self.kube.clone());
        let zones = ["us-east-1a", "us-east-1b", "us-east-1c"];
        futures_util::stream::iter(0..nodes)
            .map(|n| {
                let api = node_api.clone();
                let name = format!("{}-n{n}", self.name);
                let node = json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "annotations": {carpool_tests::node::KWOK_ANNOTATION: "fake"},
                        "labels": {"kubernetes.io/hostname": name, "carpool-scale": self.name,
                            "node.kubernetes.io/instance-type": "m5.4xlarge", "kubernetes.io/arch": "amd64",
                            "kubernetes.io/os": "linux", "topology.kubernetes.io/zone": zones[n % 3]}},
                    "spec": {"taints": [{"key": "carpool-scale", "effect": "NoSchedule"}]},
                    "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "234"},
                               "allocatable": {"cpu": "15890m", "memory": "60Gi", "pods": "234"}}
                });
                async move {
                    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(node)?;
                    api.create(&PostParams::default(), &node).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<()>>()
            .await?;
        let pod_api = Api::<Pod>::namespaced(self.kube.clone(), &self.name);
        let per_node = running.div_ceil(nodes.max(1));
        // Three quarters of a node's 15.89 CPUs and 60 GiB over its pods.
        let cpu_m = 11_900 / per_node.max(1);
        let mem_mi = 46_000 / per_node.max(1);
        futures_util::stream::iter(0..running)
            .map(|i| {
                let api = pod_api.clone();
                let node = format!("{}-n{}", self.name, i / per_node);
                let pod = json!({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("r-{i}"), "labels": {"app": format!("run-{}", i % 20)},
                        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x".repeat(600)}},
                    "spec": {"nodeName": node,
                        "tolerations": [{"key": "carpool-scale", "operator": "Exists"}],
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                            "env": [{"name": "A", "value": "b".repeat(200)}],
                            "resources": {"requests": {"cpu": format!("{cpu_m}m"), "memory": format!("{mem_mi}Mi")}}}]}
                });
                async move {
                    let pod: Pod = serde_json::from_value(pod)?;
                    api.create(&PostParams::default(), &pod).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(64)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Deletes the nodes [`Scene::create_running`] made (their pods go with the namespace).
    async fn cleanup_running(&self) -> Result<()> {
        let api = Api::<k8s_openapi::api::core::v1::Node>::all(self.kube.clone());
        api.delete_collection(
            &DeleteParams::default(),
            &kube::api::ListParams::default().labels(&format!("carpool-scale={}", self.name)),
        )
        .await?;
        Ok(())
    }
}
