//! The Cloud port on EC2 against the local stack (moto): a launch through `Ec2Cloud`, list,
//! get and terminate. moto never reports capacity errors; the fleet-error mapping is unit
//! tested in `ec2::errors`.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use carpool::model::{CapacityType, EC2NodeClass};
use carpool::ports::{Cloud, CloudError, LaunchRequest};
use carpool_adapters::ec2::Ec2Cloud;
use carpool_tests::{Stack, shared, unique};
use k8s_openapi::api::core::v1::Taint;

fn node_class() -> Result<EC2NodeClass> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": { "name": "default" },
        "spec": {
            "subnetSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "carpool-local" } }],
            "securityGroupSelectorTerms": [{ "tags": { "karpenter.sh/discovery": "*" } }],
            "amiSelectorTerms": [{ "alias": "al2023@latest" }]
        }
    }))?)
}

async fn cloud(stack: &Stack, cluster: &str) -> Result<Ec2Cloud> {
    let config = stack.aws_config().await?;
    Ok(Ec2Cloud::new(
        aws_sdk_ec2::Client::new(&config),
        aws_sdk_ssm::Client::new(&config),
        cluster,
        stack.get("CARPOOL_AMI_SSM_PARAMETER")?,
    ))
}

fn launch_request(zone: &str, capacity_type: CapacityType) -> Result<LaunchRequest> {
    Ok(LaunchRequest {
        launch_id: unique("launch"),
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
    let versions = ec2
        .describe_launch_template_versions()
        .launch_template_name(content.name())
        .send()
        .await?;
    let data = versions
        .launch_template_versions()
        .first()
        .and_then(|v| v.launch_template_data())
        .context("no launch template data")?;
    assert_eq!(data.image_id(), Some(stack.ami_id()?));
    let metadata = data.metadata_options().context("no metadata options")?;
    assert_eq!(metadata.http_tokens().map(|t| t.as_str()), Some("required"));
    assert_eq!(metadata.http_put_response_hop_limit(), Some(1));
    let user_data = base64::engine::general_purpose::STANDARD.decode(data.user_data().context("no user data")?)?;
    let config: serde_json::Value = serde_yaml_ng::from_slice(&user_data)?;
    assert_eq!(config["apiVersion"], "node.eks.aws/v1alpha1");
    assert_eq!(config["kind"], "NodeConfig");
    assert_eq!(config["spec"]["cluster"]["name"], cluster.as_str());
    assert_eq!(
        config["spec"]["kubelet"]["flags"],
        serde_json::json!([
            "--node-labels=karpenter.sh/nodepool=general",
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
async fn get_of_an_unknown_instance_is_not_found_and_terminating_it_succeeds() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let cloud = cloud(&stack, &unique("ec2")).await?;
    match cloud.get("i-0123456789abcdef0").await {
        Err(CloudError::NotFound(id)) => assert_eq!(id, "i-0123456789abcdef0"),
        other => bail!("expected NotFound, got {other:?}"),
    }
    cloud.terminate("i-0123456789abcdef0").await?;
    Ok(())
}

#[tokio::test]
async fn a_zone_without_subnets_fails_before_launching() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let cloud = cloud(&stack, &unique("ec2")).await?;
    match cloud
        .launch(&launch_request("us-east-1f", CapacityType::OnDemand)?)
        .await
    {
        Err(CloudError::Api(e)) => assert!(e.to_string().contains("no subnet"), "{e}"),
        other => bail!("expected an error, got {other:?}"),
    }
    Ok(())
}
