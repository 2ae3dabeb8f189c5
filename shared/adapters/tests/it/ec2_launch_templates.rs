//! Issue 26, item 1: launch templates stay bounded and the ones Carpool no longer uses are
//! deleted, on the local stack (moto counts them as EC2 does).
//!
//! Before, each batch's wave label and taint went into the user data, so every batch made
//! a template, up to the Region's 5,000. Now a launch request holds nothing of its batch
//! (`carpool::run::launch::launch_request`: the node registers `carpool.sh/wave=held` and
//! is told its wave after it joins), so 200 batches over four NodePools and three classes
//! make one template per NodePool and capacity type. Karpenter names its templates by a
//! hash of the options that shape them, none per NodeClaim
//! (`launchtemplate.DefaultProvider.ensureLaunchTemplate` and `LaunchTemplateName`,
//! `pkg/providers/launchtemplate/launchtemplate.go` in aws/karpenter-provider-aws), and
//! deletes those that leave its cache (`cachedEvictedFunc`): Carpool's housekeeping deletes
//! the cluster's templates that no live instance was launched from, after an hour idle.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, ensure};
use aws_sdk_ec2::types::Filter;
use carpool::decide::PlannedNode;
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder};
use carpool::model::{CapacityType, Resources};
use carpool::ports::Cloud;
use carpool::run::launch::launch_request;
use carpool::snapshot::Snapshot;
use carpool_tests::{Stack, shared, unique};

use crate::ec2::cloud;

/// (NodePool, EC2NodeClass): four NodePools over three classes.
const POOLS: [(&str, &str); 4] = [
    ("web", "general"),
    ("api", "general"),
    ("batch", "batch"),
    ("gpu", "accel"),
];
const BATCHES: usize = 200;

/// The four NodePools and their three classes, as a run reads them.
fn snapshot() -> Result<Snapshot> {
    let mut snapshot = Snapshot::default();
    for class in ["general", "batch", "accel"] {
        snapshot.nodeclasses.push(
            EC2NodeClassBuilder::new(class)
                .subnet_discovery("carpool-local")
                .security_group_discovery("*")
                .al2023()
                .set("tags", serde_json::json!({ "team": class }))
                .typed()?,
        );
    }
    for (pool, class) in POOLS {
        snapshot.nodepools.push(serde_json::from_value(
            NodePoolBuilder::new(pool)
                .node_class(class)
                .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
                .build(),
        )?);
    }
    Ok(snapshot)
}

/// Batch `i`'s one node: NodePools and capacity types in turn, zones and types varying.
fn planned(i: usize, region: &str) -> PlannedNode {
    let (pool, _) = POOLS[i % POOLS.len()];
    let zone = format!("{region}{}", ['a', 'b', 'c'][i % 3]);
    let instance_type = ["m5.large", "c5.large", "m5.xlarge"][i % 3];
    PlannedNode {
        nodepool: pool.into(),
        instance_type: instance_type.into(),
        instance_types: vec![instance_type.into()],
        zone,
        capacity_type: if (i / POOLS.len()).is_multiple_of(2) {
            CapacityType::Spot
        } else {
            CapacityType::OnDemand
        },
        price_per_hour: 0.1,
        pods: vec![format!("default/pod-{i}")],
        requests: Resources::default(),
        daemonset_overhead: Resources::default(),
        allocatable: Resources::default(),
        labels: BTreeMap::new(),
    }
}

/// The names of the launch templates tagged with `cluster`.
async fn templates(ec2: &aws_sdk_ec2::Client, cluster: &str) -> Result<Vec<String>> {
    let out = ec2
        .describe_launch_templates()
        .filters(Filter::builder().name("tag:carpool.sh/cluster").values(cluster).build())
        .send()
        .await?;
    let mut names: Vec<String> = out
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn two_hundred_batches_make_one_template_per_nodepool_and_capacity_type_and_idle_ones_are_deleted() -> Result<()>
{
    let _stack = shared().await;
    let stack = Stack::load()?;
    let region = stack.region()?.to_string();
    let cluster = unique("lt");
    let cloud = cloud(&stack, &cluster).await?;
    let snapshot = snapshot()?;

    // 200 batches, each with its own launch id and wave, as the provisioner makes them.
    let mut launched: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..BATCHES {
        let node = planned(i, &region);
        let pool = snapshot.nodepools.iter().find(|p| p.name() == node.nodepool);
        let request = launch_request(&format!("run-{i}-b0-0"), "carpool-test", &node, pool, &snapshot, true);
        let instance = cloud.launch(&request).await?;
        launched.entry(node.nodepool.clone()).or_default().push(instance.id);
    }
    let ec2 = cloud.ec2();
    let names = templates(ec2, &cluster).await?;
    // Four NodePools, two capacity types: eight contents, whatever the batch.
    ensure!(
        names.len() == POOLS.len() * 2,
        "{} templates after {BATCHES} batches: {names:?}",
        names.len()
    );

    // Nothing is idle yet: housekeeping deletes nothing in use, nor anything young.
    let deleted = cloud
        .collect_templates(SystemTime::now(), Duration::from_secs(3600))
        .await?;
    ensure!(deleted.is_empty(), "{deleted:?}");
    let later = SystemTime::now() + Duration::from_secs(2 * 3600);
    let deleted = cloud.collect_templates(later, Duration::from_secs(3600)).await?;
    ensure!(deleted.is_empty(), "every template has live instances: {deleted:?}");

    // NodePool `gpu` is deleted: its instances are terminated, and its two templates go.
    for id in launched.get("gpu").context("gpu launched")? {
        cloud.terminate(id).await?;
    }
    let deleted = cloud.collect_templates(later, Duration::from_secs(3600)).await?;
    ensure!(deleted.len() == 2, "{deleted:?}");
    let left = templates(ec2, &cluster).await?;
    ensure!(left.len() == POOLS.len() * 2 - 2, "{left:?}");
    ensure!(left.iter().all(|n| !deleted.contains(n)), "{left:?} {deleted:?}");

    // Another tool's template, untagged, in the same account: never touched.
    let foreign = unique("someone-elses");
    ec2.create_launch_template()
        .launch_template_name(&foreign)
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id(stack.ami_id()?)
                .build(),
        )
        .send()
        .await?;
    cloud.collect_templates(later, Duration::from_secs(3600)).await?;
    let still = ec2
        .describe_launch_templates()
        .launch_template_names(&foreign)
        .send()
        .await?;
    ensure!(
        still.launch_templates().len() == 1,
        "another tool's template was deleted"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_launch_from_a_template_another_invocation_deleted_makes_it_again() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let region = stack.region()?.to_string();
    let cluster = unique("lt-gc");
    // Two invocations: `warm` has the template cached; `sweeper` deletes it.
    let warm = cloud(&stack, &cluster).await?;
    let sweeper = cloud(&stack, &cluster).await?;
    let snapshot = snapshot()?;
    let node = planned(0, &region);
    let pool = snapshot.nodepools.iter().find(|p| p.name() == node.nodepool);
    let request = launch_request("run-1-b0-0", "carpool-test", &node, pool, &snapshot, true);
    let first = warm.launch(&request).await?;
    warm.terminate(&first.id).await?;
    let later = SystemTime::now() + Duration::from_secs(2 * 3600);
    let deleted = sweeper.collect_templates(later, Duration::from_secs(3600)).await?;
    ensure!(deleted.len() == 1, "{deleted:?}");
    ensure!(templates(warm.ec2(), &cluster).await?.is_empty());

    // `warm` still believes the template exists: its launch is refused, and retried once
    // with the template made again.
    let request = launch_request("run-2-b0-0", "carpool-test", &node, pool, &snapshot, true);
    let second = warm.launch(&request).await?;
    ensure!(second.nodepool == node.nodepool);
    ensure!(templates(warm.ec2(), &cluster).await?.len() == 1);
    Ok(())
}
