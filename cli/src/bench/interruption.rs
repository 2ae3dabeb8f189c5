//! `carpool bench interruption`: one batch of spot warnings, as a mass reclaim sends the
//! interruption function, over a generated cluster: the requests the batch makes of the
//! apiserver and the heap it holds at its peak.
//!
//! The cluster is `bench consolidate`'s (`nodes` nodes running `pods` pods); the first
//! `warnings` nodes are spot instances Carpool launched, and each gets a warning. The
//! records are handled concurrently, as the handler does, on a cluster whose every call
//! takes a turn ([`carpool::fakes::Yielding`]), so that they interleave as they do over the
//! network. With `--per-record`, each record reads the cluster for itself, as before the
//! invocation shared one read ([`carpool::run::shared_snapshot`]).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use carpool::catalog::RegionCatalog;
use carpool::decide::interruption::parse_event;
use carpool::fakes::{FakeCloud, FakeCluster, FakeStore, Yielding};
use carpool::model::CapacityType;
use carpool::ports::{Clock, Instance, InstanceState, epoch_millis};
use carpool::run::disruption::{Disrupter, InterruptionSettings, Outcome};
use carpool::run::provision::Settings;
use carpool::run::shared_snapshot::SharedSnapshot;
use futures_util::future::join_all;
use serde::Serialize;
use serde_json::json;

use super::provision::SkippingClock;

/// The figures `bench interruption` reports.
#[derive(Serialize)]
pub struct InterruptionResult {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Running pods.
    pub pods: usize,
    /// Spot warnings in the batch.
    pub warnings: usize,
    /// Whether each record read the cluster for itself.
    pub per_record: bool,
    /// Calls the batch made on the cluster port: what it asks of the apiserver (the fake
    /// answers a list in one call, where the apiserver pages it by 500 objects).
    pub cluster_calls: usize,
    /// Of those, the lists of a whole kind (pods, nodes, budgets, ...).
    pub cluster_lists: usize,
    /// Records whose node was drained.
    pub drained: usize,
    /// Pods evicted.
    pub evicted: usize,
    /// The batch, first record to last.
    pub elapsed_ms: f64,
    /// The heap the batch held at its peak, beyond the fakes and the catalog.
    pub heap_peak_mib: f64,
    /// The heap before the batch: the fakes' copy of the cluster, and the catalog.
    pub fakes_heap_mib: f64,
}

/// The calls of the cluster port that list a whole kind.
const LISTS: [&str; 13] = [
    "pending_pods",
    "scheduled_pods",
    "nodes",
    "daemonsets",
    "pdbs",
    "persistent_volumes",
    "persistent_volume_claims",
    "storage_classes",
    "csinodes",
    "namespaces",
    "nodepools",
    "ec2nodeclasses",
    "nodeoverlays",
];

/// Runs one batch of `warnings` spot warnings over `nodes` nodes running `pods` pods.
pub fn run(
    region: &RegionCatalog<'_>,
    nodes: usize,
    pods: usize,
    warnings: usize,
    per_record: bool,
) -> Result<InterruptionResult> {
    let snapshot = super::consolidate::cluster(region, nodes, pods);
    let (cloud, cluster, store) = (FakeCloud::new(), FakeCluster::new(), FakeStore::new());
    let clock = SkippingClock::default();
    let now = epoch_millis(clock.now());
    cloud.set_now(now);
    let mut instances = Vec::new();
    for (i, mut node) in snapshot.nodes.into_iter().enumerate() {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let zone = labels.get("topology.kubernetes.io/zone").cloned().unwrap_or_default();
        let instance_type = labels
            .get("node.kubernetes.io/instance-type")
            .cloned()
            .unwrap_or_default();
        let id = format!("i-bench{i:012}");
        node.spec.get_or_insert_with(Default::default).provider_id = Some(format!("aws:///{zone}/{id}"));
        cluster.add_node(node);
        let spot = i < warnings;
        cloud.add_instance(Instance {
            id: id.clone(),
            instance_type,
            zone,
            capacity_type: if spot {
                CapacityType::Spot
            } else {
                CapacityType::OnDemand
            },
            nodepool: "default".into(),
            launch_id: format!("bench-{i}"),
            deployment: Some("bench".into()),
            state: InstanceState::Running,
            launched_at: Some(now - 3_600_000),
            network: Default::default(),
        });
        if spot {
            instances.push(id);
        }
    }
    for p in snapshot.pods {
        cluster.add_pod(p);
    }
    for pool in &snapshot.nodepools {
        cluster.add_nodepool(serde_json::to_value(pool)?);
    }
    for class in &snapshot.nodeclasses {
        cluster.add_ec2nodeclass(serde_json::to_value(class)?);
    }
    let events = instances
        .iter()
        .enumerate()
        .map(|(i, id)| {
            parse_event(&json!({
                "version": "0", "id": format!("bench-warning-{i}"),
                "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
                "account": "123456789012", "time": jiff::Timestamp::now().to_string(), "region": "us-east-1",
                "resources": [format!("arn:aws:ec2:us-east-1:123456789012:instance/{id}")],
                "detail": {"instance-id": id, "instance-action": "terminate"}
            }))
            .context("a spot warning")
        })
        .collect::<Result<Vec<_>>>()?;
    let settings = InterruptionSettings {
        provision: Settings {
            deployment: "bench".into(),
            ..Settings::default()
        },
        ..InterruptionSettings::default()
    };
    let yielding = Yielding::new(&cluster);
    // As the handler builds it for a batch: one read, and the spot warnings a burst.
    let shared = SharedSnapshot::new().with_burst(carpool::decide::interruption::spot_warnings(
        &events
            .iter()
            .map(|e| carpool::decide::interruption::InputRecord {
                message_id: None,
                event: Ok(e.clone()),
            })
            .collect::<Vec<_>>(),
    ));
    let calls_before = cluster.calls().len();
    let fakes_heap_mib = super::heap_mib();
    super::reset_heap_peak();
    let start = Instant::now();
    let until = clock.now() + Duration::from_secs(120);
    let reports = pollster::block_on(join_all(events.iter().enumerate().map(|(i, event)| {
        let disrupter = Disrupter::new(
            &cloud,
            &yielding,
            &store,
            &clock,
            settings.clone(),
            &format!("bench-inv/{i}"),
        );
        let disrupter = if per_record {
            disrupter
        } else {
            disrupter.with_shared_snapshot(&shared)
        };
        async move { disrupter.handle(region, event, until).await }
    })));
    let elapsed_ms = start.elapsed().as_secs_f64() * 1000.0;
    let heap_peak_mib = super::heap_peak_mib() - fakes_heap_mib;
    let calls = cluster.calls();
    let calls = &calls[calls_before..];
    let mut drained = 0;
    let mut evicted = 0;
    for r in reports {
        for r in r.context("a record's handling")? {
            drained += usize::from(r.drained || matches!(r.outcome, Outcome::CleanedUp));
            evicted += r.evicted;
        }
    }
    Ok(InterruptionResult {
        nodes,
        pods,
        warnings,
        per_record,
        cluster_calls: calls.len(),
        cluster_lists: calls.iter().filter(|c| LISTS.contains(&c.as_str())).count(),
        drained,
        evicted,
        elapsed_ms,
        heap_peak_mib,
        fakes_heap_mib,
    })
}
