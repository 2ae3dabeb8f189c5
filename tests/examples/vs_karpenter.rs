//! Carpool's half of `bench/vs-karpenter`: the provisioner's run, as the Lambda makes it,
//! against the local stack (moto's EC2 and DynamoDB, the real apiserver and
//! kube-scheduler) with the harness playing the kubelet, until every workload pod
//! (label `carpool.sh/bench=true`) is Running or the timeout passes; then the launches
//! (one per EC2 instance of the run's cluster) as JSON for `measure.py`.
//!
//! ```sh
//! cargo run -p carpool-tests --example vs_karpenter -- OUT_DIR   # stack from $CARPOOL_STATE
//! ```
//!
//! It prints `ready` on stdout once the harness runs; the caller then applies the
//! workload. The NodePools and EC2NodeClasses are applied by the caller beforehand.
//! Once every pod runs (or the timeout passed) it writes `OUT_DIR/launches.json` and
//! prints `provisioned`, and waits for a line on stdin:
//!
//! - `consolidate`: the consolidation phase (the caller has scaled the workload down).
//!   The consolidator's run, as its Lambda makes it (`Consolidator::run` with the
//!   configuration's settings and the function's 300 s timeout less its margin), is
//!   repeated back to back with [`CONSOLIDATE_PAUSE`] between runs (Karpenter's disruption
//!   loop polls every 10 s; the function's default schedule is every 5 minutes), with a
//!   provisioner run whenever a workload pod is pending (the provisioner is always on in
//!   a deployment), until `stop` comes on stdin; then it exits. The runs' reports go to
//!   stderr, their total evictions to `OUT_DIR/consolidator.json`.
//! - `stop` (or the end of stdin): it exits.
//!
//! Environment: `VSK_TIMEOUT` (seconds, default 300), `VSK_BOOT_SECONDS` (the harness's
//! registration delay, default 5), `VSK_CLUSTER` (the cluster name in the EC2 tags,
//! default `vsk`).

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use carpool::catalog::Catalog;
use carpool::ports::Cloud;
use carpool::run::config::Config;
use carpool::run::consolidate::{ConsolidationSettings, Consolidator};
use carpool::run::provision::{Provisioner, Settings};
use carpool_adapters::clock::TokioClock;
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::dynamodb::DynamoStore;
use carpool_adapters::ec2::{Ec2Clients, Ec2Cloud};
use carpool_adapters::kube_cluster::KubeCluster;
use carpool_tests::harness::Config as HarnessConfig;
use carpool_tests::{Harness, Stack};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use serde_json::json;

/// The pause between two consolidator runs in the consolidation phase.
const CONSOLIDATE_PAUSE: Duration = Duration::from_secs(10);
/// The consolidator function's timeout less the handler's margin: a run's deadline.
const CONSOLIDATE_RUN: Duration = Duration::from_secs(300 - 20);

fn env_secs(key: &str, default: u64) -> Duration {
    Duration::from_secs(std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default))
}

async fn all_running(kube: &kube::Client) -> Result<(usize, usize)> {
    let pods = Api::<Pod>::all(kube.clone())
        .list(&ListParams::default().labels("carpool.sh/bench=true"))
        .await?
        .items;
    let running = pods
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    Ok((running, pods.len()))
}

#[tokio::main]
async fn main() -> Result<()> {
    let out = std::env::args().nth(1).context("usage: vs_karpenter OUT_DIR")?;
    let timeout = env_secs("VSK_TIMEOUT", 300);
    let boot = env_secs("VSK_BOOT_SECONDS", 5);
    let name = std::env::var("VSK_CLUSTER").unwrap_or_else(|_| "vsk".into());
    let table = format!("{name}-state");

    let stack = Stack::load()?;
    let kube = stack.kube_client().await?;
    let mut config = Config::from_vars(|k| match k {
        "CARPOOL_CLUSTER_NAME" => Some(name.clone()),
        "CARPOOL_TABLE_NAME" => Some(table.clone()),
        "AWS_REGION" => Some("us-east-1".into()),
        _ => std::env::var(k).ok().filter(|_| k.starts_with("CARPOOL_")),
    })?;
    config.ami_ssm_parameter = stack.get("CARPOOL_AMI_SSM_PARAMETER")?.to_string();
    // Plan on the embedded prices (moto prices every spot offering at 0.00001 USD); the
    // instance-types file Karpenter gets holds the same.
    config.live_prices = false;

    let sdk = stack.aws_config().await?;
    let info = ClusterInfo::new(&name, stack.get("CARPOOL_KUBE_APISERVER")?, "Y2E=", "10.100.0.0/16");
    let cloud = Ec2Cloud::new(Ec2Clients::new(&sdk), info, stack.get("CARPOOL_AMI_SSM_PARAMETER")?)
        .with_node_role("CarpoolNodeRole", "CarpoolNodeProfile");
    let store = DynamoStore::new(stack.dynamodb().await?, &table, &name);
    store.create_table_if_missing().await?;
    let cluster = KubeCluster::new(kube.clone());
    let region = Catalog::embedded()?.region("us-east-1")?;

    let mut hc = HarnessConfig::from_stack(&stack)?.registration_delay(boot);
    hc.cluster = name.clone();
    let harness = Harness::start_on(&stack, hc).await?;
    println!("ready");
    std::io::stdout().flush()?;

    let start = Instant::now();
    let watch = Duration::from_secs(20);
    let provision = Settings {
        watch,
        release_limit: watch + Duration::from_secs(30),
        ..Settings::from_config(&config, watch)
    };
    let mut runs = 0;
    loop {
        let (running, total) = all_running(&kube).await?;
        if total > 0 && running == total {
            eprintln!(
                "carpool: {running}/{total} pods Running after {:.0}s, {runs} runs",
                start.elapsed().as_secs_f64()
            );
            break;
        }
        if start.elapsed() > timeout {
            eprintln!(
                "carpool: timeout: {running}/{total} pods Running after {}s",
                timeout.as_secs()
            );
            break;
        }
        let mut p = Provisioner::new(
            &cloud,
            &cluster,
            &store,
            &TokioClock,
            provision.clone(),
            &format!("vsk-{runs}"),
        );
        match p.run(&region).await {
            Ok(report) => eprintln!(
                "carpool: run {runs}: {}",
                serde_json::to_string(&report).unwrap_or_default()
            ),
            Err(e) => eprintln!("carpool: run {runs} failed: {e}"),
        }
        runs += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    write_launches(&kube, &cloud, &out).await?;
    println!("provisioned");
    std::io::stdout().flush()?;

    // Commands on stdin, read on their own thread.
    let (tx, mut commands) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim().to_string()).is_err() {
                break;
            }
        }
    });
    if commands.recv().await.as_deref() == Some("consolidate") {
        let settings = ConsolidationSettings::from_config(&config);
        let (mut evicted, mut runs) = (0, 0);
        let mut terminated = 0;
        loop {
            match commands.try_recv() {
                Ok(c) if c == "stop" => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => break,
                _ => {}
            }
            let until = SystemTime::now() + CONSOLIDATE_RUN;
            let c = Consolidator::new(
                &cloud,
                &cluster,
                &store,
                &TokioClock,
                settings.clone(),
                &format!("vsk-cons-{runs}"),
            );
            match c.run(&region, until).await {
                Ok(report) => {
                    evicted += report.evicted;
                    terminated += report.nodes_consolidated;
                    eprintln!(
                        "carpool: consolidator run {runs}: {}",
                        serde_json::to_string(&report).unwrap_or_default()
                    );
                }
                Err(e) => eprintln!("carpool: consolidator run {runs} failed: {e}"),
            }
            runs += 1;
            let (running, total) = all_running(&kube).await?;
            if running < total {
                let mut p = Provisioner::new(
                    &cloud,
                    &cluster,
                    &store,
                    &TokioClock,
                    provision.clone(),
                    &format!("vsk-p{runs}"),
                );
                match p.run(&region).await {
                    Ok(report) => eprintln!(
                        "carpool: provisioner run during consolidation: {}",
                        serde_json::to_string(&report).unwrap_or_default()
                    ),
                    Err(e) => eprintln!("carpool: provisioner run during consolidation failed: {e}"),
                }
            }
            tokio::time::sleep(CONSOLIDATE_PAUSE).await;
        }
        std::fs::write(
            format!("{out}/consolidator.json"),
            serde_json::to_string_pretty(&json!({"runs": runs, "evicted": evicted, "nodes_consolidated": terminated}))?,
        )?;
    }
    let _ = harness.stop().await;
    Ok(())
}

/// The launches: every instance of this cluster, with the Node it registered as.
async fn write_launches(kube: &kube::Client, cloud: &Ec2Cloud, out: &str) -> Result<()> {
    let nodes: HashMap<String, String> = Api::<Node>::all(kube.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| {
            let id = n.spec.as_ref()?.provider_id.as_ref()?.rsplit('/').next()?.to_string();
            Some((id, n.metadata.name?))
        })
        .collect();
    let launches: Vec<_> = cloud
        .list()
        .await?
        .into_iter()
        .filter(|i| !i.is_gone())
        .map(|i| {
            json!({"id": i.id, "node": nodes.get(&i.id), "launched_at": i.launched_at,
                "instance_type": i.instance_type, "zone": i.zone, "capacity_type": i.capacity_type.label()})
        })
        .collect();
    std::fs::create_dir_all(out)?;
    std::fs::write(format!("{out}/launches.json"), serde_json::to_string_pretty(&launches)?)?;
    Ok(())
}
