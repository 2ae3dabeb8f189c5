//! The Cloud port on EC2 against the local stack (moto): a launch through `Ec2Cloud`, list,
//! get and terminate, the launch template's content, and zonal offerings. moto never
//! reports capacity errors (see `ec2_fleet_errors.rs`) nor pages (see `ec2_replayed.rs`),
//! and is instantly consistent: a launch whose DescribeInstances answers NotFound is made
//! here by an interceptor that replaces moto's answer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::{Context, Result, bail, ensure};
use aws_sdk_ec2::config::interceptors::BeforeDeserializationInterceptorContextMut;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::types::Filter;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, Metadata};
use aws_smithy_types::body::SdkBody;
use base64::Engine as _;
use carpool::fixtures::EC2NodeClassBuilder;
use carpool::model::{CapacityType, EC2NodeClass};
use carpool::ports::{Cloud, CloudError, LaunchRequest, NodeClassReason};
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::ec2::{Ec2Clients, Ec2Cloud};
use carpool_tests::{Stack, shared, unique};
use k8s_openapi::api::core::v1::Taint;

fn node_class() -> Result<EC2NodeClass> {
    Ok(EC2NodeClassBuilder::new("default")
        .subnet_discovery("carpool-local")
        .security_group_discovery("*")
        .al2023()
        .typed()?)
}

const ENDPOINT: &str = "https://apiserver.example:6443";
const CA_BASE64: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";
const SERVICE_CIDR: &str = "172.20.0.0/16";

/// An EC2 cloud of the cluster `cluster` on the stack's moto.
pub(crate) async fn cloud(stack: &Stack, cluster: &str) -> Result<Ec2Cloud> {
    let config = stack.aws_config().await?;
    Ok(Ec2Cloud::new(
        Ec2Clients::new(&config),
        ClusterInfo::new(cluster, ENDPOINT, CA_BASE64, SERVICE_CIDR),
        stack.get("CARPOOL_AMI_SSM_PARAMETER")?,
    ))
}

/// The parts of a MIME multipart document: (content type, body).
fn mime_parts(document: &[u8]) -> Result<Vec<(String, String)>> {
    let mail = mailparse::parse_mail(document)?;
    ensure!(mail.ctype.mimetype == "multipart/mixed", "{}", mail.ctype.mimetype);
    mail.subparts
        .iter()
        .map(|p| Ok((p.ctype.mimetype.clone(), p.get_body()?)))
        .collect()
}

/// The launch template data of a template name.
async fn template_data(
    ec2: &aws_sdk_ec2::Client,
    name: &str,
) -> Result<aws_sdk_ec2::types::ResponseLaunchTemplateData> {
    let versions = ec2
        .describe_launch_template_versions()
        .launch_template_name(name)
        .send()
        .await?;
    versions
        .launch_template_versions()
        .first()
        .and_then(|v| v.launch_template_data())
        .cloned()
        .context("no launch template data")
}

fn launch_request(zone: &str, capacity_type: CapacityType) -> Result<LaunchRequest> {
    Ok(LaunchRequest {
        launch_id: unique("launch"),
        deployment: "carpool-test".into(),
        nodepool: "general".into(),
        node_class: node_class()?,
        instance_types: vec!["m5.large".into(), "c5.large".into()],
        zone: zone.into(),
        capacity_type,
        labels: BTreeMap::from([("karpenter.sh/nodepool".to_string(), "general".to_string())]),
        taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("batch".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }],
        startup_taints: vec![],
    })
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_launch_on_moto_makes_a_tagged_instance_in_the_zone_with_a_nodeconfig() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let cluster = unique("ec2");
    let cloud = cloud(&stack, &cluster).await?;
    let zone = format!("{}b", stack.region()?);
    let request = launch_request(&zone, CapacityType::OnDemand)?;

    let instance = cloud.launch(&request).await?;
    assert_eq!(instance.zone, zone);
    assert_eq!(instance.instance_type, "m5.large");
    assert_eq!(instance.nodepool, "general");
    assert_eq!(instance.launch_id, request.launch_id);
    assert_eq!(instance.deployment.as_deref(), Some("carpool-test"));
    assert_eq!(instance.capacity_type, CapacityType::OnDemand);

    let ec2 = cloud.ec2();
    let described = ec2.describe_instances().instance_ids(&instance.id).send().await?;
    let raw = described
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .next()
        .context("the instance is not described")?;
    let tags: BTreeMap<&str, &str> = raw.tags().iter().filter_map(|t| Some((t.key()?, t.value()?))).collect();
    assert_eq!(tags.get("carpool.sh/cluster"), Some(&cluster.as_str()));
    assert_eq!(tags.get("carpool.sh/nodepool"), Some(&"general"));
    assert_eq!(tags.get("karpenter.sh/nodepool"), Some(&"general"));
    assert_eq!(tags.get("carpool.sh/launch-id"), Some(&request.launch_id.as_str()));
    assert_eq!(tags.get("carpool.sh/deployment"), Some(&"carpool-test"));
    assert!(tags.contains_key("Name"), "{tags:?}");
    let subnet = raw.subnet_id().context("no subnet")?;
    let subnets = ec2.describe_subnets().subnet_ids(subnet).send().await?;
    assert_eq!(
        subnets.subnets().first().and_then(|s| s.availability_zone()),
        Some(zone.as_str())
    );
    assert_eq!(raw.image_id(), Some(stack.ami_id()?));

    // The launch template: found by the name its content hashes to, with IMDSv2 and the NodeConfig.
    let content = cloud.template_content(&request).await?;
    let data = template_data(ec2, &content.name()).await?;
    assert_eq!(data.image_id(), Some(stack.ami_id()?));
    let metadata = data.metadata_options().context("no metadata options")?;
    assert_eq!(metadata.http_tokens().map(|t| t.as_str()), Some("required"));
    assert_eq!(metadata.http_put_response_hop_limit(), Some(1));
    let user_data = base64::engine::general_purpose::STANDARD.decode(data.user_data().context("no user data")?)?;
    let parts = mime_parts(&user_data)?;
    let node_config = parts
        .iter()
        .find(|(content_type, _)| content_type == "application/node.eks.aws")
        .context("no NodeConfig part")?;
    let config: serde_json::Value = serde_yaml_ng::from_str(&node_config.1)?;
    assert_eq!(config["apiVersion"], "node.eks.aws/v1alpha1");
    assert_eq!(config["kind"], "NodeConfig");
    assert_eq!(config["spec"]["cluster"]["name"], cluster.as_str());
    assert_eq!(config["spec"]["cluster"]["apiServerEndpoint"], ENDPOINT);
    assert_eq!(config["spec"]["cluster"]["certificateAuthority"], CA_BASE64);
    assert_eq!(config["spec"]["cluster"]["cidr"], SERVICE_CIDR);
    // Without class volumes: AL2023's default root.
    let root = data.block_device_mappings().first().context("no block device")?;
    assert_eq!(root.device_name(), Some("/dev/xvda"));
    let ebs = root.ebs().context("no EBS")?;
    assert_eq!(ebs.volume_size(), Some(20));
    assert_eq!(ebs.volume_type().map(|t| t.as_str()), Some("gp3"));
    assert_eq!(ebs.encrypted(), Some(true));
    assert_eq!(
        config["spec"]["kubelet"]["flags"],
        // The adapter adds the AMI it resolved, for the consolidator's drift check.
        serde_json::json!([
            "--node-labels=carpool.sh/image-id=ami-ekslinux,karpenter.sh/nodepool=general",
            "--register-with-taints=dedicated=batch:NoSchedule"
        ])
    );

    // A second launch with the same content reuses the template.
    let second = cloud.launch(&launch_request(&zone, CapacityType::OnDemand)?).await?;
    let templates = ec2
        .describe_launch_templates()
        .launch_template_names(content.name())
        .send()
        .await?;
    assert_eq!(templates.launch_templates().len(), 1);

    // list and get see both; terminate is idempotent.
    let listed: Vec<String> = cloud.list().await?.into_iter().map(|i| i.id).collect();
    assert!(
        listed.contains(&instance.id) && listed.contains(&second.id),
        "{listed:?}"
    );
    assert_eq!(listed.len(), 2, "only this cluster's instances: {listed:?}");
    assert_eq!(cloud.get(&instance.id).await?.id, instance.id);
    cloud.terminate(&instance.id).await?;
    cloud.terminate(&instance.id).await?;
    cloud.terminate(&second.id).await?;
    let listed: Vec<String> = cloud.list().await?.into_iter().map(|i| i.id).collect();
    assert!(listed.is_empty(), "terminated instances are not listed: {listed:?}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_spot_launch_on_moto_is_a_spot_instance() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let cloud = cloud(&stack, &unique("ec2")).await?;
    let zone = format!("{}a", stack.region()?);
    let instance = cloud.launch(&launch_request(&zone, CapacityType::Spot)?).await?;
    assert_eq!(instance.zone, zone);
    assert_eq!(instance.capacity_type, CapacityType::Spot);
    cloud.terminate(&instance.id).await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn get_of_an_unknown_instance_is_not_found_and_terminating_it_succeeds() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let cloud = cloud(&stack, &unique("ec2")).await?;
    match cloud.get("i-0123456789abcdef0").await {
        Err(CloudError::NotFound { id, .. }) => assert_eq!(id, "i-0123456789abcdef0"),
        other => bail!("expected NotFound, got {other:?}"),
    }
    cloud.terminate("i-0123456789abcdef0").await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_zone_without_subnets_fails_before_launching() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let cloud = cloud(&stack, &unique("ec2")).await?;
    match cloud
        .launch(&launch_request("us-east-1f", CapacityType::OnDemand)?)
        .await
    {
        Err(
            e @ CloudError::NodeClass {
                reason: NodeClassReason::NoSubnetInZone { .. },
                ..
            },
        ) => assert!(e.to_string().contains("no subnet"), "{e}"),
        other => bail!("expected an error, got {other:?}"),
    }
    Ok(())
}

fn rich_node_class() -> Result<EC2NodeClass> {
    Ok(EC2NodeClassBuilder::new("rich")
        .subnet_discovery("carpool-local")
        .security_group_discovery("*")
        .al2023()
        .role("CarpoolNodeRole")
        .spec(serde_json::json!({
            "tags": { "team": "payments", "Name": "user-name", "carpool.sh/nodepool": "spoofed" },
            "blockDeviceMappings": [{
                "deviceName": "/dev/xvda",
                "ebs": { "volumeSize": "80Gi", "volumeType": "gp3", "iops": 4000, "throughput": 250,
                         "encrypted": true, "deleteOnTermination": true }
            }],
            "userData": "#!/bin/bash\necho carpool-user-data\n"
        }))
        .typed()?)
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_launch_carries_the_class_volumes_tags_profile_and_user_data() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let cluster = unique("ec2");
    let cloud = cloud(&stack, &cluster)
        .await?
        .with_node_role("CarpoolNodeRole", "CarpoolNodeProfile");
    let zone = format!("{}a", stack.region()?);
    let mut request = launch_request(&zone, CapacityType::OnDemand)?;
    request.node_class = rich_node_class()?;
    let instance = cloud.launch(&request).await?;

    let ec2 = cloud.ec2();
    let content = cloud.template_content(&request).await?;
    let data = template_data(ec2, &content.name()).await?;
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        Some("CarpoolNodeProfile")
    );
    let volume = data.block_device_mappings().first().context("no block device")?;
    assert_eq!(volume.device_name(), Some("/dev/xvda"));
    let ebs = volume.ebs().context("no EBS")?;
    assert_eq!(ebs.volume_size(), Some(80));
    assert_eq!(ebs.iops(), Some(4000));
    assert_eq!(ebs.throughput(), Some(250));
    let user_data = base64::engine::general_purpose::STANDARD.decode(data.user_data().context("no user data")?)?;
    let parts = mime_parts(&user_data)?;
    let types: Vec<&str> = parts.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, vec!["application/node.eks.aws", "text/x-shellscript"]);
    assert!(parts[1].1.contains("echo carpool-user-data"));

    // The launch template carries the class's tags and the cluster tag.
    let templates = ec2
        .describe_launch_templates()
        .launch_template_names(content.name())
        .send()
        .await?;
    let template = templates.launch_templates().first().context("no launch template")?;
    let lt_tags: BTreeMap<&str, &str> = template
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?, t.value()?)))
        .collect();
    assert_eq!(lt_tags.get("team"), Some(&"payments"));
    assert_eq!(lt_tags.get("carpool.sh/cluster"), Some(&cluster.as_str()));

    // The instance: user tags, with Carpool's winning.
    let described = ec2.describe_instances().instance_ids(&instance.id).send().await?;
    let raw = described
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .next()
        .context("the instance is not described")?;
    let tags: BTreeMap<&str, &str> = raw.tags().iter().filter_map(|t| Some((t.key()?, t.value()?))).collect();
    assert_eq!(tags.get("team"), Some(&"payments"));
    assert_eq!(tags.get("carpool.sh/nodepool"), Some(&"general"));
    assert_eq!(tags.get("Name"), Some(&format!("carpool/{cluster}/general").as_str()));

    // Another volume size is another template.
    let mut bigger = request.clone();
    bigger.node_class.spec.block_device_mappings[0]
        .ebs
        .as_mut()
        .context("ebs")?
        .volume_size = Some("100Gi".parse()?);
    assert_ne!(cloud.template_content(&bigger).await?.name(), content.name());
    cloud.terminate(&instance.id).await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn offerings_on_moto_name_types_in_the_regions_zones() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let cloud = cloud(&stack, &unique("ec2")).await?;
    let offerings = cloud.offerings().await?;
    let region = stack.region()?;
    ensure!(!offerings.is_empty(), "moto offers instance types");
    ensure!(
        offerings
            .iter()
            .all(|o| o.zone.starts_with(region) && !o.instance_type.is_empty()),
        "{:?}",
        offerings.first()
    );
    let zone = format!("{region}a");
    ensure!(
        offerings
            .iter()
            .any(|o| o.instance_type == "m5.large" && o.zone == zone),
        "m5.large is offered in {zone}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn the_ec2_cloud_keeps_the_cloud_contract_on_moto() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let cloud = cloud(&stack, &unique("contract")).await?;
    let request = launch_request(&format!("{}a", stack.region()?), CapacityType::OnDemand)?;
    carpool::fakes::cloud_contract(&cloud, &request).await;
    Ok(())
}

/// EC2's answer to a DescribeInstances of an instance it does not show yet.
const INSTANCE_NOT_FOUND: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InvalidInstanceID.NotFound</Code><Message>The instance ID does not exist</Message></Error></Errors><RequestID>ab2f7d31-54e6-4f3a-9c0d-2e1bEXAMPLE</RequestID></Response>"#;

/// While armed, every DescribeInstances goes to moto and its answer is replaced with
/// `InvalidInstanceID.NotFound` (status 400): what a real account can answer right after a
/// launch, as EC2 is eventually consistent, and moto, instantly consistent, never does.
/// Counts the answers it replaced.
#[derive(Clone, Debug, Default)]
struct DescribeInstancesNotFound {
    armed: Arc<AtomicBool>,
    replaced: Arc<AtomicUsize>,
}

impl Intercept for DescribeInstancesNotFound {
    fn name(&self) -> &'static str {
        "DescribeInstancesNotFound"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let describe = cfg.load::<Metadata>().is_some_and(|m| m.name() == "DescribeInstances");
        if !describe || !self.armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.replaced.fetch_add(1, Ordering::SeqCst);
        let response = http::Response::builder()
            .status(400)
            .header("content-type", "text/xml;charset=UTF-8")
            .body(SdkBody::from(INSTANCE_NOT_FOUND))?;
        *context.response_mut() = HttpResponse::try_from(response)?;
        Ok(())
    }
}

/// Issue 11, "A launch is never lost, and never doubled": a DescribeInstances that answers
/// NotFound right after CreateFleet. The launch still returns the instance moto launched,
/// from CreateFleet's answer, and it is the only instance with the launch's id.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_launch_on_moto_is_not_lost_while_describe_instances_says_not_found() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let config = stack.aws_config().await?;
    let fault = DescribeInstancesNotFound::default();
    let ec2 = aws_sdk_ec2::Client::from_conf(
        aws_sdk_ec2::config::Builder::from(&config)
            .interceptor(fault.clone())
            .build(),
    );
    let cloud = Ec2Cloud::new(
        Ec2Clients {
            ec2,
            ..Ec2Clients::new(&config)
        },
        ClusterInfo::new(unique("ec2"), ENDPOINT, CA_BASE64, SERVICE_CIDR),
        stack.get("CARPOOL_AMI_SSM_PARAMETER")?,
    );
    let zone = format!("{}b", stack.region()?);
    let request = launch_request(&zone, CapacityType::OnDemand)?;

    fault.armed.store(true, Ordering::SeqCst);
    let instance = cloud.launch(&request).await?;
    assert_eq!(instance.zone, zone);
    assert_eq!(instance.capacity_type, CapacityType::OnDemand);
    assert_eq!(instance.launch_id, request.launch_id);
    assert_eq!(instance.nodepool, "general");
    // The fault is on: the instance is not readable through the cloud.
    match cloud.get(&instance.id).await {
        Err(CloudError::NotFound { .. }) => {}
        other => bail!("expected NotFound while the fault is on, got {other:?}"),
    }
    ensure!(fault.replaced.load(Ordering::SeqCst) > 0, "the fault never happened");
    fault.armed.store(false, Ordering::SeqCst);

    // Without the fault: one instance carries the launch id, the one the launch returned.
    let tagged = stack
        .ec2()
        .await?
        .describe_instances()
        .filters(
            Filter::builder()
                .name("tag:carpool.sh/launch-id")
                .values(&request.launch_id)
                .build(),
        )
        .send()
        .await?;
    let found: Vec<_> = tagged.reservations().iter().flat_map(|r| r.instances()).collect();
    let ids: Vec<&str> = found.iter().filter_map(|i| i.instance_id()).collect();
    assert_eq!(ids, vec![instance.id.as_str()]);
    assert_eq!(
        found[0].instance_type().map(|t| t.as_str()),
        Some(instance.instance_type.as_str())
    );
    cloud.terminate(&instance.id).await?;
    Ok(())
}
