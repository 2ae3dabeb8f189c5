//! The launch: a launch template reused by the hash of its content, the instant fleet
//! request that launches one instance of one of the request's types in its zone, and what
//! its answer says was launched.
//!
//! From the EC2NodeClass, as Karpenter's launch template and fleet request carry them:
//! `associatePublicIPAddress` on the primary network interface (which holds the security
//! groups), `detailedMonitoring` as the template's `Monitoring`, and `context` as
//! CreateFleet's `Context`.
//!
//! Tags: the EC2NodeClass's `spec.tags` go on the launch template and, through CreateFleet,
//! on the instance and its volumes; Carpool's own tags (cluster, deployment, NodePool,
//! launch id, launch template, `Name`) win over user tags of the same key. Housekeeping terminates only
//! instances with both the launch-id tag and this deployment's tag.

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget, CreateFleetInstance, DefaultTargetCapacityType,
    FleetLaunchTemplateConfigRequest, FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, InstanceLifecycle, InstanceType,
    LaunchTemplateCapacityReservationSpecificationRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest, LaunchTemplateInstanceMarketOptionsRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatesMonitoringRequest, MarketType,
    OnDemandOptionsRequest, RequestLaunchTemplateData, ResourceType, SpotAllocationStrategy, SpotOptionsRequest, Tag,
    TagSpecification, TargetCapacitySpecificationRequest,
};
use std::collections::BTreeMap;

use carpool::model::{CapacityType, EC2NodeClass, ReservationTarget, ReservationType};
use carpool::ports::{EpochMillis, Instance, InstanceState, LaunchRequest};
use serde::Serialize;

use super::block_devices::{BlockDeviceContent, block_devices};

/// The tag naming the cluster of an instance or launch template.
pub const CLUSTER_TAG: &str = "carpool.sh/cluster";
/// The tag naming the NodePool of an instance.
pub const NODEPOOL_TAG: &str = "carpool.sh/nodepool";
/// Karpenter's tag naming the NodePool of an instance.
pub const KARPENTER_NODEPOOL_TAG: &str = "karpenter.sh/nodepool";
/// The tag carrying the launch id of an instance.
pub const LAUNCH_ID_TAG: &str = "carpool.sh/launch-id";
/// The tag naming the deployment (`CARPOOL_DEPLOYMENT`) that launched an instance.
pub const DEPLOYMENT_TAG: &str = "carpool.sh/deployment";
/// The tag naming the launch template an instance was launched from: a template that no
/// live instance names is collected once idle ([`super::template_gc`]).
pub const LAUNCH_TEMPLATE_TAG: &str = "carpool.sh/launch-template";

/// What a launch template holds; its hash names it, so equal content reuses one template.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TemplateContent {
    /// The AMI id.
    pub image_id: String,
    /// Security group ids, sorted: those of the primary network interface.
    pub security_group_ids: Vec<String>,
    /// Whether the primary network interface gets a public IPv4 address
    /// (`associatePublicIPAddress`); `None` leaves it to the subnet's setting.
    pub associate_public_ip_address: Option<bool>,
    /// CloudWatch detailed (one-minute) monitoring (`detailedMonitoring`; off by default).
    pub detailed_monitoring: bool,
    /// `required` or `optional`.
    pub http_tokens: String,
    /// The IMDS hop limit.
    pub hop_limit: i32,
    /// `enabled` or `disabled`.
    pub http_endpoint: String,
    /// The instance profile name, if any.
    pub instance_profile: Option<String>,
    /// Base64 user data.
    pub user_data: String,
    /// The volumes.
    pub block_devices: Vec<BlockDeviceContent>,
    /// The tags of the launch template: the class's, and the cluster tag.
    pub tags: BTreeMap<String, String>,
    /// The capacity reservation a `reserved` launch targets (absent from the hash of any
    /// other launch's template, so those keep their names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<ReservationTarget>,
}

impl TemplateContent {
    /// The content for a class of `cluster`: IMDSv2 required with hop limit 1 unless the
    /// class says otherwise, the class's volumes (or the AL2023 default root), tags,
    /// `associatePublicIPAddress` and `detailedMonitoring`.
    pub fn new(
        node_class: &EC2NodeClass,
        cluster: &str,
        image_id: String,
        security_group_ids: Vec<String>,
        instance_profile: Option<String>,
        user_data: String,
    ) -> Self {
        let metadata = node_class.spec.metadata_options.as_ref();
        TemplateContent {
            image_id,
            security_group_ids,
            associate_public_ip_address: node_class.spec.associate_public_ip_address,
            detailed_monitoring: node_class.spec.detailed_monitoring.unwrap_or(false),
            http_tokens: metadata
                .and_then(|m| m.http_tokens.clone())
                .unwrap_or_else(|| "required".into()),
            hop_limit: metadata
                .and_then(|m| m.http_put_response_hop_limit)
                .and_then(|h| i32::try_from(h).ok())
                .unwrap_or(1),
            http_endpoint: metadata
                .and_then(|m| m.http_endpoint.clone())
                .unwrap_or_else(|| "enabled".into()),
            instance_profile,
            user_data,
            block_devices: block_devices(node_class),
            tags: merged_tags(&node_class.spec.tags, [(CLUSTER_TAG, cluster)]),
            capacity_reservation: None,
        }
    }

    /// The content targeting the reservation a `reserved` request names (its
    /// `karpenter.k8s.aws/capacity-reservation-id` and `-type` labels); any other request's
    /// content as it is.
    pub fn for_request(mut self, request: &LaunchRequest) -> Self {
        if request.capacity_type == CapacityType::Reserved {
            self.capacity_reservation = request.capacity_reservation();
        }
        self
    }

    /// `carpool-<16 hex digits>`: FNV-1a 64 of the content's JSON, stable across builds.
    pub fn name(&self) -> String {
        format!("carpool-{}", carpool::model::content_hash::content_hash(self))
    }

    /// The launch template data. As Karpenter's (`generateNetworkInterfaces` and
    /// `CreateLaunchTemplateInputBuilder.Build`, `pkg/providers/launchtemplate/` in
    /// aws/karpenter-provider-aws): one network interface, device index 0, holding the
    /// security groups and `associatePublicIPAddress` (so no top-level security groups:
    /// EC2 refuses both), and `Monitoring` always set.
    pub fn data(&self) -> RequestLaunchTemplateData {
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .network_interfaces(
                LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(0)
                    .set_associate_public_ip_address(self.associate_public_ip_address)
                    .set_groups(Some(self.security_group_ids.clone()))
                    .build(),
            )
            .monitoring(
                LaunchTemplatesMonitoringRequest::builder()
                    .enabled(self.detailed_monitoring)
                    .build(),
            )
            .user_data(&self.user_data)
            .set_block_device_mappings(Some(
                self.block_devices.iter().map(BlockDeviceContent::request).collect(),
            ))
            .metadata_options(
                LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_tokens(LaunchTemplateHttpTokensState::from(self.http_tokens.as_str()))
                    .http_put_response_hop_limit(self.hop_limit)
                    .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
                        self.http_endpoint.as_str(),
                    ))
                    .build(),
            );
        // A reserved launch goes into its reservation and nowhere else (Karpenter's
        // `CreateLaunchTemplateInputBuilder.Build` in targeted mode,
        // `pkg/providers/launchtemplate/types.go`: `capacity-reservations-only` with the
        // reservation as the target, and the `capacity-block` market for a Capacity Block).
        // Carpool leaves other launches' templates without a reservation specification
        // (EC2's default, `open`), where Karpenter sets `none` in targeted mode.
        if let Some(r) = &self.capacity_reservation {
            data = data.capacity_reservation_specification(
                LaunchTemplateCapacityReservationSpecificationRequest::builder()
                    .capacity_reservation_preference(CapacityReservationPreference::CapacityReservationsOnly)
                    .capacity_reservation_target(
                        CapacityReservationTarget::builder()
                            .capacity_reservation_id(&r.id)
                            .build(),
                    )
                    .build(),
            );
            if r.reservation_type == ReservationType::CapacityBlock {
                data = data.instance_market_options(
                    LaunchTemplateInstanceMarketOptionsRequest::builder()
                        .market_type(MarketType::CapacityBlock)
                        .build(),
                );
            }
        }
        if let Some(profile) = &self.instance_profile {
            data = data.iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(profile)
                    .build(),
            );
        }
        data.build()
    }

    /// The launch template's own tag specification.
    pub fn tag_specification(&self) -> TagSpecification {
        tag_specification(ResourceType::LaunchTemplate, &self.tags)
    }
}

/// The longest client token EC2 accepts.
const MAX_CLIENT_TOKEN: usize = 64;

/// CreateFleet's `ClientToken` for a launch: its launch id, so that the same launch sent
/// twice (by the SDK's retries, or by Carpool itself) launches at most one instance.
///
/// EC2 documents the token as "a unique, case-sensitive identifier that you provide to
/// ensure the idempotency of the request", of at most 64 ASCII characters (CreateFleet in
/// the EC2 API Reference, and "Ensuring idempotency in Amazon EC2 API requests",
/// <https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-idempotency.html>). Launch ids
/// are `<owner>-<n>` with the owner a Lambda request id (a 36-character UUID), so they fit;
/// an id that would not (longer, or not printable ASCII) is replaced by a hash of itself,
/// still one token per launch id, rather than have every launch refused.
pub fn client_token(launch_id: &str) -> String {
    if launch_id.len() <= MAX_CLIENT_TOKEN && launch_id.bytes().all(|b| b.is_ascii_graphic()) {
        launch_id.to_string()
    } else {
        format!(
            "carpool-launch-{:016x}",
            carpool::model::content_hash::fnv1a64(launch_id.as_bytes())
        )
    }
}

/// User tags overlaid with Carpool's, which win.
pub fn merged_tags<'a>(
    user: &BTreeMap<String, String>,
    own: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, String> {
    let mut tags = user.clone();
    tags.extend(own.into_iter().map(|(k, v)| (k.to_string(), v.to_string())));
    tags
}

fn tag_specification(resource: ResourceType, tags: &BTreeMap<String, String>) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(tags.iter().map(|(k, v)| tag(k, v)).collect()))
        .build()
}

/// Whether an error code says the launch template is absent.
pub fn is_template_not_found(e: &impl ProvideErrorMetadata) -> bool {
    matches!(
        e.code(),
        Some("InvalidLaunchTemplateName.NotFoundException" | "InvalidLaunchTemplateId.NotFound")
    )
}

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

/// The tags of a launch's instance and volumes from launch template `template`: the
/// class's, overlaid with Carpool's.
pub fn launch_tags(cluster: &str, request: &LaunchRequest, template: &str) -> BTreeMap<String, String> {
    let name = format!("carpool/{cluster}/{}", request.nodepool);
    merged_tags(
        &request.node_class.spec.tags,
        [
            (CLUSTER_TAG, cluster),
            (DEPLOYMENT_TAG, request.deployment.as_str()),
            (NODEPOOL_TAG, request.nodepool.as_str()),
            (KARPENTER_NODEPOOL_TAG, request.nodepool.as_str()),
            (LAUNCH_ID_TAG, request.launch_id.as_str()),
            (LAUNCH_TEMPLATE_TAG, template),
            ("Name", name.as_str()),
        ],
    )
}

/// The tag specifications of a launch: the instance and its volumes.
pub fn instance_tags(cluster: &str, request: &LaunchRequest, template: &str) -> Vec<TagSpecification> {
    let tags = launch_tags(cluster, request, template);
    vec![
        tag_specification(ResourceType::Instance, &tags),
        tag_specification(ResourceType::Volume, &tags),
    ]
}

/// The overrides: each instance type × each subnet, in the request's order; for on-demand
/// each type's priority is its position (0 first).
pub fn overrides(request: &LaunchRequest, subnets: &[String]) -> Vec<FleetLaunchTemplateOverridesRequest> {
    let mut out = Vec::new();
    for (i, instance_type) in request.instance_types.iter().enumerate() {
        for subnet in subnets {
            let mut o = FleetLaunchTemplateOverridesRequest::builder()
                .instance_type(InstanceType::from(instance_type.as_str()))
                .subnet_id(subnet);
            if request.capacity_type != CapacityType::Spot {
                o = o.priority(i as f64);
            }
            out.push(o.build());
        }
    }
    out
}

/// A CreateFleet `instant` request for one instance of the request with this template, with
/// the launch id as its [`client_token`], and the class's `context` as its `Context` (as
/// Karpenter's `CreateFleetInputBuilder.WithContextID`, `pkg/providers/instance/`).
pub fn create_fleet(
    ec2: &aws_sdk_ec2::Client,
    cluster: &str,
    request: &LaunchRequest,
    template_name: &str,
    subnets: &[String],
) -> aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder {
    // A reserved launch is on-demand capacity taken from the reservation its template
    // targets, or `capacity-block` for a Capacity Block, which takes no on-demand options
    // (Karpenter's `CreateFleetInputBuilder.defaultTargetCapacityType` and `Build`).
    let block = request.capacity_type == CapacityType::Reserved
        && request
            .capacity_reservation()
            .is_some_and(|r| r.reservation_type == ReservationType::CapacityBlock);
    let capacity = match request.capacity_type {
        CapacityType::Spot => DefaultTargetCapacityType::Spot,
        CapacityType::OnDemand => DefaultTargetCapacityType::OnDemand,
        CapacityType::Reserved if block => DefaultTargetCapacityType::CapacityBlock,
        CapacityType::Reserved => DefaultTargetCapacityType::OnDemand,
    };
    let on_demand_options = (!block).then(|| {
        OnDemandOptionsRequest::builder()
            .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
            .build()
    });
    ec2.create_fleet()
        .client_token(client_token(&request.launch_id))
        .r#type(FleetType::Instant)
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(capacity)
                .build(),
        )
        .spot_options(
            SpotOptionsRequest::builder()
                .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                .build(),
        )
        // lowest-price with each type's priority its rank, as Karpenter does: the plan orders
        // the types cheapest first anyway.
        .set_on_demand_options(on_demand_options)
        .launch_template_configs(
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_name(template_name)
                        .version("$Latest")
                        .build(),
                )
                .set_overrides(Some(overrides(request, subnets)))
                .build(),
        )
        .set_tag_specifications(Some(instance_tags(cluster, request, template_name)))
        .set_context(request.node_class.spec.context.clone())
}

/// The instance an instant fleet's answer says it launched, read from the answer alone: no
/// DescribeInstances, which right after a launch can answer `InvalidInstanceID.NotFound`
/// (EC2 is eventually consistent) or be throttled, and would lose a launch that happened.
#[derive(Clone, Debug, PartialEq)]
pub struct Answered {
    /// `i-…`.
    pub id: String,
    /// The type the answer names (the instance's, else its overrides'), else the request's
    /// only type; `None` when the answer names none and the request allowed several.
    pub instance_type: Option<String>,
    /// The answer's zone (the instance's, else its overrides'), else the request's zone:
    /// every subnet the fleet could pick is in it ([`super::resolve::subnets`] selects the
    /// class's subnets in the request's zone only).
    pub zone: String,
    /// The answer's lifecycle (spot or on-demand), else the request's capacity type.
    pub capacity_type: CapacityType,
}

impl Answered {
    /// The first instance of an answer, or `None` when it launched none.
    pub fn from_answer(out: &CreateFleetOutput, request: &LaunchRequest) -> Option<Self> {
        out.instances().iter().find_map(|i| Self::from_instance(i, request))
    }

    fn from_instance(instance: &CreateFleetInstance, request: &LaunchRequest) -> Option<Self> {
        let id = instance.instance_ids().first()?.clone();
        let overrides = instance.launch_template_and_overrides().and_then(|l| l.overrides());
        let only_type = match request.instance_types.as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        };
        let instance_type = instance
            .instance_type()
            .or_else(|| overrides.and_then(|o| o.instance_type()))
            .map(|t| t.as_str().to_string())
            .filter(|t| !t.is_empty())
            .or(only_type);
        let zone = instance
            .availability_zone()
            .or_else(|| overrides.and_then(|o| o.availability_zone()))
            .filter(|z| !z.is_empty())
            .unwrap_or(&request.zone)
            .to_string();
        let capacity_type = match instance.lifecycle() {
            // A reserved launch answers on-demand: it is the reservation's.
            _ if request.capacity_type == CapacityType::Reserved => CapacityType::Reserved,
            Some(InstanceLifecycle::Spot) => CapacityType::Spot,
            Some(InstanceLifecycle::OnDemand) => CapacityType::OnDemand,
            _ => request.capacity_type,
        };
        Some(Answered {
            id,
            instance_type,
            zone,
            capacity_type,
        })
    }

    /// Our view of the launched instance, of `instance_type`: pending, of the request's
    /// NodePool, launch id and deployment, launched at `launched_at`.
    pub fn instance(self, instance_type: String, request: &LaunchRequest, launched_at: EpochMillis) -> Instance {
        Instance {
            id: self.id,
            instance_type,
            zone: self.zone,
            capacity_type: self.capacity_type,
            nodepool: request.nodepool.clone(),
            launch_id: request.launch_id.clone(),
            deployment: Some(request.deployment.clone()),
            state: InstanceState::Pending,
            launched_at: Some(launched_at),
            network: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use carpool::fixtures::EC2NodeClassBuilder;

    use super::*;

    fn request(capacity_type: CapacityType) -> LaunchRequest {
        LaunchRequest {
            launch_id: "l-1".into(),
            deployment: "carpool-test".into(),
            nodepool: "default".into(),
            node_class: EC2NodeClass::named("default"),
            instance_types: vec!["m5.large".into(), "c5.large".into()],
            zone: "us-east-1a".into(),
            capacity_type,
            labels: BTreeMap::new(),
            taints: vec![],
            startup_taints: vec![],
        }
    }

    #[test]
    fn overrides_are_types_by_subnets_with_priorities_for_on_demand() {
        let subnets = vec!["subnet-a".to_string(), "subnet-b".to_string()];
        let od = overrides(&request(CapacityType::OnDemand), &subnets);
        let got: Vec<(String, String, Option<f64>)> = od
            .iter()
            .map(|o| {
                (
                    o.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
                    o.subnet_id().unwrap_or_default().to_string(),
                    o.priority(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("m5.large".into(), "subnet-a".into(), Some(0.0)),
                ("m5.large".into(), "subnet-b".into(), Some(0.0)),
                ("c5.large".into(), "subnet-a".into(), Some(1.0)),
                ("c5.large".into(), "subnet-b".into(), Some(1.0)),
            ]
        );
        assert!(
            overrides(&request(CapacityType::Spot), &subnets)
                .iter()
                .all(|o| o.priority().is_none())
        );
    }

    fn content(class: &EC2NodeClass, ami: &str) -> TemplateContent {
        TemplateContent::new(class, "demo", ami.into(), vec!["sg-1".into()], None, "dXNlcg==".into())
    }

    fn class_with(spec: serde_json::Value) -> EC2NodeClass {
        EC2NodeClassBuilder::new("default").spec(spec).typed().unwrap()
    }

    #[test]
    fn the_name_changes_with_volumes_tags_and_profile() {
        let base = content(&class_with(serde_json::json!({})), "ami-1");
        let bigger = content(
            &class_with(serde_json::json!({
                "blockDeviceMappings": [{ "deviceName": "/dev/xvda", "ebs": { "volumeSize": "50Gi" } }]
            })),
            "ami-1",
        );
        let tagged = content(&class_with(serde_json::json!({ "tags": { "team": "a" } })), "ami-1");
        let retagged = content(&class_with(serde_json::json!({ "tags": { "team": "b" } })), "ami-1");
        let mut profiled = base.clone();
        profiled.instance_profile = Some("p".into());
        let names = [&base, &bigger, &tagged, &retagged, &profiled].map(|c| c.name());
        let distinct: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        assert_eq!(tagged.tags.get("team").map(String::as_str), Some("a"));
        assert_eq!(tagged.tags.get(CLUSTER_TAG).map(String::as_str), Some("demo"));
        let data = bigger.data();
        assert_eq!(
            data.block_device_mappings()[0].ebs().and_then(|e| e.volume_size()),
            Some(50)
        );
    }

    #[test]
    fn carpools_tags_win_over_user_tags_on_instances_and_volumes() {
        let mut r = request(CapacityType::Spot);
        r.node_class = class_with(serde_json::json!({
            "tags": { "Name": "mine", "carpool.sh/cluster": "other", "karpenter.sh/nodepool": "x", "team": "a" }
        }));
        let specs = instance_tags("demo", &r, "carpool-0123456789abcdef");
        let kinds: Vec<_> = specs.iter().map(|s| s.resource_type().cloned()).collect();
        assert_eq!(kinds, vec![Some(ResourceType::Instance), Some(ResourceType::Volume)]);
        for spec in &specs {
            let tags: BTreeMap<&str, &str> = spec
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?, t.value()?)))
                .collect();
            assert_eq!(tags["Name"], "carpool/demo/default");
            assert_eq!(tags[CLUSTER_TAG], "demo");
            assert_eq!(tags[KARPENTER_NODEPOOL_TAG], "default");
            assert_eq!(tags[NODEPOOL_TAG], "default");
            assert_eq!(tags[LAUNCH_ID_TAG], "l-1");
            assert_eq!(tags[DEPLOYMENT_TAG], "carpool-test");
            assert_eq!(tags[LAUNCH_TEMPLATE_TAG], "carpool-0123456789abcdef");
            assert_eq!(tags["team"], "a");
        }
        let lt = content(&r.node_class, "ami-1").tag_specification();
        let lt_tags: BTreeMap<&str, &str> = lt.tags().iter().filter_map(|t| Some((t.key()?, t.value()?))).collect();
        assert_eq!(lt_tags[CLUSTER_TAG], "demo");
        assert_eq!(lt_tags["team"], "a");
    }

    #[test]
    fn template_name_follows_content_and_imds_defaults_to_v2_hop_1() {
        let class: EC2NodeClass = EC2NodeClassBuilder::new("default")
            .typed()
            .map_err(|e| e.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        let a = content(&class, "ami-1");
        let b = content(&class, "ami-2");
        assert_eq!(a.http_tokens, "required");
        assert_eq!(a.hop_limit, 1);
        assert_eq!(a.name(), a.clone().name());
        assert_ne!(a.name(), b.name());
        assert!(a.name().starts_with("carpool-") && a.name().len() == "carpool-".len() + 16);
    }

    fn answer(instance: CreateFleetInstance) -> CreateFleetOutput {
        CreateFleetOutput::builder().instances(instance).build()
    }

    #[test]
    fn the_answer_names_the_instance_its_type_zone_and_lifecycle() {
        use aws_sdk_ec2::types::{FleetLaunchTemplateOverrides, LaunchTemplateAndOverridesResponse};
        let out = answer(
            CreateFleetInstance::builder()
                .instance_ids("i-1")
                .instance_type(InstanceType::from("c5.large"))
                .lifecycle(InstanceLifecycle::OnDemand)
                .launch_template_and_overrides(
                    LaunchTemplateAndOverridesResponse::builder()
                        .overrides(
                            FleetLaunchTemplateOverrides::builder()
                                .instance_type(InstanceType::from("c5.large"))
                                .availability_zone("us-east-1b")
                                .build(),
                        )
                        .build(),
                )
                .build(),
        );
        let got = Answered::from_answer(&out, &request(CapacityType::Spot));
        assert_eq!(
            got,
            Some(Answered {
                id: "i-1".into(),
                instance_type: Some("c5.large".into()),
                zone: "us-east-1b".into(),
                capacity_type: CapacityType::OnDemand,
            })
        );
        let instance = got.map(|a| a.instance("c5.large".into(), &request(CapacityType::Spot), 42));
        assert_eq!(
            instance,
            Some(Instance {
                id: "i-1".into(),
                instance_type: "c5.large".into(),
                zone: "us-east-1b".into(),
                capacity_type: CapacityType::OnDemand,
                nodepool: "default".into(),
                launch_id: "l-1".into(),
                deployment: Some("carpool-test".into()),
                state: InstanceState::Pending,
                launched_at: Some(42),
                network: Default::default(),
            })
        );
    }

    #[test]
    fn what_the_answer_leaves_out_comes_from_the_request() {
        let bare = answer(CreateFleetInstance::builder().instance_ids("i-2").build());
        // Two types allowed: the type stays unknown; the zone and capacity are the request's.
        assert_eq!(
            Answered::from_answer(&bare, &request(CapacityType::Spot)),
            Some(Answered {
                id: "i-2".into(),
                instance_type: None,
                zone: "us-east-1a".into(),
                capacity_type: CapacityType::Spot,
            })
        );
        let mut one_type = request(CapacityType::OnDemand);
        one_type.instance_types = vec!["m5.large".into()];
        let got = Answered::from_answer(&bare, &one_type);
        assert_eq!(got.and_then(|a| a.instance_type), Some("m5.large".into()));
        // No instance id: nothing was launched.
        let none = answer(
            CreateFleetInstance::builder()
                .instance_type(InstanceType::from("m5.large"))
                .build(),
        );
        assert_eq!(Answered::from_answer(&none, &one_type), None);
    }

    #[test]
    fn the_client_token_is_the_launch_id_when_ec2_accepts_it() {
        let id = "0f0e2b4c-3a1d-4c7e-9b8a-2d6f1e0c5a7b-12";
        assert_eq!(client_token(id), id);
        let long = "x".repeat(65);
        let token = client_token(&long);
        assert!(token.len() <= MAX_CLIENT_TOKEN && token.is_ascii(), "{token}");
        assert_eq!(token, client_token(&long));
        assert_ne!(token, client_token(&"y".repeat(65)));
        assert_ne!(client_token("run é-1"), "run é-1");
    }

    /// A class with `associatePublicIPAddress` and `detailedMonitoring` as given, set on the
    /// typed spec (what the adapter reads).
    fn network_class(public_ip: Option<bool>, monitoring: Option<bool>) -> EC2NodeClass {
        let mut class = class_with(serde_json::json!({}));
        class.spec.associate_public_ip_address = public_ip;
        class.spec.detailed_monitoring = monitoring;
        class
    }

    /// Karpenter's `generateNetworkInterfaces` (its last, default branch) and
    /// `CreateLaunchTemplateInputBuilder.Build`,
    /// `pkg/providers/launchtemplate/launchtemplate.go` and `types.go` in
    /// aws/karpenter-provider-aws v1.15.0: one interface, `DeviceIndex` 0, the security
    /// groups as its `Groups` and `AssociatePublicIpAddress` from the class (nil when
    /// unset); `SecurityGroupIds` left out since an interface is defined; `Monitoring`
    /// always set, `Enabled` from `detailedMonitoring`.
    #[test]
    fn the_primary_interface_holds_the_groups_and_public_ip_and_monitoring_is_set() {
        let public = content(&network_class(Some(true), Some(true)), "ami-1").data();
        let interfaces = public.network_interfaces();
        assert_eq!(interfaces.len(), 1);
        assert_eq!(interfaces[0].device_index(), Some(0));
        assert_eq!(interfaces[0].associate_public_ip_address(), Some(true));
        assert_eq!(interfaces[0].groups(), ["sg-1".to_string()]);
        assert!(public.security_group_ids().is_empty(), "groups are the interface's");
        assert_eq!(public.monitoring().and_then(|m| m.enabled()), Some(true));

        let private = content(&network_class(Some(false), None), "ami-1").data();
        assert_eq!(
            private.network_interfaces()[0].associate_public_ip_address(),
            Some(false)
        );
        let unset = content(&network_class(None, None), "ami-1").data();
        assert_eq!(unset.network_interfaces()[0].associate_public_ip_address(), None);
        assert_eq!(unset.monitoring().and_then(|m| m.enabled()), Some(false));
        // `detailedMonitoring` as a manifest writes it.
        let monitored = content(&class_with(serde_json::json!({ "detailedMonitoring": true })), "ami-1");
        assert!(monitored.detailed_monitoring);
    }

    #[test]
    fn classes_differing_only_in_public_ip_or_monitoring_get_their_own_templates() {
        let names: Vec<String> = [
            network_class(None, None),
            network_class(Some(true), None),
            network_class(Some(false), None),
            network_class(None, Some(true)),
        ]
        .iter()
        .map(|class| content(class, "ami-1").name())
        .collect();
        let distinct: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        // `detailedMonitoring: false` is the default, written or not.
        assert_eq!(content(&network_class(None, Some(false)), "ami-1").name(), names[0]);
    }

    /// Karpenter's `instance.DefaultProvider.launchInstance` sets the fleet's context from
    /// `nodeClass.Spec.Context` (`CreateFleetInputBuilder.WithContextID`,
    /// `pkg/providers/instance/instance.go` and `types.go`, v1.15.0); the request built
    /// here is the one `Ec2Cloud::launch` sends.
    #[test]
    fn the_fleet_request_carries_the_class_context() {
        let ec2 = aws_sdk_ec2::Client::from_conf(
            aws_sdk_ec2::Config::builder()
                .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
                .region(aws_sdk_ec2::config::Region::new("us-east-1"))
                .build(),
        );
        let mut r = request(CapacityType::Spot);
        let without = create_fleet(&ec2, "demo", &r, "carpool-0123456789abcdef", &["subnet-a".into()]);
        assert_eq!(without.as_input().get_context(), &None);
        r.node_class = class_with(serde_json::json!({ "context": "ec2-context-123" }));
        let with = create_fleet(&ec2, "demo", &r, "carpool-0123456789abcdef", &["subnet-a".into()]);
        assert_eq!(with.as_input().get_context().as_deref(), Some("ec2-context-123"));
    }

    /// aws/karpenter-provider-aws `CreateLaunchTemplateInputBuilder.Build` (targeted mode)
    /// and `CreateFleetInputBuilder.defaultTargetCapacityType`/`Build`: a reserved launch's
    /// template targets its reservation alone (`capacity-reservations-only`), a Capacity
    /// Block's in the `capacity-block` market; CreateFleet asks for `on-demand` capacity
    /// with on-demand options for an ODCR, `capacity-block` without them for a block. Other
    /// launches' templates are as before, names included.
    #[test]
    fn a_reserved_launch_targets_its_reservation_in_the_template_and_the_fleet() {
        let ec2 = aws_sdk_ec2::Client::from_conf(
            aws_sdk_ec2::Config::builder()
                .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
                .region(aws_sdk_ec2::config::Region::new("us-east-1"))
                .build(),
        );
        let class = network_class(None, None);
        let plain = content(&class, "ami-1");
        assert_eq!(plain.clone().for_request(&request(CapacityType::OnDemand)), plain);
        for (reservation_type, market, capacity) in [
            (ReservationType::Default, None, DefaultTargetCapacityType::OnDemand),
            (
                ReservationType::CapacityBlock,
                Some(MarketType::CapacityBlock),
                DefaultTargetCapacityType::CapacityBlock,
            ),
        ] {
            let mut r = request(CapacityType::Reserved);
            r.instance_types = vec!["m5.large".into()];
            r.labels.extend(
                ReservationTarget {
                    id: "cr-0123".into(),
                    reservation_type,
                }
                .labels(),
            );
            let reserved = content(&class, "ami-1").for_request(&r);
            assert_ne!(reserved.name(), plain.name(), "a template of its own");
            let data = reserved.data();
            let spec = data.capacity_reservation_specification().unwrap();
            assert_eq!(
                spec.capacity_reservation_preference(),
                Some(&CapacityReservationPreference::CapacityReservationsOnly)
            );
            assert_eq!(
                spec.capacity_reservation_target()
                    .and_then(|t| t.capacity_reservation_id()),
                Some("cr-0123")
            );
            assert_eq!(
                data.instance_market_options().and_then(|m| m.market_type()),
                market.as_ref()
            );
            let fleet = create_fleet(&ec2, "demo", &r, &reserved.name(), &["subnet-a".into()]);
            let input = fleet.as_input();
            assert_eq!(
                input
                    .get_target_capacity_specification()
                    .as_ref()
                    .and_then(|t| t.default_target_capacity_type()),
                Some(&capacity)
            );
            assert_eq!(input.get_on_demand_options().is_some(), market.is_none());
        }
    }
}
