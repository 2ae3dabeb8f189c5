//! The AMIs of a class constrain the instance types planned for it, as Karpenter's AMI
//! requirements do: a class whose images are only x86-64 never gets Graviton types, and a
//! pod that needs arm64 is unschedulable with a requirements conflict on
//! `kubernetes.io/arch`.

use std::time::{Duration, SystemTime};

use carpool::catalog::Catalog;
use carpool::decide::provisioning::unschedulable::{Kind, Mismatch, Reason};
use carpool::fakes::{FakeClock, FakeCloud, FakeCluster, FakeStore};
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder};
use carpool::model::Arch;
use carpool::ports::{ImageVariant, ResolvedImage};
use carpool::run::provision::{Provisioner, RunReport, Settings};
use pollster::block_on;

const START: u64 = 1_790_000_000;

fn settings() -> Settings {
    Settings {
        deployment: "carpool-test".into(),
        watch: Duration::from_secs(0),
        ..Settings::default()
    }
}

fn world(images: Option<Vec<ResolvedImage>>) -> (FakeCloud, FakeCluster, FakeStore, FakeClock) {
    let cloud = FakeCloud::new();
    cloud.set_now(START as i64 * 1000);
    if let Some(images) = images {
        cloud.set_images("default", images);
    }
    let cluster = FakeCluster::new();
    cluster.add_nodepool(
        NodePoolBuilder::new("general")
            .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r", "g"])
            .requirement("kubernetes.io/arch", "In", &["amd64", "arm64"])
            .build(),
    );
    cluster.add_ec2nodeclass(
        EC2NodeClassBuilder::new("default")
            .role("KarpenterNodeRole")
            .discovery("prod")
            .al2023()
            .build(),
    );
    for i in 0..6 {
        let mut pod = PodBuilder::new(&format!("web-{i}"))
            .namespace("web")
            .uid(&format!("web-{i}"))
            .created("2026-09-21T12:00:00Z")
            .image("nginx")
            .requests("1", "2Gi")
            .unschedulable();
        if i == 0 {
            pod = pod.node_selector("kubernetes.io/arch", "arm64");
        }
        if i == 1 {
            pod = pod.request("nvidia.com/gpu", "1").limit("nvidia.com/gpu", "1");
        }
        cluster.add_pod(pod.pod().unwrap());
    }
    let clock = FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(START));
    (cloud, cluster, store(), clock)
}

fn store() -> FakeStore {
    FakeStore::new()
}

fn run(images: Option<Vec<ResolvedImage>>) -> RunReport {
    let (cloud, cluster, store, clock) = world(images);
    let catalog = Catalog::embedded().unwrap();
    let region = catalog.region("us-east-1").unwrap();
    let mut p = Provisioner::new(&cloud, &cluster, &store, &clock, settings(), "run-1");
    block_on(p.run(&region)).unwrap()
}

fn arch_of(instance_type: &str) -> Arch {
    Catalog::embedded().unwrap().get(instance_type).unwrap().arch
}

#[test]
fn a_class_with_only_x86_standard_images_never_gets_arm64_or_gpu_types() {
    let report = run(Some(vec![ResolvedImage::new(
        "ami-x86",
        Arch::Amd64,
        &[ImageVariant::Standard],
    )]));
    let batch = &report.batches[0];
    assert!(report.launched().count() > 0, "{batch:?}");
    for l in report.launched() {
        assert_eq!(arch_of(&l.instance_type), Arch::Amd64, "{l:?}");
        let it = Catalog::embedded().unwrap().get(&l.instance_type).unwrap();
        assert_eq!(it.gpu_count, 0, "{l:?}");
    }
    let arm = batch.unschedulable.iter().find(|u| u.pod == "web/web-0").unwrap();
    assert!(arm.reasons.iter().all(|r| r.kind() == Kind::Requirements), "{arm:?}");
    assert!(
        arm.reasons.iter().any(|r| matches!(
            r,
            Reason::Requirements { mismatch: Mismatch::Conflict { detail }, .. } if detail.contains("kubernetes.io/arch")
        )),
        "{arm:?}"
    );
    assert!(arm.reasons.iter().any(|r| r.to_string().contains("kubernetes.io/arch")));
    let gpu = batch.unschedulable.iter().find(|u| u.pod == "web/web-1").unwrap();
    assert!(!gpu.reasons.is_empty(), "{gpu:?}");
}

#[test]
fn with_images_for_both_architectures_the_arm64_pod_gets_a_graviton_node() {
    let report = run(None);
    let batch = &report.batches[0];
    assert!(batch.unschedulable.is_empty(), "{:?}", batch.unschedulable);
    assert!(report.launched().any(|l| arch_of(&l.instance_type) == Arch::Arm64));
}
