//! AMI aliases against a replayed SSM (canned answers, no stack): `al2023@latest` reads
//! AWS's public parameters under `/aws/service` for the cluster's Kubernetes version in one
//! GetParameters call, gives one image per architecture from what exists, and a second
//! resolution within the refresh interval is answered from the cache, without calling SSM.
//!
//! The replay client is [`replay`].

use anyhow::Result;
use carpool::fixtures::EC2NodeClassBuilder;
use carpool::model::{Arch, EC2NodeClass};
use carpool::ports::{Cloud, ImageVariant, ResolvedImage};
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::ec2::Ec2Cloud;

use crate::support::replay::{self, Replay};

const JSON: &str = "application/x-amz-json-1.1";

/// An `Ec2Cloud` of a cluster on Kubernetes 1.31 whose SSM calls go to `ssm`.
fn cloud(ssm: &Replay) -> Ec2Cloud {
    let cluster =
        ClusterInfo::new("demo", "https://demo.example", "Q0E=", "10.100.0.0/16").with_kubernetes_version("1.31");
    replay::cloud_of("us-east-1", cluster, &Replay::default(), ssm, &Replay::default())
}

fn node_class() -> EC2NodeClass {
    EC2NodeClassBuilder::new("default")
        .discovery("demo")
        .role("KarpenterNodeRole")
        .al2023()
        .typed()
        .unwrap()
}

const X86_STANDARD: &str = "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id";
const X86_NVIDIA: &str = "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id";
const ARM_STANDARD: &str = "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id";

fn parameter(name: &str, value: &str) -> serde_json::Value {
    serde_json::json!({"Name": name, "Type": "String", "Value": value, "Version": 1, "DataType": "aws:ec2:image"})
}

#[tokio::test]
async fn al2023_latest_reads_the_public_parameters_once_and_gives_an_image_per_architecture() -> Result<()> {
    let answer = serde_json::json!({
        "Parameters": [
            parameter(X86_STANDARD, "ami-0x86"),
            parameter(X86_NVIDIA, "ami-0x86gpu"),
            parameter(ARM_STANDARD, "ami-0arm"),
        ],
        "InvalidParameters": [
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/neuron/recommended/image_id",
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/nvidia/recommended/image_id",
        ],
    });
    let ssm = Replay::new(vec![(JSON, answer.to_string())]);
    let cloud = cloud(&ssm);

    let images = cloud.images(&node_class()).await?;
    assert_eq!(
        images,
        vec![
            ResolvedImage::new("ami-0x86", Arch::Amd64, &[ImageVariant::Standard]),
            ResolvedImage::new("ami-0x86gpu", Arch::Amd64, &[ImageVariant::Nvidia]),
            ResolvedImage::new("ami-0arm", Arch::Arm64, &[ImageVariant::Standard]),
        ]
    );
    let seen = ssm.seen();
    assert_eq!(seen.len(), 1, "one GetParameters call: {seen:?}");
    let asked: serde_json::Value = serde_json::from_str(&seen[0].body)?;
    let names: Vec<&str> = asked["Names"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert_eq!(names.len(), 5, "{names:?}");
    assert!(
        names.contains(&X86_STANDARD) && names.contains(&ARM_STANDARD),
        "{names:?}"
    );

    // Within the refresh interval: the cache answers (the replay has no answer left).
    assert_eq!(cloud.images(&node_class()).await?, images);
    assert_eq!(ssm.seen().len(), 1);
    Ok(())
}

#[tokio::test]
async fn an_alias_with_no_parameter_for_the_version_is_a_class_error() -> Result<()> {
    let answer = serde_json::json!({"Parameters": [], "InvalidParameters": [X86_STANDARD]});
    let ssm = Replay::new(vec![(JSON, answer.to_string())]);
    match cloud(&ssm).images(&node_class()).await {
        Err(carpool::ports::CloudError::NodeClass {
            reason: carpool::ports::NodeClassReason::NoImage { detail },
            ..
        }) => assert!(detail.contains("1.31"), "{detail}"),
        other => panic!("expected NoImage, got {other:?}"),
    }
    Ok(())
}
