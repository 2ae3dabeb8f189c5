//! The EC2 adapter against a replayed HTTP client: canned AWS responses, in order, for
//! what moto cannot show (it never returns a NextToken and has no Pricing API). Needs no
//! stack.
//!
//! The replay client is a few lines over `aws-smithy-runtime-api`'s `HttpConnector`
//! rather than `aws-smithy-mocks` or `aws-smithy-http-client`'s `StaticReplayClient`: both
//! turn on the `test-util` feature of `aws-smithy-http-client`, which every SDK crate
//! builds on, so the test build would compile aws-sdk-ec2 a second time (minutes and
//! gigabytes).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, ensure};
use aws_config::{BehaviorVersion, Region};
use aws_credential_types::Credentials;
use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector, http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::http::Response;
use aws_smithy_types::body::SdkBody;
use carpool::ports::{Cloud, InstanceState, OnDemandPrice};
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::ec2::{Ec2Clients, Ec2Cloud};

/// A request the replay client saw.
#[derive(Clone, Debug)]
struct Seen {
    uri: String,
    target: Option<String>,
    body: String,
}

/// Answers each request with the next canned (content type, body), and records it.
#[derive(Clone, Debug, Default)]
struct Replay {
    answers: Arc<Mutex<VecDeque<(&'static str, String)>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Replay {
    fn new(answers: Vec<(&'static str, String)>) -> Self {
        Replay {
            answers: Arc::new(Mutex::new(answers.into())),
            seen: Arc::default(),
        }
    }

    fn client(&self) -> SharedHttpClient {
        let replay = self.clone();
        http_client_fn(move |_, _| SharedHttpConnector::new(replay.clone()))
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn left(&self) -> usize {
        self.answers.lock().unwrap().len()
    }
}

impl HttpConnector for Replay {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        self.seen.lock().unwrap().push(Seen {
            uri: request.uri().to_string(),
            target: request.headers().get("x-amz-target").map(str::to_string),
            body: String::from_utf8_lossy(request.body().bytes().unwrap_or_default()).into_owned(),
        });
        let (status, content_type, body) = match self.answers.lock().unwrap().pop_front() {
            Some((content_type, body)) => (200, content_type, body),
            None => (500, "text/plain", "the replay ran out of answers".to_string()),
        };
        let response = http::Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(SdkBody::from(body))
            .unwrap();
        HttpConnectorFuture::ready(Ok(Response::try_from(response).unwrap()))
    }
}

fn credentials() -> Credentials {
    Credentials::new("AKIDTEST", "secret", None, None, "replay")
}

/// An `Ec2Cloud` in `region` whose EC2 and Pricing calls go to the replays.
fn cloud(region: &str, ec2: &Replay, pricing: &Replay) -> Ec2Cloud {
    let ec2 = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .credentials_provider(credentials())
        .http_client(ec2.client())
        .build();
    let ssm = aws_sdk_ssm::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .credentials_provider(credentials())
        .http_client(Replay::default().client())
        .build();
    let pricing = aws_sdk_pricing::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(credentials())
        .http_client(pricing.client())
        .build();
    Ec2Cloud::new(
        Ec2Clients {
            ec2: aws_sdk_ec2::Client::from_conf(ec2),
            ssm: aws_sdk_ssm::Client::from_conf(ssm),
            pricing: aws_sdk_pricing::Client::from_conf(pricing),
        },
        ClusterInfo::new("demo", "https://demo.example", "Q0E=", "10.100.0.0/16"),
        "/carpool/ami",
    )
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
    let m5 = include_str!("vectors/pricing_m5_large.json").replace("us-east-1", "us-west-2");
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
