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
//! Environment: `VSK_TIMEOUT` (seconds, default 300), `VSK_BOOT_SECONDS` (the harness's
//! registration delay, default 5), `VSK_CLUSTER` (the cluster name in the EC2 tags,
//! default `vsk`).

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use carpool::catalog::Catalog;
use carpool::ports::Cloud;
use carpool::run::config::Config;
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
        let settings = Settings {
            watch,
            release_limit: watch + Duration::from_secs(30),
            ..Settings::from_config(&config, watch)
        };
        let mut p = Provisioner::new(&cloud, &cluster, &store, &TokioClock, settings, &format!("vsk-{runs}"));
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

    // The launches: every instance of this cluster, with the Node it registered as.
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
    std::fs::create_dir_all(&out)?;
    std::fs::write(format!("{out}/launches.json"), serde_json::to_string_pretty(&launches)?)?;
    let _ = harness.stop().await;
    Ok(())
}
