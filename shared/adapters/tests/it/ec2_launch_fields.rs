//! Issue 28, on the local stack (moto's EC2 and IAM): `associatePublicIPAddress`,
//! `detailedMonitoring` and `context` reach the launch, and `role` works for any role.
//!
//! What Karpenter does, and these tests hold Carpool to (aws/karpenter-provider-aws
//! v1.15.0):
//! - `pkg/providers/launchtemplate/launchtemplate.go`, `generateNetworkInterfaces`: the
//!   launch template has one network interface, `DeviceIndex` 0, carrying the security
//!   groups and `AssociatePublicIpAddress` from the class; `types.go`,
//!   `CreateLaunchTemplateInputBuilder.Build`: `Monitoring.Enabled` is
//!   `detailedMonitoring`, and no top-level `SecurityGroupIds` once an interface is set.
//! - `pkg/providers/instance/instance.go`, `launchInstance`: `nodeClass.Spec.Context`
//!   becomes CreateFleet's `Context` (`CreateFleetInputBuilder.WithContextID`).
//! - `pkg/providers/instanceprofile/instanceprofile.go`, `DefaultProvider.Create`: get the
//!   profile, create it tagged when IAM does not know it, add the role
//!   (`AddRoleToInstanceProfile`, the role's name without its path), cache it; a
//!   `NoSuchEntity` naming the role is remembered (`RoleNotFoundErrorCache`).
//!   `pkg/apis/v1/ec2nodeclass.go`, `InstanceProfileName`/`InstanceProfileTags`: the name
//!   is `<cluster>_<hash>`, the tags name the cluster and `karpenter.k8s.aws/ec2nodeclass`.
//!   Carpool's profile is `carpool_<cluster>_<hash of cluster, region, class, role>`,
//!   tagged `carpool.sh/cluster`, `carpool.sh/ec2nodeclass` and `carpool.sh/managed-by`.
//!
//! moto's instant fleet does not pass the launch template's instance profile or network
//! interface on to the instance it runs (`moto/ec2/models/fleets.py` reads `ImageId`,
//! `InstanceType`, `UserData`...), and ignores `Context`: the template moto stores is read
//! back with DescribeLaunchTemplateVersions, and `Context` is read from the CreateFleet
//! request's bytes as they leave the SDK for moto (an interceptor), not from moto. The
//! interface's security groups are the exception: the stack's `infra/local/moto-server`
//! makes CreateFleet apply them, as EC2 does, and the instances report them.
//!
//! `associatePublicIPAddress` is set on the typed spec here: the model's serde name for it
//! is checked by the model's own tests.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, bail, ensure};
use aws_sdk_ec2::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use carpool::fixtures::EC2NodeClassBuilder;
use carpool::model::{CapacityType, EC2NodeClass};
use carpool::ports::{Cloud, CloudError, LaunchRequest, NodeClassReason};
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::ec2::instance_profile::profile_name;
use carpool_adapters::ec2::{Ec2Clients, Ec2Cloud};
use carpool_tests::{Stack, shared, unique};

const ENDPOINT: &str = "https://apiserver.example:6443";
const CA_BASE64: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";
const SERVICE_CIDR: &str = "172.20.0.0/16";
const DEPLOYMENT: &str = "carpool-test";

/// Records the requests a client sends: the operation's name and the body's bytes, as they
/// leave the SDK.
#[derive(Clone, Debug, Default)]
struct Sent {
    requests: Arc<Mutex<Vec<(String, String)>>>,
}

impl Sent {
    /// The bodies of the requests of operation `name`.
    fn bodies(&self, name: &str) -> Vec<String> {
        self.requests
            .lock()
            .map(|r| r.iter().filter(|(n, _)| n == name).map(|(_, b)| b.clone()).collect())
            .unwrap_or_default()
    }

    /// The names of the operations sent, in order.
    fn names(&self) -> Vec<String> {
        self.requests
            .lock()
            .map(|r| r.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default()
    }

    fn clear(&self) {
        if let Ok(mut r) = self.requests.lock() {
            r.clear();
        }
    }
}

impl Intercept for Sent {
    fn name(&self) -> &'static str {
        "Sent"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let name = cfg.load::<Metadata>().map(|m| m.name().to_string()).unwrap_or_default();
        let body = String::from_utf8_lossy(context.request().body().bytes().unwrap_or_default()).into_owned();
        if let Ok(mut r) = self.requests.lock() {
            r.push((name, body));
        }
        Ok(())
    }
}

/// An EC2 cloud of `cluster` on the stack's moto whose EC2 and IAM requests are recorded.
async fn recorded_cloud(stack: &Stack, cluster: &str) -> Result<(Ec2Cloud, Sent, Sent)> {
    let config = stack.aws_config().await?;
    let (ec2_sent, iam_sent) = (Sent::default(), Sent::default());
    let ec2 = aws_sdk_ec2::Client::from_conf(
        aws_sdk_ec2::config::Builder::from(&config)
            .interceptor(ec2_sent.clone())
            .build(),
    );
    let iam = aws_sdk_iam::Client::from_conf(
        aws_sdk_iam::config::Builder::from(&config)
            .interceptor(iam_sent.clone())
            .build(),
    );
    let cloud = Ec2Cloud::new(
        Ec2Clients {
            ec2,
            iam,
            ..Ec2Clients::new(&config)
        },
        ClusterInfo::new(cluster, ENDPOINT, CA_BASE64, SERVICE_CIDR),
        stack.get("CARPOOL_AMI_SSM_PARAMETER")?,
    );
    Ok((cloud, ec2_sent, iam_sent))
}

/// A class `name` on the stack's subnets and groups, with `spec` over it.
fn node_class(name: &str, spec: serde_json::Value) -> Result<EC2NodeClass> {
    Ok(EC2NodeClassBuilder::new(name)
        .subnet_discovery("carpool-local")
        .security_group_discovery("*")
        .al2023()
        .spec(spec)
        .typed()?)
}

fn launch_request(zone: &str, node_class: EC2NodeClass) -> LaunchRequest {
    LaunchRequest {
        launch_id: unique("launch"),
        deployment: DEPLOYMENT.into(),
        nodepool: "general".into(),
        node_class,
        instance_types: vec!["m5.large".into()],
        zone: zone.into(),
        capacity_type: CapacityType::OnDemand,
        labels: BTreeMap::from([("karpenter.sh/nodepool".to_string(), "general".to_string())]),
        taints: vec![],
        startup_taints: vec![],
    }
}

/// The data of the latest version of launch template `name`, as moto stores it.
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

/// A role in moto's IAM that EC2 may assume.
async fn create_role(iam: &aws_sdk_iam::Client, name: &str) -> Result<()> {
    let trust = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{ "Effect": "Allow", "Principal": { "Service": "ec2.amazonaws.com" }, "Action": "sts:AssumeRole" }]
    });
    iam.create_role()
        .role_name(name)
        .assume_role_policy_document(trust.to_string())
        .send()
        .await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn public_ip_and_detailed_monitoring_are_in_the_launch_template_moto_stores() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let (cloud, _, _) = recorded_cloud(&stack, &unique("fields")).await?;
    let zone = format!("{}a", stack.region()?);

    let mut public = node_class("public", serde_json::json!({ "detailedMonitoring": true }))?;
    public.spec.associate_public_ip_address = Some(true);
    let mut private = node_class("private", serde_json::json!({}))?;
    private.spec.associate_public_ip_address = Some(false);
    let plain = node_class("plain", serde_json::json!({}))?;

    let mut names = Vec::new();
    for (class, public_ip, monitoring) in [
        (public, Some(true), true),
        (private, Some(false), false),
        (plain, None, false),
    ] {
        let request = launch_request(&zone, class);
        let instance = cloud.launch(&request).await?;
        let content = cloud.template_content(&request).await?;
        let data = template_data(cloud.ec2(), &content.name()).await?;
        let interfaces = data.network_interfaces();
        ensure!(interfaces.len() == 1, "one interface: {interfaces:?}");
        let primary = &interfaces[0];
        ensure!(primary.device_index() == Some(0), "{primary:?}");
        ensure!(
            primary.associate_public_ip_address() == public_ip,
            "{}: {primary:?}",
            request.node_class.name()
        );
        ensure!(
            primary.groups() == content.security_group_ids.as_slice() && !primary.groups().is_empty(),
            "the interface holds the class's groups: {primary:?}"
        );
        ensure!(
            data.security_group_ids().is_empty(),
            "no top-level groups: {:?}",
            data.security_group_ids()
        );
        ensure!(
            data.monitoring().and_then(|m| m.enabled()) == Some(monitoring),
            "{}: {:?}",
            request.node_class.name(),
            data.monitoring()
        );
        names.push(content.name());
        cloud.terminate(&instance.id).await?;
    }
    // Only the network fields and monitoring differ between the classes' templates (the
    // class name is not in the content): each gets its own template.
    let distinct: std::collections::BTreeSet<_> = names.iter().collect();
    ensure!(distinct.len() == names.len(), "{names:?}");
    Ok(())
}

/// The security groups EC2 reports on an instance are the class's, spot or on-demand: what
/// the subnet and security group drift compares (Karpenter's `isSecurityGroupDrifted`,
/// aws/karpenter-provider-aws `pkg/cloudprovider/drift.go`). Plain moto gave a spot
/// instance the VPC's default group instead, and every spot node looked drifted.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn every_instance_reports_its_class_security_groups_spot_or_on_demand() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let (cloud, _, _) = recorded_cloud(&stack, &unique("groups")).await?;
    let zone = format!("{}a", stack.region()?);
    for capacity_type in [CapacityType::Spot, CapacityType::OnDemand] {
        let mut request = launch_request(&zone, node_class("grouped", serde_json::json!({}))?);
        request.capacity_type = capacity_type;
        let launched = cloud.launch(&request).await?;
        let mut expected = cloud.template_content(&request).await?.security_group_ids;
        expected.sort();
        let instance = cloud.get(&launched.id).await?;
        cloud.terminate(&launched.id).await?;
        ensure!(!expected.is_empty(), "the class selects groups");
        ensure!(
            instance.network.security_groups == expected,
            "{capacity_type:?}: EC2 reports {:?}, the class selects {expected:?}",
            instance.network.security_groups
        );
        ensure!(instance.network.subnet.is_some(), "{:?}", instance.network);
    }
    Ok(())
}

// Issue 30: a zone whose subnets cannot hold a node's pods' addresses is passed over, so
// the addresses are read with the subnets (DescribeSubnets' `AvailableIpAddressCount`, as
// Karpenter's `ZonalSubnetsForLaunch` reads it). The stack's subnets are /18s: 16,379
// addresses each once AWS's five are taken, less those its instances hold.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn every_subnet_reports_its_free_addresses() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let class = node_class("addressed", serde_json::json!({}))?;
    let (cloud, _, _) = recorded_cloud(&stack, &unique("addresses")).await?;
    let network = cloud.network(&class).await?;
    ensure!(!network.subnets.is_empty(), "the class selects subnets");
    for s in &network.subnets {
        ensure!(
            s.available_ips.is_some_and(|n| n > 0 && n <= (1 << 14) - 5),
            "{}: {:?}",
            s.id,
            s.available_ips
        );
    }
    let zones = network.free_ips_by_zone();
    ensure!(zones.len() == network.zones().len(), "{zones:?}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn the_class_context_is_in_the_create_fleet_request() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let (cloud, ec2_sent, _) = recorded_cloud(&stack, &unique("fields")).await?;
    let zone = format!("{}b", stack.region()?);

    let with = launch_request(
        &zone,
        node_class("contexted", serde_json::json!({ "context": "ec2-context-28" }))?,
    );
    let instance = cloud.launch(&with).await?;
    let bodies = ec2_sent.bodies("CreateFleet");
    ensure!(bodies.len() == 1, "one CreateFleet: {bodies:?}");
    ensure!(
        bodies[0].split('&').any(|field| field == "Context=ec2-context-28"),
        "{}",
        bodies[0]
    );
    cloud.terminate(&instance.id).await?;

    ec2_sent.clear();
    let without = launch_request(&zone, node_class("plain", serde_json::json!({}))?);
    let instance = cloud.launch(&without).await?;
    let bodies = ec2_sent.bodies("CreateFleet");
    ensure!(bodies.len() == 1 && !bodies[0].contains("Context="), "{bodies:?}");
    cloud.terminate(&instance.id).await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn any_role_gets_a_tagged_instance_profile_made_once_and_reused() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let region = stack.region()?.to_string();
    let cluster = unique("role");
    let (cloud, _, iam_sent) = recorded_cloud(&stack, &cluster).await?;
    // The configured node role is another one: this class's role is "any role".
    let cloud = cloud.with_node_role("CarpoolNodeRole", "CarpoolNodeProfile");
    let iam = aws_sdk_iam::Client::new(&stack.aws_config().await?);
    let role = unique("TeamNodeRole");
    create_role(&iam, &role).await?;
    let zone = format!("{region}a");
    let class = node_class(
        "team",
        serde_json::json!({ "role": role, "tags": { "team": "ml", "carpool.sh/cluster": "spoofed" } }),
    )?;

    // First launch: the profile is made, tagged, and holds the role.
    let first = launch_request(&zone, class.clone());
    let instance = cloud.launch(&first).await?;
    let expected = profile_name(&cluster, &region, "team", &role);
    let content = cloud.template_content(&first).await?;
    ensure!(
        content.instance_profile.as_deref() == Some(expected.as_str()),
        "{:?}",
        content.instance_profile
    );
    let data = template_data(cloud.ec2(), &content.name()).await?;
    ensure!(
        data.iam_instance_profile().and_then(|p| p.name()) == Some(expected.as_str()),
        "the launch template moto stores names the profile: {:?}",
        data.iam_instance_profile()
    );
    let made = iam
        .get_instance_profile()
        .instance_profile_name(&expected)
        .send()
        .await?;
    let profile = made.instance_profile().context("no instance profile")?;
    let roles: Vec<&str> = profile.roles().iter().map(|r| r.role_name()).collect();
    ensure!(roles == [role.as_str()], "{roles:?}");
    let tags: BTreeMap<&str, &str> = profile.tags().iter().map(|t| (t.key(), t.value())).collect();
    ensure!(tags.get("carpool.sh/cluster") == Some(&cluster.as_str()), "{tags:?}");
    ensure!(tags.get("carpool.sh/ec2nodeclass") == Some(&"team"), "{tags:?}");
    ensure!(tags.get("carpool.sh/managed-by") == Some(&DEPLOYMENT), "{tags:?}");
    ensure!(tags.get("team") == Some(&"ml"), "the class's tags too: {tags:?}");
    ensure!(
        iam_sent.names()
            == [
                "GetInstanceProfile",
                "CreateInstanceProfile",
                "AddRoleToInstanceProfile"
            ],
        "{:?}",
        iam_sent.names()
    );
    cloud.terminate(&instance.id).await?;

    // Second launch, same function: known, no IAM call.
    iam_sent.clear();
    let instance = cloud.launch(&launch_request(&zone, class.clone())).await?;
    ensure!(iam_sent.names().is_empty(), "{:?}", iam_sent.names());
    cloud.terminate(&instance.id).await?;

    // Another function (nothing cached): found with one GetInstanceProfile, reused.
    let (other, _, other_iam) = recorded_cloud(&stack, &cluster).await?;
    let again = launch_request(&zone, class);
    let instance = other.launch(&again).await?;
    ensure!(other_iam.names() == ["GetInstanceProfile"], "{:?}", other_iam.names());
    ensure!(
        other.template_content(&again).await?.instance_profile.as_deref() == Some(expected.as_str()),
        "the same profile"
    );
    let holding = iam.list_instance_profiles_for_role().role_name(&role).send().await?;
    let names: Vec<&str> = holding
        .instance_profiles()
        .iter()
        .map(|p| p.instance_profile_name())
        .collect();
    ensure!(
        names == [expected.as_str()],
        "one profile in IAM holds the role: {names:?}"
    );
    other.terminate(&instance.id).await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn the_configured_role_uses_the_configured_profile_without_iam() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let (cloud, _, iam_sent) = recorded_cloud(&stack, &unique("role")).await?;
    let cloud = cloud.with_node_role("CarpoolNodeRole", "CarpoolNodeProfile");
    let zone = format!("{}a", stack.region()?);
    let request = launch_request(
        &zone,
        node_class("configured", serde_json::json!({ "role": "CarpoolNodeRole" }))?,
    );
    let instance = cloud.launch(&request).await?;
    let content = cloud.template_content(&request).await?;
    ensure!(
        content.instance_profile.as_deref() == Some("CarpoolNodeProfile"),
        "{:?}",
        content.instance_profile
    );
    ensure!(iam_sent.names().is_empty(), "{:?}", iam_sent.names());
    cloud.terminate(&instance.id).await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_role_iam_does_not_know_is_the_class_error_until_it_exists() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let region = stack.region()?.to_string();
    let cluster = unique("role");
    let (cloud, _, iam_sent) = recorded_cloud(&stack, &cluster).await?;
    let role = unique("MissingRole");
    let zone = format!("{region}a");
    let class = node_class("missing", serde_json::json!({ "role": role }))?;

    match cloud.launch(&launch_request(&zone, class.clone())).await {
        Err(
            e @ CloudError::NodeClass {
                reason: NodeClassReason::RoleNotFound { .. },
                ..
            },
        ) => {
            let msg = e.to_string();
            ensure!(msg.contains("EC2NodeClass missing") && msg.contains(&role), "{msg}");
        }
        other => bail!("expected RoleNotFound, got {other:?}"),
    }
    ensure!(cloud.list().await?.is_empty(), "nothing launched");

    // Within the minute, the same answer without asking IAM again.
    iam_sent.clear();
    let again = cloud.launch(&launch_request(&zone, class.clone())).await;
    ensure!(
        matches!(
            &again,
            Err(CloudError::NodeClass {
                reason: NodeClassReason::RoleNotFound { .. },
                ..
            })
        ),
        "{again:?}"
    );
    ensure!(iam_sent.names().is_empty(), "{:?}", iam_sent.names());

    // Once the role exists, a function that has not cached the answer launches, with the
    // profile the first attempt made (empty until now).
    let iam = aws_sdk_iam::Client::new(&stack.aws_config().await?);
    create_role(&iam, &role).await?;
    let (fresh, _, fresh_iam) = recorded_cloud(&stack, &cluster).await?;
    let instance = fresh.launch(&launch_request(&zone, class)).await?;
    ensure!(
        fresh_iam.names() == ["GetInstanceProfile", "AddRoleToInstanceProfile"],
        "{:?}",
        fresh_iam.names()
    );
    let expected = profile_name(&cluster, &region, "missing", &role);
    let held = iam
        .get_instance_profile()
        .instance_profile_name(&expected)
        .send()
        .await?;
    let roles: Vec<&str> = held
        .instance_profile()
        .map(|p| p.roles().iter().map(|r| r.role_name()).collect())
        .unwrap_or_default();
    ensure!(roles == [role.as_str()], "{roles:?}");
    fresh.terminate(&instance.id).await?;
    Ok(())
}
