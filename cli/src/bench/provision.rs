//! `carpool bench provision`: one provisioner run, as the Lambda handler makes it, over
//! the in-memory ports: N pending pods of Karpenter's benchmark mix are watched, batched,
//! planned and launched, in a cluster that already runs `--nodes` nodes and
//! `--running-pods` pods (three quarters full, one node in eight a quarter full; the
//! generator of `bench consolidate`). Reports the snapshot, planning and run times and the
//! peak memory of the run.
//!
//! The peak is the process's high-water mark, reset once the fakes are filled (Linux's
//! `/proc/self/clear_refs`), so the generator's temporary JSON is not counted. The fake
//! cluster's own copy of every object stays in it, which a Lambda does not hold (that copy
//! lives in the apiserver): `fakes_rss_mib` says how much that is.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use carpool::catalog::RegionCatalog;
use carpool::fakes::{FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::EC2NodeClassBuilder;
use carpool::ports::{Clock, Timer};
use carpool::run::provision::{Provisioner, Settings};
use serde::Serialize;

use super::scenarios;

/// The wall clock, except that a sleep returns at once and moves the clock on: the
/// run's watch costs nothing, and its planning and launching are timed for real.
#[derive(Default)]
pub(super) struct SkippingClock {
    skipped: std::sync::Mutex<Duration>,
}

impl Clock for SkippingClock {
    fn now(&self) -> SystemTime {
        SystemTime::now() + *self.skipped.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Timer for SkippingClock {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        *self.skipped.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += duration;
        Box::pin(std::future::ready(()))
    }
}

/// What one run did.
#[derive(Serialize)]
pub struct ProvisionResult {
    /// Pending pods.
    pub pods: usize,
    /// Nodes already running.
    pub nodes_running: usize,
    /// Pods already running on them.
    pub running_pods: usize,
    /// Batches.
    pub batches: usize,
    /// Nodes launched (on the fake cloud).
    pub nodes: usize,
    /// Pods left unschedulable.
    pub unschedulable: usize,
    /// Reading the snapshot from the cluster, all batches.
    pub snapshot_ms: f64,
    /// Planning time, all rounds.
    pub plan_ms: f64,
    /// Calls the run made on the cluster port: what the run asks the apiserver for. The
    /// fake answers a list in one call, where the apiserver pages it by 500 objects.
    pub cluster_calls: u64,
    /// The whole run, snapshot to last record (the watch's waits take no time here).
    pub run_ms: f64,
    /// USD per hour added.
    pub cost_per_hour: f64,
    /// Peak resident memory of the process during the run.
    pub peak_rss_mib: Option<f64>,
    /// Resident memory before the run: the fakes holding the cluster's objects, the
    /// catalog and the binary.
    pub fakes_rss_mib: Option<f64>,
    /// The heap the run itself held at its peak: the peak of the heap during the run
    /// less what the fakes and the catalog held before it. What a Lambda's run needs on
    /// top of its binary and catalog.
    pub run_heap_peak_mib: f64,
    /// The heap before the run: the fakes' copy of the cluster (the apiserver's, in
    /// production) and the catalog.
    pub fakes_heap_mib: f64,
}

/// Runs the provisioner once over `pods` pending pods, in a cluster running `nodes`
/// nodes and `running_pods` pods.
pub fn run(
    region: &RegionCatalog<'_>,
    pods: usize,
    instance_types: usize,
    nodes: usize,
    running_pods: usize,
) -> Result<ProvisionResult> {
    let cluster = FakeCluster::new();
    {
        let snapshot = scenarios::karpenter_mix(region, pods, instance_types);
        for p in snapshot.pods {
            cluster.add_pod(p);
        }
        for pool in &snapshot.nodepools {
            cluster.add_nodepool(serde_json::to_value(pool)?);
        }
    }
    if nodes > 0 {
        let running = super::consolidate::cluster(region, nodes, running_pods);
        for p in running.pods {
            cluster.add_pod(p);
        }
        for n in running.nodes {
            cluster.add_node(n);
        }
        for pool in &running.nodepools {
            cluster.add_nodepool(serde_json::to_value(pool)?);
        }
    }
    // The EC2NodeClass the pools name: a pool without one launches nothing.
    cluster.add_ec2nodeclass(
        EC2NodeClassBuilder::new("default")
            .role("KarpenterNodeRole")
            .discovery("bench")
            .al2023()
            .build(),
    );
    let (cloud, store) = (FakeCloud::new(), FakeStore::new());
    let clock = SkippingClock::default();
    let settings = Settings {
        watch: Duration::from_secs(2),
        deployment: "bench".into(),
        ..Settings::default()
    };
    let fakes_rss_mib = super::current_rss_mib();
    super::reset_peak_rss();
    let fakes_heap_mib = super::heap_mib();
    super::reset_heap_peak();
    let mut provisioner = Provisioner::new(&cloud, &cluster, &store, &clock, settings, "bench");
    let start = Instant::now();
    let report = pollster::block_on(provisioner.run(region)).context("the provisioner run")?;
    let run_ms = start.elapsed().as_secs_f64() * 1000.0;
    let run_heap_peak_mib = super::heap_peak_mib() - fakes_heap_mib;
    Ok(ProvisionResult {
        pods,
        nodes_running: nodes,
        running_pods: if nodes > 0 { running_pods } else { 0 },
        batches: report.batches.len(),
        nodes: report.launched().count(),
        unschedulable: report.batches.last().map_or(0, |b| b.unschedulable.len()),
        snapshot_ms: report.batches.iter().map(|b| b.snapshot_ms as f64).sum(),
        plan_ms: report.batches.iter().map(|b| b.plan_ms as f64).sum(),
        cluster_calls: report.apiserver_requests,
        run_ms,
        cost_per_hour: report.batches.iter().map(|b| b.cost_per_hour_added).sum(),
        peak_rss_mib: super::peak_rss_mib(),
        fakes_rss_mib,
        run_heap_peak_mib,
        fakes_heap_mib,
    })
}
