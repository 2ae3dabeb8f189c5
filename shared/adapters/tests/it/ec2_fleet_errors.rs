//! Fleet capacity errors through a proxy: moto's CreateFleet never reports capacity
//! errors, so a tiny HTTP server on 127.0.0.1 stands between the EC2 client and moto. It
//! answers CreateFleet itself, as EC2 does when no override has capacity (an `errorSet`,
//! no instances), and forwards every other call to moto unchanged. `Ec2Cloud::launch` must
//! return `InsufficientCapacity` naming the offerings that failed.
//!
//! Start the stack first (`infra/local/up`). The proxy binds and forwards to loopback
//! addresses only, and stops after [`MAX_REQUESTS`] or [`IDLE`] without a request.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use carpool::fixtures::EC2NodeClassBuilder;
use carpool::model::{CapacityType, EC2NodeClass};
use carpool::ports::{Cloud, CloudError, LaunchRequest, OfferingKey};
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::ec2::{Ec2Clients, Ec2Cloud};
use carpool_tests::{Stack, shared, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MAX_REQUESTS: usize = 50;
const IDLE: Duration = Duration::from_secs(10);
/// No launch may take longer than this.
const CALL: Duration = Duration::from_secs(60);

/// What EC2 answers an instant fleet that found no capacity (shape of a real response).
fn create_fleet_errors(zone: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<CreateFleetResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>5a9f3e2c-0b1d-4c7e-9f5a-6e8d2c1b0a9f</requestId>
    <fleetId>fleet-9a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d</fleetId>
    <errorSet>
        <item>
            <launchTemplateAndOverrides>
                <launchTemplateSpecification>
                    <launchTemplateId>lt-0123456789abcdef0</launchTemplateId>
                    <version>1</version>
                </launchTemplateSpecification>
                <overrides>
                    <instanceType>m5.large</instanceType>
                    <subnetId>subnet-0123456789abcdef0</subnetId>
                    <availabilityZone>{zone}</availabilityZone>
                </overrides>
            </launchTemplateAndOverrides>
            <lifecycle>spot</lifecycle>
            <errorCode>InsufficientInstanceCapacity</errorCode>
            <errorMessage>We currently do not have sufficient m5.large capacity in the Availability Zone you requested ({zone}). Our system will be working on provisioning additional capacity.</errorMessage>
        </item>
        <item>
            <launchTemplateAndOverrides>
                <launchTemplateSpecification>
                    <launchTemplateId>lt-0123456789abcdef0</launchTemplateId>
                    <version>1</version>
                </launchTemplateSpecification>
                <overrides>
                    <instanceType>c5.large</instanceType>
                    <subnetId>subnet-0123456789abcdef0</subnetId>
                    <availabilityZone>{zone}</availabilityZone>
                </overrides>
            </launchTemplateAndOverrides>
            <lifecycle>spot</lifecycle>
            <errorCode>UnfulfillableCapacity</errorCode>
            <errorMessage>Unable to fulfill capacity due to your request configuration. Please adjust your request and try again.</errorMessage>
        </item>
    </errorSet>
    <fleetInstanceSet/>
</CreateFleetResponse>"#
    )
}

/// One HTTP request: its header block and body. `None` when the client closed first.
async fn read_request(stream: &mut TcpStream) -> Result<Option<(String, Vec<u8>)>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let headers = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let length: usize = headers
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then(|| v.trim().to_string())
        })
        .map_or(Ok(0), |v| v.parse())?;
    while buf.len() < header_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(Some((headers, buf[header_end..header_end + length].to_vec())))
}

/// Sends the request to `upstream` with `connection: close` and returns its whole answer.
async fn forward(upstream: &str, headers: &str, body: &[u8]) -> Result<Vec<u8>> {
    let mut out = String::new();
    for line in headers.trim_end().lines() {
        if !line.to_ascii_lowercase().starts_with("connection:") {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("connection: close\r\n\r\n");
    let mut stream = TcpStream::connect(upstream).await?;
    stream.write_all(out.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    Ok(answer)
}

/// Serves on 127.0.0.1: CreateFleet answered with capacity errors for `zone`, the rest
/// forwarded to `upstream`. Returns the URL and the CreateFleet bodies it saw.
async fn proxy(upstream: String, zone: String) -> Result<(String, Arc<Mutex<Vec<String>>>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let fleets = Arc::new(Mutex::new(Vec::new()));
    let seen = fleets.clone();
    tokio::spawn(async move {
        for _ in 0..MAX_REQUESTS {
            let Ok(Ok((mut stream, _))) = tokio::time::timeout(IDLE, listener.accept()).await else {
                return;
            };
            // One request per connection: each answer closes it.
            let Ok(Some((headers, body))) = read_request(&mut stream).await else {
                continue;
            };
            let text = String::from_utf8_lossy(&body).into_owned();
            let answer = if text.contains("Action=CreateFleet") {
                seen.lock().map(|mut s| s.push(text)).ok();
                let xml = create_fleet_errors(&zone);
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/xml;charset=UTF-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{xml}",
                    xml.len()
                )
                .into_bytes()
            } else {
                match forward(&upstream, &headers, &body).await {
                    Ok(answer) => answer,
                    Err(_) => b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_vec(),
                }
            };
            let _ = stream.write_all(&answer).await;
            let _ = stream.shutdown().await;
        }
    });
    Ok((url, fleets))
}

/// moto's `host:port`, which must be a loopback address.
fn loopback_upstream(endpoint: &str) -> Result<String> {
    let host_port = endpoint
        .strip_prefix("http://")
        .context("moto's endpoint is not plain http")?
        .trim_end_matches('/');
    ensure!(
        host_port.starts_with("127.0.0.1:") || host_port.starts_with("localhost:"),
        "moto must be on loopback, not {host_port}"
    );
    Ok(host_port.to_string())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn fleet_capacity_errors_become_insufficient_capacity_naming_the_offerings() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let zone = format!("{}a", stack.region()?);
    let (url, fleets) = proxy(loopback_upstream(stack.aws_endpoint()?)?, zone.clone()).await?;

    let sdk = stack.aws_config().await?;
    let ec2 = aws_sdk_ec2::config::Builder::from(&sdk).endpoint_url(&url).build();
    let mut clients = Ec2Clients::new(&sdk);
    clients.ec2 = aws_sdk_ec2::Client::from_conf(ec2);
    let cluster = unique("ice");
    let cloud = Ec2Cloud::new(
        clients,
        ClusterInfo::new(&cluster, "https://apiserver.example", "Q0E=", "10.100.0.0/16"),
        stack.get("CARPOOL_AMI_SSM_PARAMETER")?,
    );
    let node_class: EC2NodeClass = EC2NodeClassBuilder::new("default")
        .subnet_discovery("carpool-local")
        .security_group_discovery("*")
        .al2023()
        .typed()?;
    let request = LaunchRequest {
        launch_id: unique("launch"),
        deployment: "carpool-test".into(),
        nodepool: "general".into(),
        node_class,
        instance_types: vec!["m5.large".into(), "c5.large".into()],
        zone: zone.clone(),
        capacity_type: CapacityType::Spot,
        labels: BTreeMap::new(),
        taints: vec![],
        startup_taints: vec![],
    };

    let offering = |t: &str| OfferingKey {
        instance_type: t.into(),
        zone: zone.clone(),
        capacity_type: CapacityType::Spot,
    };
    match tokio::time::timeout(CALL, cloud.launch(&request)).await? {
        Err(CloudError::InsufficientCapacity { offerings }) => {
            assert_eq!(offerings, vec![offering("c5.large"), offering("m5.large")]);
        }
        other => bail!("expected InsufficientCapacity, got {other:?}"),
    }

    // The proxy saw one CreateFleet, with an override per type; the calls before it
    // (subnets, security groups, launch template) went through to moto.
    let fleets = fleets.lock().map_err(|e| anyhow::anyhow!("{e}"))?.clone();
    ensure!(fleets.len() == 1, "{fleets:?}");
    ensure!(
        fleets[0].contains("InstanceType=m5.large") && fleets[0].contains("InstanceType=c5.large"),
        "{}",
        fleets[0]
    );
    ensure!(cloud.list().await?.is_empty(), "nothing was launched");
    Ok(())
}
