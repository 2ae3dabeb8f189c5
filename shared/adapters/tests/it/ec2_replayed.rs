//! The EC2 adapter against a replayed HTTP client: canned AWS responses, in order, for
//! what moto cannot show (it never returns a NextToken, has no Pricing API, and is
//! instantly consistent, so a DescribeInstances never misses a new instance). Needs no
//! stack.
//!
//! The replay client is [`replay`].

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::{Context, Result, ensure};
use carpool::model::{CapacityType, EC2NodeClass};
use carpool::ports::{Cloud, InstanceState, LaunchRequest, OnDemandPrice, epoch_millis};
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::ec2::Ec2Cloud;

use crate::support::replay::{self, Answer, Replay, Seen};

/// An `Ec2Cloud` in `region` of cluster `demo` whose EC2 and Pricing calls go to the replays.
fn cloud(region: &str, ec2: &Replay, pricing: &Replay) -> Ec2Cloud {
    let cluster = ClusterInfo::new("demo", "https://demo.example", "Q0E=", "10.100.0.0/16");
    replay::cloud_of(region, cluster, ec2, &Replay::default(), pricing)
}

const XML: &str = "text/xml;charset=UTF-8";
const JSON: &str = "application/x-amz-json-1.1";

/// A DescribeInstances page with one running instance of cluster `demo`.
fn instances_page(id: &str, zone: &str, next_token: Option<&str>) -> String {
    let next = next_token.map_or(String::new(), |t| format!("<nextToken>{t}</nextToken>"));
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>8f7724cf-496f-496e-8fe3-example</requestId>
    <reservationSet>
        <item>
            <reservationId>r-{id}</reservationId>
            <ownerId>123456789012</ownerId>
            <groupSet/>
            <instancesSet>
                <item>
                    <instanceId>{id}</instanceId>
                    <imageId>ami-0abcdef1234567890</imageId>
                    <instanceState><code>16</code><name>running</name></instanceState>
                    <instanceType>m5.large</instanceType>
                    <launchTime>2026-11-30T10:00:00.000Z</launchTime>
                    <placement><availabilityZone>{zone}</availabilityZone><tenancy>default</tenancy></placement>
                    <subnetId>subnet-1</subnetId>
                    <tagSet>
                        <item><key>carpool.sh/cluster</key><value>demo</value></item>
                        <item><key>carpool.sh/nodepool</key><value>general</value></item>
                        <item><key>carpool.sh/launch-id</key><value>launch-{id}</value></item>
                    </tagSet>
                </item>
            </instancesSet>
        </item>
    </reservationSet>
    {next}
</DescribeInstancesResponse>"#
    )
}

#[tokio::test]
async fn list_follows_next_token_across_describe_instances_pages() -> Result<()> {
    let ec2 = Replay::new(vec![
        (
            XML,
            instances_page("i-0000000000000000a", "us-west-2a", Some("page-2-token")),
        ),
        (XML, instances_page("i-0000000000000000b", "us-west-2b", None)),
    ]);
    let cloud = cloud("us-west-2", &ec2, &Replay::default());
    let listed = cloud.list().await?;
    let ids: Vec<&str> = listed.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, vec!["i-0000000000000000a", "i-0000000000000000b"]);
    assert!(
        listed
            .iter()
            .all(|i| i.state == InstanceState::Running && i.nodepool == "general")
    );
    assert_eq!(listed[1].zone, "us-west-2b");
    assert_eq!(listed[1].launch_id, "launch-i-0000000000000000b");

    let seen = ec2.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].body.contains("Action=DescribeInstances"), "{}", seen[0].body);
    assert!(!seen[0].body.contains("NextToken"), "{}", seen[0].body);
    assert!(seen[1].body.contains("NextToken=page-2-token"), "{}", seen[1].body);
    // Both pages keep the cluster filter.
    assert!(
        seen.iter().all(|s| s.body.contains("tag%3Acarpool.sh%2Fcluster")),
        "{seen:?}"
    );
    assert_eq!(ec2.left(), 0);
    Ok(())
}

/// A GetProducts page: the price list entries as JSON strings, and a next token.
fn products_page(entries: &[String], next_token: Option<&str>) -> Result<String> {
    let mut page = serde_json::json!({ "FormatVersion": "aws_v1", "PriceList": entries });
    if let Some(t) = next_token {
        page["NextToken"] = serde_json::json!(t);
    }
    Ok(serde_json::to_string(&page)?)
}

#[tokio::test]
async fn on_demand_prices_come_from_get_products_across_pages() -> Result<()> {
    let m5 = include_str!("../vectors/pricing_m5_large.json").replace("us-east-1", "us-west-2");
    let c5 = m5
        .replace("m5.large", "c5.large")
        .replace("0.0960000000", "0.0850000000");
    let r5 = m5
        .replace("m5.large", "r5.large")
        .replace("0.0960000000", "0.1260000000");
    let pricing = Replay::new(vec![
        (JSON, products_page(&[m5.clone(), r5], Some("next-page"))?),
        (JSON, products_page(&[c5], None)?),
    ]);
    let cloud = cloud("us-west-2", &Replay::default(), &pricing);
    let prices = cloud
        .on_demand_prices(&["m5.large".to_string(), "c5.large".to_string()])
        .await?;
    assert_eq!(
        prices,
        vec![
            OnDemandPrice {
                instance_type: "c5.large".into(),
                price: 0.085
            },
            OnDemandPrice {
                instance_type: "m5.large".into(),
                price: 0.096
            },
        ]
    );

    let seen = pricing.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let first = &seen[0];
    ensure!(first.uri.contains("api.pricing.us-east-1"), "{}", first.uri);
    assert_eq!(first.target.as_deref(), Some("AWSPriceListService.GetProducts"));
    let body: serde_json::Value = serde_json::from_str(&first.body)?;
    assert_eq!(body["ServiceCode"], "AmazonEC2");
    let filters: Vec<(String, String)> = body["Filters"]
        .as_array()
        .context("no filters")?
        .iter()
        .map(|f| {
            (
                f["Field"].as_str().unwrap_or_default().to_string(),
                f["Value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for wanted in [
        ("regionCode", "us-west-2"),
        ("operatingSystem", "Linux"),
        ("tenancy", "Shared"),
        ("preInstalledSw", "NA"),
        ("capacitystatus", "Used"),
    ] {
        ensure!(
            filters.contains(&(wanted.0.to_string(), wanted.1.to_string())),
            "{wanted:?} not in {filters:?}"
        );
    }
    let second: serde_json::Value = serde_json::from_str(&seen[1].body)?;
    assert_eq!(second["NextToken"], "next-page");

    // No types asked: no call.
    assert!(cloud.on_demand_prices(&[]).await?.is_empty());
    assert_eq!(pricing.seen().len(), 2);
    Ok(())
}

#[tokio::test]
async fn a_failed_pricing_call_is_an_error_the_caller_can_fall_back_on() -> Result<()> {
    // No answers: the replay returns 500s until the SDK's retries run out.
    let pricing = Replay::new(vec![]);
    let cloud = cloud("us-west-2", &Replay::default(), &pricing);
    ensure!(cloud.on_demand_prices(&["m5.large".to_string()]).await.is_err());
    Ok(())
}

/// The EC2NodeClass of the launch tests: a subnet, a security group and an AMI by id, so
/// the launch reads no SSM parameter.
fn node_class() -> Result<EC2NodeClass> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": { "name": "default" },
        "spec": {
            "subnetSelectorTerms": [{ "id": "subnet-0a1b2c3d4e5f60001" }],
            "securityGroupSelectorTerms": [{ "id": "sg-0a1b2c3d4e5f60001" }],
            "amiSelectorTerms": [{ "id": "ami-0abcdef1234567890" }]
        }
    }))?)
}

/// A spot launch of m5.large or c5.large in us-west-2a, with a launch id shaped like the
/// provisioner's (`<Lambda request id>-<n>`).
fn launch_request() -> Result<LaunchRequest> {
    Ok(LaunchRequest {
        launch_id: "8f3b1c2e-5d4a-4e6f-9a7b-0c1d2e3f4a5b-0".into(),
        deployment: "carpool-test".into(),
        nodepool: "general".into(),
        node_class: node_class()?,
        instance_types: vec!["m5.large".into(), "c5.large".into()],
        zone: "us-west-2a".into(),
        capacity_type: CapacityType::Spot,
        labels: BTreeMap::new(),
        taints: vec![],
        startup_taints: vec![],
    })
}

/// What a launch calls before CreateFleet, answered: the class's subnet and security group,
/// and its launch template, which exists already (so no CreateLaunchTemplate).
fn before_create_fleet() -> Vec<Answer> {
    vec![
        (
            200,
            XML,
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeSubnetsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>7a62c49f-347e-4fc4-9331-6e8eEXAMPLE</requestId>
    <subnetSet>
        <item>
            <subnetId>subnet-0a1b2c3d4e5f60001</subnetId>
            <state>available</state>
            <vpcId>vpc-0a1b2c3d4e5f60001</vpcId>
            <cidrBlock>10.0.1.0/24</cidrBlock>
            <availableIpAddressCount>250</availableIpAddressCount>
            <availabilityZone>us-west-2a</availabilityZone>
        </item>
    </subnetSet>
</DescribeSubnetsResponse>"#
                .to_string(),
        ),
        (
            200,
            XML,
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeImagesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>4a1b2c3d-5e6f-7a8b-9c0d-1e2f3EXAMPLE</requestId>
    <imagesSet>
        <item>
            <imageId>ami-0abcdef1234567890</imageId>
            <imageState>available</imageState>
            <architecture>x86_64</architecture>
            <creationDate>2026-11-01T00:00:00.000Z</creationDate>
        </item>
    </imagesSet>
</DescribeImagesResponse>"#
                .to_string(),
        ),
        (
            200,
            XML,
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeSecurityGroupsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>59dbff89-35bd-4eac-99ed-be587EXAMPLE</requestId>
    <securityGroupInfo>
        <item>
            <ownerId>123456789012</ownerId>
            <groupId>sg-0a1b2c3d4e5f60001</groupId>
            <groupName>nodes</groupName>
            <groupDescription>nodes</groupDescription>
            <vpcId>vpc-0a1b2c3d4e5f60001</vpcId>
        </item>
    </securityGroupInfo>
</DescribeSecurityGroupsResponse>"#
                .to_string(),
        ),
        (
            200,
            XML,
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeLaunchTemplatesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>1afa6e44-eb38-4229-8db6-d5eaEXAMPLE</requestId>
    <launchTemplates>
        <item>
            <launchTemplateId>lt-0a1b2c3d4e5f60001</launchTemplateId>
            <launchTemplateName>carpool-0123456789abcdef</launchTemplateName>
            <defaultVersionNumber>1</defaultVersionNumber>
            <latestVersionNumber>1</latestVersionNumber>
        </item>
    </launchTemplates>
</DescribeLaunchTemplatesResponse>"#
                .to_string(),
        ),
    ]
}

/// An instant fleet's answer: one instance `id`, and what the answer says of it (the type
/// and lifecycle of the instance, the type and zone of the overrides used), or only the id.
fn create_fleet_answer(id: &str, described: bool) -> String {
    let details = if described {
        r"<launchTemplateAndOverrides>
                <launchTemplateSpecification>
                    <launchTemplateId>lt-0a1b2c3d4e5f60001</launchTemplateId>
                    <version>1</version>
                </launchTemplateSpecification>
                <overrides>
                    <instanceType>c5.large</instanceType>
                    <subnetId>subnet-0a1b2c3d4e5f60001</subnetId>
                    <availabilityZone>us-west-2a</availabilityZone>
                </overrides>
            </launchTemplateAndOverrides>
            <lifecycle>spot</lifecycle>
            <instanceType>c5.large</instanceType>"
    } else {
        ""
    };
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>e12d5b9f-7a39-4d1c-9d6a-0c2f8EXAMPLE</requestId>
    <fleetId>fleet-12a34b55-67cd-8ef9-ba9b-9208dEXAMPLE</fleetId>
    <errorSet/>
    <fleetInstanceSet>
        <item>
            {details}
            <instanceIds>
                <item>{id}</item>
            </instanceIds>
        </item>
    </fleetInstanceSet>
</CreateFleetResponse>"#
    )
}

/// EC2's answer to a DescribeInstances of an instance it does not show yet (status 400).
fn instance_not_found(id: &str) -> Answer {
    (
        400,
        XML,
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InvalidInstanceID.NotFound</Code><Message>The instance ID '{id}' does not exist</Message></Error></Errors><RequestID>ab2f7d31-54e6-4f3a-9c0d-2e1bEXAMPLE</RequestID></Response>"#
        ),
    )
}

/// The EC2 action of a request the replay saw.
fn action(seen: &Seen) -> &str {
    seen.body
        .split('&')
        .find_map(|kv| kv.strip_prefix("Action="))
        .unwrap_or_default()
}

/// Issue 11, "A launch is never lost, and never doubled": on a real account a
/// DescribeInstances right after CreateFleet can answer `InvalidInstanceID.NotFound` (EC2 is
/// eventually consistent). Here every DescribeInstances would; the launch still returns the
/// instance, as CreateFleet's answer names it, and CreateFleet carries the launch id as its
/// ClientToken, so that sending it again cannot launch a second instance.
#[tokio::test]
async fn a_launch_is_read_from_create_fleets_answer_while_describe_instances_says_not_found() -> Result<()> {
    let id = "i-0123456789abcdef0";
    let mut answers = before_create_fleet();
    answers.push((200, XML, create_fleet_answer(id, true)));
    answers.extend((0..4).map(|_| instance_not_found(id)));
    let ec2 = Replay::with_status(answers);
    let cloud = cloud("us-west-2", &ec2, &Replay::default());
    let request = launch_request()?;

    let before = epoch_millis(SystemTime::now());
    let instance = cloud.launch(&request).await?;
    let after = epoch_millis(SystemTime::now());
    assert_eq!(instance.id, id);
    assert_eq!(instance.instance_type, "c5.large");
    assert_eq!(instance.zone, "us-west-2a");
    assert_eq!(instance.capacity_type, CapacityType::Spot);
    assert_eq!(instance.nodepool, "general");
    assert_eq!(instance.launch_id, request.launch_id);
    assert_eq!(instance.state, InstanceState::Pending);
    ensure!(
        instance.launched_at.is_some_and(|t| (before..=after).contains(&t)),
        "{:?} not in {before}..={after}",
        instance.launched_at
    );

    let seen = ec2.seen();
    let actions: Vec<&str> = seen.iter().map(action).collect();
    assert_eq!(
        actions,
        vec![
            "DescribeSubnets",
            "DescribeImages",
            "DescribeSecurityGroups",
            "DescribeLaunchTemplates",
            "CreateFleet"
        ]
    );
    let create_fleet = &seen[4].body;
    ensure!(
        create_fleet.contains(&format!("ClientToken={}&", request.launch_id)),
        "{create_fleet}"
    );
    // No DescribeInstances was asked: every NotFound answer is left.
    assert_eq!(ec2.left(), 4);
    Ok(())
}

/// Issue 11, the same fault on the fallback: an answer naming only the instance id, for a
/// request of two types, is completed with DescribeInstances, which answers NotFound twice
/// before it shows the instance; the launch waits that out and returns its type.
#[tokio::test]
async fn a_launch_whose_answer_names_no_type_reads_it_once_describe_instances_stops_saying_not_found() -> Result<()> {
    let id = "i-0123456789abcdef1";
    let mut answers = before_create_fleet();
    answers.push((200, XML, create_fleet_answer(id, false)));
    answers.push(instance_not_found(id));
    answers.push(instance_not_found(id));
    answers.push((200, XML, instances_page(id, "us-west-2a", None)));
    let ec2 = Replay::with_status(answers);
    let cloud = cloud("us-west-2", &ec2, &Replay::default());
    let request = launch_request()?;

    let instance = cloud.launch(&request).await?;
    assert_eq!(instance.id, id);
    assert_eq!(instance.instance_type, "m5.large");
    assert_eq!(instance.zone, "us-west-2a");
    assert_eq!(instance.capacity_type, CapacityType::Spot);
    assert_eq!(instance.launch_id, request.launch_id);
    let actions: Vec<String> = ec2.seen().iter().map(|s| action(s).to_string()).collect();
    assert_eq!(
        actions[4..],
        [
            "CreateFleet",
            "DescribeInstances",
            "DescribeInstances",
            "DescribeInstances"
        ]
    );
    assert_eq!(ec2.left(), 0);
    Ok(())
}

/// Issue 11, "AMIs, resolved as Karpenter resolves them": an `id` term goes through
/// DescribeImages, so a Graviton image constrains the class to arm64 types as an alias
/// does; an id EC2 does not know is the class's error, not an unconstrained image.
#[tokio::test]
async fn an_id_term_is_read_by_describe_images_and_gives_its_architecture() -> Result<()> {
    let arm = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeImagesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>4a1b2c3d-5e6f-7a8b-9c0d-1e2f3EXAMPLE</requestId>
    <imagesSet>
        <item>
            <imageId>ami-0123456789arm64</imageId>
            <imageState>available</imageState>
            <architecture>arm64</architecture>
        </item>
    </imagesSet>
</DescribeImagesResponse>"#;
    let unknown = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InvalidAMIID.NotFound</Code><Message>The image id '[ami-0123456789arm64]' does not exist</Message></Error></Errors><RequestID>ab2f7d31-54e6-4f3a-9c0d-2e1bEXAMPLE</RequestID></Response>"#;
    let ec2 = Replay::with_status(vec![(200, XML, arm.to_string()), (400, XML, unknown.to_string())]);
    let cloud = cloud("us-west-2", &ec2, &Replay::default());
    let mut class = node_class()?;
    class.spec.ami_selector_terms[0].id = Some("ami-0123456789arm64".into());

    let images = cloud.images(&class).await?;
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0].id, "ami-0123456789arm64");
    assert_eq!(images[0].arch, Some(carpool::model::Arch::Arm64));
    ensure!(action(&ec2.seen()[0]) == "DescribeImages", "{:?}", ec2.seen());

    // Another class (the cache is per selector terms) whose image EC2 does not know.
    class.spec.ami_selector_terms[0].id = Some("ami-0fffffffffffffff".into());
    match cloud.images(&class).await {
        Err(carpool::ports::CloudError::NodeClass {
            reason: carpool::ports::NodeClassReason::NoImage { .. },
            ..
        }) => {}
        other => anyhow::bail!("expected NoImage, got {other:?}"),
    }
    Ok(())
}
