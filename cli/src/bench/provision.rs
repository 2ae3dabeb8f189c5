//! `carpool bench provision`: one provisioner run, as the Lambda handler makes it, over
//! the in-memory ports: N pending pods of Karpenter's benchmark mix are watched, batched,
//! planned and launched. Reports the planning and run times and the peak memory of the
//! process.

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
struct SkippingClock {
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
    /// Batches.
    pub batches: usize,
    /// Nodes launched (on the fake cloud).
    pub nodes: usize,
    /// Pods left unschedulable.
    pub unschedulable: usize,
    /// Planning time, all rounds.
    pub plan_ms: f64,
    /// The whole run, snapshot to last record (the watch's waits take no time here).
    pub run_ms: f64,
    /// USD per hour added.
    pub cost_per_hour: f64,
    /// Peak resident memory of the process.
    pub peak_rss_mib: Option<f64>,
}

/// Runs the provisioner once over `pods` pending pods.
pub fn run(region: &RegionCatalog<'_>, pods: usize, instance_types: usize) -> Result<ProvisionResult> {
    let snapshot = scenarios::karpenter_mix(region, pods, instance_types);
    let cluster = FakeCluster::new();
    for p in snapshot.pods {
        cluster.add_pod(p);
    }
    for pool in &snapshot.nodepools {
        cluster.add_nodepool(serde_json::to_value(pool)?);
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
    let mut provisioner = Provisioner::new(&cloud, &cluster, &store, &clock, settings, "bench");
    let start = Instant::now();
    let report = pollster::block_on(provisioner.run(region)).context("the provisioner run")?;
    let run_ms = start.elapsed().as_secs_f64() * 1000.0;
    Ok(ProvisionResult {
        pods,
        batches: report.batches.len(),
        nodes: report.launched().count(),
        unschedulable: report.batches.last().map_or(0, |b| b.unschedulable.len()),
        plan_ms: report.batches.iter().map(|b| b.plan_ms as f64).sum(),
        run_ms,
        cost_per_hour: report.batches.iter().map(|b| b.cost_per_hour_added).sum(),
        peak_rss_mib: super::peak_rss_mib(),
    })
}
