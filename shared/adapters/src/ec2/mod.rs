//! The `Cloud` port on EC2: launches through an instant CreateFleet with a launch template
//! reused by content hash, reads Carpool's instances by the `carpool.sh/cluster` tag.
//!
//! - [`resolve`]: subnets and security groups of an EC2NodeClass.
//! - [`capacity_reservations`]: the capacity reservations its terms select.
//! - [`lookups`]: subnets, security groups and launch templates looked up lately, kept
//!   for 5 minutes so that repeated launches do not repeat the Describe calls.
//! - [`ami`]: its AMIs, as Karpenter resolves them (aliases through the public SSM
//!   parameters, terms through DescribeImages), each with what it boots; cached.
//! - [`instance_profile`]: the instance profile of a class (its own, the configured node
//!   role's, or one Carpool makes for the class's role in IAM and reuses).
//! - [`user_data`]: the AL2023 nodeadm NodeConfig merged with the class's user data.
//! - [`mime`]: the MIME multipart document that user data is.
//! - [`block_devices`]: the volumes of a launch template.
//! - [`fleet`]: the launch template (content, tags), the CreateFleet request, and the
//!   instance its answer says was launched.
//! - [`pricing`]: on-demand prices from the Price List API.
//! - [`offerings`]: the instance types offered in each zone.
//! - [`errors`]: SDK errors and fleet errors as `CloudError`.

pub mod al2_bootstrap;
pub mod ami;
pub mod block_devices;
pub mod bottlerocket;
pub mod capacity_reservations;
pub mod errors;
pub mod fleet;
pub mod instance_profile;
pub mod lookups;
pub mod mime;
pub mod offerings;
pub mod pricing;
pub mod resolve;
pub mod template_gc;
pub mod user_data;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_ec2::types::{Filter, InstanceLifecycleType, InstanceStateName};
use base64::Engine as _;
use carpool::model::CapacityType;
use carpool::model::EC2NodeClass;
use carpool::model::ec2nodeclass::UserDataFormat;
use carpool::ports::{
    Cloud, CloudError, Instance, InstanceNetwork, InstanceState, LaunchRequest, NodeClassReason, OnDemandPrice,
    ResolvedImage, ResolvedNetwork, SpotPrice, ZonalOffering, epoch_millis,
};

use self::errors::{NOT_FOUND_CODES, fleet_failure, map_launch_err, map_sdk_err};
use self::fleet::{
    Answered, CLUSTER_TAG, DEPLOYMENT_TAG, LAUNCH_ID_TAG, NODEPOOL_TAG, TemplateContent, create_fleet,
    is_template_not_found,
};
pub use self::instance_profile::NodeRole;
pub use self::lookups::{LOOKUP_TTL, Lookups};
use crate::cluster_info::ClusterInfo;

/// The waits of [`Ec2Cloud::launched_type`] between DescribeInstances calls that find the
/// instance not visible yet or are throttled: four calls over 1.5 s at most.
const LAUNCHED_TYPE_WAITS_MS: [u64; 3] = [250, 500, 750];

/// How long a class's resolved AMIs are reused before they are resolved again: a batch
/// (and the launches of a run) read SSM and DescribeImages once per class, and a new
/// `@latest` release is picked up within this.
pub const AMI_REFRESH: Duration = Duration::from_secs(300);

/// Resolved AMIs by the class's terms (and the Kubernetes version), with when.
type AmiCache = Arc<Mutex<BTreeMap<String, (Instant, Vec<ResolvedImage>)>>>;

/// The SDK clients the EC2 adapter uses.
#[derive(Clone, Debug)]
pub struct Ec2Clients {
    /// EC2, in the cluster's region.
    pub ec2: aws_sdk_ec2::Client,
    /// SSM, in the cluster's region (AMI parameters).
    pub ssm: aws_sdk_ssm::Client,
    /// The Price List API, on its own endpoint ([`pricing::client`] makes one).
    pub pricing: aws_sdk_pricing::Client,
    /// IAM (global): the instance profiles made for the roles EC2NodeClasses name.
    pub iam: aws_sdk_iam::Client,
}

impl Ec2Clients {
    /// The clients for one SDK configuration (its region is the cluster's).
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Ec2Clients {
            ec2: aws_sdk_ec2::Client::new(sdk),
            ssm: aws_sdk_ssm::Client::new(sdk),
            pricing: pricing::client(sdk),
            iam: aws_sdk_iam::Client::new(sdk),
        }
    }
}

/// Carpool's instances of one cluster in EC2, launched as one EC2NodeClass says.
#[derive(Clone, Debug)]
pub struct Ec2Cloud {
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    pricing: aws_sdk_pricing::Client,
    iam: aws_sdk_iam::Client,
    cluster: ClusterInfo,
    ami_ssm_parameter: String,
    public_ssm_root: String,
    node_role: Option<NodeRole>,
    lookups: Lookups,
    amis: AmiCache,
    /// When this warm function last collected launch templates
    /// ([`template_gc::COLLECT_EVERY`]).
    collected_at: std::sync::Arc<std::sync::Mutex<Option<SystemTime>>>,
}

impl Ec2Cloud {
    /// A cloud for `cluster`, launching each request as its EC2NodeClass says, with the AMI
    /// id read from the SSM parameter `ami_ssm_parameter` unless the class names an AMI id
    /// or parameter. Nodes join with `cluster`'s endpoint, CA and service CIDR.
    pub fn new(clients: Ec2Clients, cluster: ClusterInfo, ami_ssm_parameter: impl Into<String>) -> Self {
        Ec2Cloud {
            ec2: clients.ec2,
            ssm: clients.ssm,
            pricing: clients.pricing,
            iam: clients.iam,
            cluster,
            ami_ssm_parameter: ami_ssm_parameter.into(),
            public_ssm_root: carpool::run::config::DEFAULT_PUBLIC_SSM_ROOT.to_string(),
            node_role: None,
            lookups: Lookups::default(),
            amis: AmiCache::default(),
            collected_at: Default::default(),
        }
    }

    /// Keeps subnet, security group and launch template lookups for `ttl` instead of
    /// [`LOOKUP_TTL`] (zero keeps none: every launch looks them up).
    pub fn with_lookup_ttl(mut self, ttl: Duration) -> Self {
        self.lookups = Lookups::new(ttl);
        self
    }

    /// The root AWS's public SSM parameters are read under (default `/aws/service`):
    /// AMI aliases resolve through `<root>/eks/optimized-ami/...` and
    /// `<root>/bottlerocket/...`.
    pub fn with_public_ssm_root(mut self, root: impl Into<String>) -> Self {
        self.public_ssm_root = root.into();
        self
    }

    /// The AMIs of a class, from the cache when resolved less than [`AMI_REFRESH`] ago.
    pub async fn resolved_images(
        &self,
        node_class: &carpool::model::EC2NodeClass,
    ) -> Result<Vec<ResolvedImage>, CloudError> {
        let key = format!(
            "{}|{:?}",
            serde_json::to_string(&node_class.spec.ami_selector_terms).unwrap_or_default(),
            self.cluster.kubernetes_version
        );
        let cached = self
            .amis
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .filter(|(at, _)| at.elapsed() < AMI_REFRESH)
            .map(|(_, images)| images.clone());
        if let Some(images) = cached {
            return Ok(images);
        }
        let sources = ami::AmiSources {
            ssm: &self.ssm,
            ec2: &self.ec2,
            public_root: &self.public_ssm_root,
            kubernetes_version: self.cluster.kubernetes_version.as_deref(),
            default_parameter: &self.ami_ssm_parameter,
        };
        let images = ami::images(&sources, node_class).await?;
        self.amis
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, (Instant::now(), images.clone()));
        Ok(images)
    }

    /// The image a request launches with, and the request narrowed to the types that
    /// image boots (a request's types may span architectures; one launch template has one
    /// image).
    async fn image_for(&self, request: &LaunchRequest) -> Result<(String, LaunchRequest), CloudError> {
        let images = self.resolved_images(&request.node_class).await?;
        let no_image = || CloudError::NodeClass {
            node_class: request.node_class.name().to_string(),
            reason: NodeClassReason::NoImageForTypes {
                instance_types: request.instance_types.join(", "),
            },
            source: None,
        };
        let (image, types) = ami::pick(&images, &request.instance_types).ok_or_else(no_image)?;
        if types.is_empty() {
            return Err(no_image());
        }
        let mut narrowed = request.clone();
        narrowed.instance_types = types;
        Ok((image.id, narrowed))
    }

    /// The node role the deployment created an instance profile for: a class whose
    /// `spec.role` is `role` launches with `instance_profile`, with no IAM call (any other
    /// role gets a profile Carpool makes, [`instance_profile`]).
    pub fn with_node_role(mut self, role: impl Into<String>, instance_profile: impl Into<String>) -> Self {
        self.node_role = Some(NodeRole {
            role: role.into(),
            instance_profile: instance_profile.into(),
        });
        self
    }

    /// The cluster's name.
    pub fn cluster(&self) -> &str {
        &self.cluster.name
    }

    /// The region of the EC2 client (the one prices and offerings are for).
    fn region(&self) -> Result<String, CloudError> {
        self.ec2
            .config()
            .region()
            .map(ToString::to_string)
            .ok_or_else(|| CloudError::Api("the EC2 client has no region".into()))
    }

    /// The EC2 client.
    pub fn ec2(&self) -> &aws_sdk_ec2::Client {
        &self.ec2
    }

    /// The name of a launch template holding `content`, created (tagged with the cluster)
    /// when no template of that name exists (known to exist for [`LOOKUP_TTL`] once seen
    /// or created).
    pub async fn ensure_launch_template(&self, content: &TemplateContent) -> Result<String, CloudError> {
        let name = content.name();
        if self.lookups.templates.get(&name).is_some() {
            return Ok(name);
        }
        let ensured = self.describe_or_create_template(content, name.clone()).await;
        if ensured.is_ok() {
            self.lookups.templates.put(name, ());
        }
        ensured
    }

    /// Forgets that a template exists: it is looked up (and created) again at its next use.
    fn forget_template(&self, name: &str) {
        self.lookups.templates.forget(&name.to_string());
    }

    async fn describe_or_create_template(&self, content: &TemplateContent, name: String) -> Result<String, CloudError> {
        match self
            .ec2
            .describe_launch_templates()
            .launch_template_names(&name)
            .send()
            .await
        {
            Ok(out) if !out.launch_templates().is_empty() => return Ok(name),
            Ok(_) => {}
            Err(e) if e.as_service_error().is_some_and(is_template_not_found) => {}
            Err(e) => return Err(map_sdk_err("DescribeLaunchTemplates", e)),
        }
        let created = self
            .ec2
            .create_launch_template()
            .launch_template_name(&name)
            .launch_template_data(content.data())
            .tag_specifications(content.tag_specification())
            .send()
            .await;
        match created {
            Ok(_) => Ok(name),
            Err(e)
                if e.as_service_error()
                    .and_then(aws_sdk_ec2::error::ProvideErrorMetadata::code)
                    == Some("InvalidLaunchTemplateName.AlreadyExistsException") =>
            {
                Ok(name)
            }
            Err(e) => Err(map_sdk_err("CreateLaunchTemplate", e)),
        }
    }

    /// The template content for a request: the class's AMI for the request's first type
    /// ([`ami::pick`]), security groups, instance profile, volumes and tags, and user data
    /// with the request's labels and taints (startup taints included) merged with the
    /// class's own.
    pub async fn template_content(&self, request: &LaunchRequest) -> Result<TemplateContent, CloudError> {
        let (image_id, _) = self.image_for(request).await?;
        self.template_content_with(request, image_id).await
    }

    async fn template_content_with(
        &self,
        request: &LaunchRequest,
        image_id: String,
    ) -> Result<TemplateContent, CloudError> {
        let node_class = &request.node_class;
        // The family says the user data, whatever the selector form (an alias's family,
        // else `amiFamily`): AL2023's nodeadm NodeConfig, Bottlerocket's TOML settings,
        // AL2's bootstrap.sh, or, for `Custom`, the class's userData verbatim.
        let format = node_class.user_data_format();
        if format == UserDataFormat::Windows {
            return Err(CloudError::NodeClass {
                node_class: node_class.name().to_string(),
                reason: NodeClassReason::WindowsFamily {
                    family: node_class.spec.ami_family.clone().unwrap_or_else(|| "Windows".into()),
                },
                source: None,
            });
        }
        let profile = self.profile_for(&request.node_class, &request.deployment).await?;
        let security_groups = resolve::security_groups(&self.ec2, &self.lookups, node_class).await?;
        if security_groups.is_empty() {
            return Err(CloudError::NodeClass {
                node_class: node_class.name().to_string(),
                reason: NodeClassReason::NoSecurityGroup,
                source: None,
            });
        }
        let taints: Vec<_> = request.taints.iter().chain(&request.startup_taints).cloned().collect();
        // The node records the AMI it boots: the consolidator's drift compares it with the
        // images its class resolves later.
        let mut labels = request.labels.clone();
        labels.insert(carpool::model::well_known::IMAGE_ID.to_string(), image_id.clone());
        let document = if format == UserDataFormat::Custom {
            // Karpenter's Custom family: the class's userData alone, as written.
            node_class.spec.user_data.clone().unwrap_or_default()
        } else if format == UserDataFormat::Al2 {
            al2_bootstrap::user_data(
                &self.cluster,
                &labels,
                &taints,
                node_class.spec.kubelet.as_ref(),
                node_class.spec.instance_store_policy.as_deref(),
                node_class.spec.user_data.as_deref(),
            )
            .map_err(|e| CloudError::NodeClass {
                node_class: node_class.name().to_string(),
                reason: NodeClassReason::UserData,
                source: Some(Box::new(e)),
            })?
        } else if format == UserDataFormat::Bottlerocket {
            bottlerocket::settings(
                &self.cluster,
                &labels,
                &taints,
                node_class.spec.kubelet.as_ref(),
                bottlerocket::raid0_bind(node_class),
                node_class.spec.user_data.as_deref(),
            )
            .map_err(|e| CloudError::NodeClass {
                node_class: node_class.name().to_string(),
                reason: NodeClassReason::UserData,
                source: Some(Box::new(e)),
            })?
        } else {
            user_data::user_data(
                &self.cluster,
                &labels,
                &taints,
                node_class.spec.kubelet.as_ref(),
                node_class.spec.instance_store_policy.as_deref(),
                node_class.spec.user_data.as_deref(),
            )
            .map_err(|e| match e {
                // The class's userData is the class's mistake; writing the NodeConfig is ours.
                user_data::UserDataError::Mime(_) => CloudError::NodeClass {
                    node_class: node_class.name().to_string(),
                    reason: NodeClassReason::UserData,
                    source: Some(Box::new(e)),
                },
                user_data::UserDataError::Yaml(_) => CloudError::Api(Box::new(e)),
            })?
        };
        let user_data = base64::engine::general_purpose::STANDARD.encode(document);
        Ok(TemplateContent::new(
            node_class,
            &self.cluster.name,
            image_id,
            security_groups,
            profile,
            user_data,
        )
        .for_request(request))
    }

    /// The instance profile of a class ([`instance_profile::choice`]): the class's
    /// `instanceProfile`, the configured profile for the configured role, else the profile
    /// Carpool makes for the class's role, created the first time it is asked for, tagged
    /// with `deployment` (else the cluster), and reused.
    async fn profile_for(&self, node_class: &EC2NodeClass, deployment: &str) -> Result<Option<String>, CloudError> {
        match instance_profile::choice(node_class, self.node_role.as_ref()) {
            instance_profile::ProfileChoice::None => Ok(None),
            instance_profile::ProfileChoice::Named(name) => Ok(Some(name)),
            instance_profile::ProfileChoice::Managed { role } => {
                let managed_by = if deployment.is_empty() {
                    &self.cluster.name
                } else {
                    deployment
                };
                let profile = instance_profile::ManagedProfile::new(
                    &self.cluster.name,
                    &self.region()?,
                    node_class,
                    &role,
                    managed_by,
                );
                instance_profile::ensure(&self.iam, &self.lookups, &profile)
                    .await
                    .map(Some)
            }
        }
    }

    /// The type of an instance CreateFleet launched without naming its type, when the
    /// request allowed several (EC2 names it in practice; this is the fallback): read with
    /// DescribeInstances, retried a few times over about 1.5 s while the instance is not
    /// visible yet or the call is throttled. Past that, the request's first (preferred)
    /// type, with a warning: a launch recorded with a guessed type is better than a launch
    /// lost, whose instance nothing would clean up and whose pods would launch again.
    async fn launched_type(&self, id: &str, request: &LaunchRequest) -> String {
        let guess = request.instance_types.first().cloned().unwrap_or_default();
        let mut waits = LAUNCHED_TYPE_WAITS_MS.iter();
        loop {
            match self.get(id).await {
                Ok(found) if !found.instance_type.is_empty() => return found.instance_type,
                Err(e @ (CloudError::NotFound { .. } | CloudError::Throttled { .. })) => {
                    let Some(wait_ms) = waits.next() else {
                        tracing::warn!(instance_id = %id, error = %e, "the launched instance is still not readable");
                        break;
                    };
                    tracing::debug!(instance_id = %id, error = %e, "the launched instance is not readable yet");
                    tokio::time::sleep(Duration::from_millis(*wait_ms)).await;
                }
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(instance_id = %id, error = %e, "could not read the launched instance's type");
                    break;
                }
            }
        }
        tracing::warn!(
            instance_id = %id, launch_id = %request.launch_id, instance_type = %guess,
            "CreateFleet did not name the launched type; recording the request's first type"
        );
        guess
    }

    fn cluster_filter(&self) -> Filter {
        Filter::builder()
            .name(format!("tag:{CLUSTER_TAG}"))
            .values(&self.cluster.name)
            .build()
    }

    async fn describe(&self, ids: Option<Vec<String>>) -> Result<Vec<Instance>, CloudError> {
        self.described(ids, None, to_instance).await
    }

    /// What `read` makes of each of the cluster's instances EC2 describes, every page:
    /// those of `ids` when given, and only those `filter` matches too when given.
    async fn described<T>(
        &self,
        ids: Option<Vec<String>>,
        filter: Option<Filter>,
        read: impl Fn(&aws_sdk_ec2::types::Instance) -> Option<T>,
    ) -> Result<Vec<T>, CloudError> {
        let filters = [Some(self.cluster_filter()), filter].into_iter().flatten().collect();
        let mut pages = self
            .ec2
            .describe_instances()
            .set_filters(Some(filters))
            .set_instance_ids(ids)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| map_sdk_err("DescribeInstances", e))?;
            out.extend(page.reservations().iter().flat_map(|r| r.instances()).filter_map(&read));
        }
        Ok(out)
    }
}

/// Our view of an EC2 instance; `None` without an id.
pub fn to_instance(i: &aws_sdk_ec2::types::Instance) -> Option<Instance> {
    let tags: BTreeMap<&str, &str> = i.tags().iter().filter_map(|t| Some((t.key()?, t.value()?))).collect();
    let state = match i.state().and_then(|s| s.name()) {
        Some(InstanceStateName::Running) => InstanceState::Running,
        Some(InstanceStateName::ShuttingDown) => InstanceState::ShuttingDown,
        Some(InstanceStateName::Terminated) => InstanceState::Terminated,
        Some(InstanceStateName::Stopping) => InstanceState::Stopping,
        Some(InstanceStateName::Stopped) => InstanceState::Stopped,
        _ => InstanceState::Pending,
    };
    Some(Instance {
        id: i.instance_id()?.to_string(),
        instance_type: i.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
        zone: i
            .placement()
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_string(),
        // Launched into a reservation it was targeted at only (Karpenter's `NewInstance`,
        // `pkg/providers/instance/types.go`): reserved capacity.
        capacity_type: match i.instance_lifecycle() {
            Some(InstanceLifecycleType::Spot) => CapacityType::Spot,
            _ if i.capacity_reservation_id().is_some()
                && i.capacity_reservation_specification()
                    .and_then(|s| s.capacity_reservation_preference())
                    == Some(&aws_sdk_ec2::types::CapacityReservationPreference::CapacityReservationsOnly) =>
            {
                CapacityType::Reserved
            }
            _ => CapacityType::OnDemand,
        },
        nodepool: tags.get(NODEPOOL_TAG).copied().unwrap_or_default().to_string(),
        launch_id: tags.get(LAUNCH_ID_TAG).copied().unwrap_or_default().to_string(),
        deployment: tags.get(DEPLOYMENT_TAG).map(|d| d.to_string()),
        state,
        launched_at: i.launch_time().and_then(|t| t.to_millis().ok()),
        network: instance_network(i),
    })
}

/// An instance's subnet and security group ids (sorted), as EC2 reports them.
fn instance_network(i: &aws_sdk_ec2::types::Instance) -> InstanceNetwork {
    let mut security_groups: Vec<String> = i
        .security_groups()
        .iter()
        .filter_map(|g| g.group_id().map(str::to_string))
        .collect();
    security_groups.sort();
    security_groups.dedup();
    InstanceNetwork {
        subnet: i.subnet_id().map(str::to_string),
        security_groups,
    }
}

impl Cloud for Ec2Cloud {
    async fn launch(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        // The labels and taints are written into the user data: the run checks them, and
        // so does the adapter that writes them, whoever calls it.
        request
            .check_labels_and_taints()
            .map_err(|e| CloudError::Api(format!("not launched: {e}").into()))?;
        if request.capacity_type == CapacityType::Reserved && request.capacity_reservation().is_none() {
            return Err(CloudError::Api(
                "not launched: a reserved launch names no capacity reservation".into(),
            ));
        }
        let subnets = resolve::subnets(&self.ec2, &self.lookups, &request.node_class, &request.zone).await?;
        if subnets.is_empty() {
            return Err(CloudError::NodeClass {
                node_class: request.node_class.name().to_string(),
                reason: NodeClassReason::NoSubnetInZone {
                    zone: request.zone.clone(),
                },
                source: None,
            });
        }
        let (image_id, narrowed) = self.image_for(request).await?;
        let request = &narrowed;
        let content = self.template_content_with(request, image_id).await?;
        let template = self.ensure_launch_template(&content).await?;
        let mut sent = create_fleet(&self.ec2, &self.cluster.name, request, &template, &subnets)
            .send()
            .await;
        if let Err(e) = &sent
            && e.as_service_error().is_some_and(is_template_not_found)
        {
            // Deleted behind our back (another invocation's housekeeping collected it while
            // this one had it cached): create it again and send the launch once more. The
            // first request was refused before it launched anything, and EC2 may answer a
            // token it has seen with that request's outcome, so the retry has a token of
            // its own (still one per launch: the launch-id tag is unchanged).
            self.forget_template(&template);
            self.ensure_launch_template(&content).await?;
            sent = create_fleet(&self.ec2, &self.cluster.name, request, &template, &subnets)
                .client_token(self::fleet::client_token(&format!("{}-r", request.launch_id)))
                .send()
                .await;
        }
        let out = sent.map_err(|e| {
            if e.as_service_error().is_some_and(is_template_not_found) {
                self.forget_template(&template);
            }
            map_launch_err(e)
        })?;
        // Dated when CreateFleet answered: Ec2Cloud has no clock port, and the caller dates
        // its launch record by its own clock anyway.
        let launched_at = epoch_millis(SystemTime::now());
        // The outcome is CreateFleet's own answer: a DescribeInstances right after it can
        // answer NotFound or be throttled, and the launch must not be lost for that.
        let Some(answered) = Answered::from_answer(&out, request) else {
            // The answer's errors may name the template (deleted behind our back): look
            // it up again next time rather than trust the cache.
            self.forget_template(&template);
            return Err(fleet_failure(out.errors(), &request.zone, request.capacity_type));
        };
        let instance_type = match answered.instance_type.clone() {
            Some(t) => t,
            None => self.launched_type(&answered.id, request).await,
        };
        Ok(answered.instance(instance_type, request, launched_at))
    }

    /// At most every [`template_gc::COLLECT_EVERY`] per warm function: the provisioner
    /// asks every run, and templates are kept an hour anyway.
    async fn collect_launch_templates(&self, now: SystemTime, idle: Duration) -> Result<Vec<String>, CloudError> {
        {
            let mut last = self
                .collected_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !template_gc::due(*last, now) {
                return Ok(Vec::new());
            }
            *last = Some(now);
        }
        self.collect_templates(now, idle).await
    }

    async fn network(&self, node_class: &carpool::model::EC2NodeClass) -> Result<ResolvedNetwork, CloudError> {
        resolve::network(&self.ec2, &self.lookups, node_class).await
    }

    async fn instance_profile(
        &self,
        node_class: &carpool::model::EC2NodeClass,
        deployment: &str,
    ) -> Result<Option<String>, CloudError> {
        self.profile_for(node_class, deployment).await
    }

    async fn images(&self, node_class: &carpool::model::EC2NodeClass) -> Result<Vec<ResolvedImage>, CloudError> {
        self.resolved_images(node_class).await
    }

    async fn capacity_reservations(
        &self,
        node_class: &carpool::model::EC2NodeClass,
    ) -> Result<Vec<carpool::model::CapacityReservation>, CloudError> {
        capacity_reservations::list(&self.ec2, node_class).await
    }

    async fn get(&self, id: &str) -> Result<Instance, CloudError> {
        match self.describe(Some(vec![id.to_string()])).await {
            Ok(found) => found
                .into_iter()
                .find(|i| i.id == id)
                .ok_or_else(|| CloudError::NotFound {
                    id: id.to_string(),
                    source: None,
                }),
            Err(CloudError::NotFound { source, .. }) => Err(CloudError::NotFound {
                id: id.to_string(),
                source,
            }),
            Err(e) => Err(e),
        }
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        let mut all = self.describe(None).await?;
        all.retain(|i| i.state != InstanceState::Terminated);
        Ok(all)
    }

    async fn terminate(&self, id: &str) -> Result<(), CloudError> {
        match self.ec2.terminate_instances().instance_ids(id).send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .and_then(aws_sdk_ec2::error::ProvideErrorMetadata::code)
                    .is_some_and(|c| NOT_FOUND_CODES.contains(&c)) =>
            {
                Ok(())
            }
            Err(e) => Err(map_sdk_err(id, e)),
        }
    }

    async fn spot_prices(&self, instance_types: &[String]) -> Result<Vec<SpotPrice>, CloudError> {
        if instance_types.is_empty() {
            return Ok(Vec::new());
        }
        let mut pages = self
            .ec2
            .describe_spot_price_history()
            .product_descriptions("Linux/UNIX")
            .set_instance_types(Some(
                instance_types
                    .iter()
                    .map(|t| aws_sdk_ec2::types::InstanceType::from(t.as_str()))
                    .collect(),
            ))
            .start_time(aws_sdk_ec2::primitives::DateTime::from(std::time::SystemTime::now()))
            .into_paginator()
            .send();
        // Latest per type × zone.
        let mut latest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| map_sdk_err("DescribeSpotPriceHistory", e))?;
            for p in page.spot_price_history() {
                let (Some(t), Some(zone), Some(price)) = (
                    p.instance_type(),
                    p.availability_zone(),
                    p.spot_price().and_then(|s| s.parse::<f64>().ok()),
                ) else {
                    continue;
                };
                let at = p.timestamp().and_then(|t| t.to_millis().ok()).unwrap_or_default();
                let key = (t.as_str().to_string(), zone.to_string());
                if latest.get(&key).is_none_or(|(seen, _)| at >= *seen) {
                    latest.insert(key, (at, price));
                }
            }
        }
        Ok(latest
            .into_iter()
            .map(|((instance_type, zone), (_, price))| SpotPrice {
                instance_type,
                zone,
                price,
            })
            .collect())
    }

    async fn on_demand_prices(&self, instance_types: &[String]) -> Result<Vec<OnDemandPrice>, CloudError> {
        pricing::on_demand_prices(&self.pricing, &self.region()?, instance_types).await
    }

    async fn offerings(&self) -> Result<Vec<ZonalOffering>, CloudError> {
        offerings::offerings(&self.ec2).await
    }
}
