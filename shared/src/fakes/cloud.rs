//! A cloud in memory: instances and capacity pools, with capacity outages and injected
//! errors.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::Injected;
use crate::model::{Arch, CapacityReservation, CapacityType, EC2NodeClass};
use crate::ports::{
    Cloud, CloudError, ImageVariant, Instance, InstanceNetwork, InstanceState, LaunchRequest, NodeClassReason,
    OfferingKey, OnDemandPrice, ResolvedImage, ResolvedNetwork, ResolvedSubnet, SpotPrice, ZonalOffering,
};

/// The zones a class's subnets are in unless told otherwise: us-east-1's six.
pub const DEFAULT_ZONES: &[&str] = &[
    "us-east-1a",
    "us-east-1b",
    "us-east-1c",
    "us-east-1d",
    "us-east-1e",
    "us-east-1f",
];

/// The security group a class selects unless told otherwise.
pub const DEFAULT_SECURITY_GROUP: &str = "sg-fake";

/// The AMIs a class resolves to unless told otherwise: one image per architecture with
/// every variant, so they boot every instance type and constrain no plan.
pub fn default_images() -> Vec<ResolvedImage> {
    let all = [ImageVariant::Standard, ImageVariant::Nvidia, ImageVariant::Neuron];
    vec![
        ResolvedImage::new("ami-fake-amd64", Arch::Amd64, &all),
        ResolvedImage::new("ami-fake-arm64", Arch::Arm64, &all),
    ]
}

/// An error to inject into the next call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloudFault {
    /// `CloudError::Throttled`.
    Throttled,
    /// `CloudError::Unauthorized`.
    Unauthorized,
    /// `CloudError::Api`.
    Api,
    /// `CloudError::OutcomeUnknown`, as a CreateFleet that timed out after EC2 started
    /// the instance: the next `launch` creates the instance (tagged as asked) and fails.
    /// Other calls pass it by (it waits at the head of the queue for a launch).
    LaunchedThenUnknown,
}

#[derive(Debug, Default)]
struct State {
    instances: BTreeMap<String, Instance>,
    out_of_capacity: BTreeSet<OfferingKey>,
    /// Instances each offering can still take; absent means unlimited.
    pools: HashMap<OfferingKey, u32>,
    spot_prices: Vec<SpotPrice>,
    /// Zones of the subnets, per EC2NodeClass; absent: [`DEFAULT_ZONES`].
    zones: HashMap<String, Vec<String>>,
    /// Subnet ids per EC2NodeClass and zone; absent: `subnet-<zone>`.
    subnets: HashMap<(String, String), String>,
    /// Free IP addresses of the subnet per EC2NodeClass and zone, each launch there taking
    /// one (its primary address); absent: not reported.
    free_ips: HashMap<(String, String), u32>,
    /// Security group ids, per EC2NodeClass; absent: [`DEFAULT_SECURITY_GROUP`].
    security_groups: HashMap<String, Vec<String>>,
    /// IAM roles that do not exist.
    missing_roles: BTreeSet<String>,
    /// AMIs per EC2NodeClass; absent: [`default_images`].
    images: HashMap<String, Vec<ResolvedImage>>,
    on_demand_prices: Vec<OnDemandPrice>,
    offerings: Vec<ZonalOffering>,
    faults: Vec<CloudFault>,
    /// The request each instance was launched with (its labels and taints, which the
    /// kubelet of a simulated node registers with).
    requests: HashMap<String, LaunchRequest>,
    /// EC2NodeClasses every launch of which fails, and why.
    broken: HashMap<String, NodeClassReason>,
    /// EC2NodeClasses whose `images` fails, with the error (an untyped one: an
    /// `ssmParameter` the role may not read, say).
    unresolvable: HashMap<String, CloudFault>,
    /// The classes `images` was asked for, in order.
    images_asked: Vec<String>,
    /// The launch templates the launches would have used: what of a request goes into a
    /// template's content (its class, labels and taints), as the EC2 adapter renders it.
    templates: std::collections::BTreeSet<String>,
    calls: Vec<String>,
    next_id: u64,
    now: i64,
    /// Capacity reservations, with their tags: `available` is what is left.
    reservations: Vec<(CapacityReservation, BTreeMap<String, String>)>,
    /// The reservation each instance launched into.
    in_reservation: HashMap<String, String>,
}

/// A stateful in-memory [`Cloud`]. It launches the first requested type whose offering
/// has capacity, as CreateFleet `lowest-price` with a prioritised list would.
#[derive(Debug, Default)]
pub struct FakeCloud {
    state: Mutex<State>,
}

impl FakeCloud {
    /// An empty cloud with unlimited capacity.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many distinct launch templates the launches so far would have used (the EC2
    /// adapter names a template by the hash of its content: the class, the labels and the
    /// taints a request carries).
    pub fn template_count(&self) -> usize {
        self.lock().templates.len()
    }

    /// Sets the zones of an EC2NodeClass's subnets.
    pub fn set_zones(&self, node_class: &str, zones: &[&str]) {
        self.lock()
            .zones
            .insert(node_class.to_string(), zones.iter().map(|z| z.to_string()).collect());
    }

    /// Sets the subnet an EC2NodeClass selects in `zone` (a subnet re-tagged, say).
    pub fn set_subnet(&self, node_class: &str, zone: &str, subnet: &str) {
        self.lock()
            .subnets
            .insert((node_class.to_string(), zone.to_string()), subnet.to_string());
    }

    /// Sets the free IP addresses of the subnet an EC2NodeClass selects in `zone`; each
    /// instance launched there takes one.
    pub fn set_free_ips(&self, node_class: &str, zone: &str, free: u32) {
        self.lock()
            .free_ips
            .insert((node_class.to_string(), zone.to_string()), free);
    }

    /// Sets the security groups an EC2NodeClass selects (none: its selector selects
    /// nothing, [`NodeClassReason::NoSecurityGroup`]).
    pub fn set_security_groups(&self, node_class: &str, groups: &[&str]) {
        self.lock()
            .security_groups
            .insert(node_class.to_string(), groups.iter().map(|g| g.to_string()).collect());
    }

    /// Makes an IAM role missing: a class naming it cannot have an instance profile.
    pub fn remove_role(&self, role: &str) {
        self.lock().missing_roles.insert(role.to_string());
    }

    /// Sets the AMIs an EC2NodeClass resolves to.
    pub fn set_images(&self, node_class: &str, images: Vec<ResolvedImage>) {
        self.lock().images.insert(node_class.to_string(), images);
    }

    /// Makes an offering out of capacity until [`FakeCloud::restore`].
    pub fn exhaust(&self, offering: OfferingKey) {
        self.lock().out_of_capacity.insert(offering);
    }

    /// Gives an exhausted offering its capacity back.
    pub fn restore(&self, offering: &OfferingKey) {
        self.lock().out_of_capacity.remove(offering);
    }

    /// Limits how many more instances an offering can take.
    pub fn limit(&self, offering: OfferingKey, instances: u32) {
        self.lock().pools.insert(offering, instances);
    }

    /// Queues an error for the next call (several queue up, one call each).
    pub fn inject(&self, fault: CloudFault) {
        self.lock().faults.push(fault);
    }

    /// Makes every launch with the EC2NodeClass `node_class` fail with
    /// [`CloudError::NodeClass`] and `reason` (a bad security group, say), until
    /// [`FakeCloud::fix_class`]. The calls are still recorded.
    pub fn break_class(&self, node_class: &str, reason: NodeClassReason) {
        self.lock().broken.insert(node_class.to_string(), reason);
    }

    /// Makes every `images` of the EC2NodeClass `node_class` fail with `fault`'s error
    /// (not [`CloudError::NodeClass`]: an error the class does not own by its type, as an
    /// SSM parameter the role may not read gives), until [`FakeCloud::fix_class`].
    pub fn fail_images(&self, node_class: &str, fault: CloudFault) {
        self.lock().unresolvable.insert(node_class.to_string(), fault);
    }

    /// The classes whose images were asked for, in order.
    pub fn images_asked(&self) -> Vec<String> {
        self.lock().images_asked.clone()
    }

    /// Lets launches with `node_class` succeed again.
    pub fn fix_class(&self, node_class: &str) {
        let mut state = self.lock();
        state.broken.remove(node_class);
        state.unresolvable.remove(node_class);
    }

    /// Sets the spot prices `spot_prices` answers with.
    pub fn set_spot_prices(&self, prices: Vec<SpotPrice>) {
        self.lock().spot_prices = prices;
    }

    /// Sets the on-demand prices `on_demand_prices` answers with.
    pub fn set_on_demand_prices(&self, prices: Vec<OnDemandPrice>) {
        self.lock().on_demand_prices = prices;
    }

    /// Sets the zonal offerings `offerings` answers with.
    pub fn set_offerings(&self, offerings: Vec<ZonalOffering>) {
        self.lock().offerings = offerings;
    }

    /// Sets the launch time stamped on new instances.
    pub fn set_now(&self, epoch_millis: i64) {
        self.lock().now = epoch_millis;
    }

    /// The calls so far, as `method argument`.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// The request an instance was launched with, as nodeadm on it would read it.
    pub fn launch_request(&self, id: &str) -> Option<LaunchRequest> {
        self.lock().requests.get(id).cloned()
    }

    /// Every instance, terminated ones included.
    pub fn instances(&self) -> Vec<Instance> {
        self.lock().instances.values().cloned().collect()
    }

    fn enter(&self, call: String) -> Result<MutexGuard<'_, State>, CloudError> {
        let mut state = self.lock();
        state.calls.push(call.clone());
        if state.faults.is_empty() || state.faults.first() == Some(&CloudFault::LaunchedThenUnknown) {
            return Ok(state);
        }
        Err(match state.faults.remove(0) {
            CloudFault::Throttled => CloudError::Throttled {
                what: call,
                source: Injected::boxed(),
            },
            CloudFault::Unauthorized => CloudError::Unauthorized {
                what: call,
                source: Injected::boxed(),
            },
            CloudFault::Api => CloudError::Api(format!("injected failure on {call}").into()),
            CloudFault::LaunchedThenUnknown => CloudError::OutcomeUnknown(format!("injected timeout on {call}").into()),
        })
    }

    /// Adds an instance as it is (another deployment's, a box tagged by hand), as if
    /// launched outside Carpool.
    pub fn add_instance(&self, instance: Instance) {
        self.lock().instances.insert(instance.id.clone(), instance);
    }

    /// Marks an instance terminated, as EC2 does when it reclaims one.
    pub fn reclaim(&self, id: &str) {
        let mut state = self.lock();
        if let Some(i) = state.instances.get_mut(id) {
            i.state = InstanceState::Terminated;
        }
        state.release_reservation(id);
    }

    /// Adds a capacity reservation (as CreateCapacityReservation, or a Capacity Block
    /// bought) with its tags; its `available` is what it can take.
    pub fn add_capacity_reservation(&self, reservation: CapacityReservation, tags: &[(&str, &str)]) {
        let tags = tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.lock().reservations.push((reservation, tags));
    }

    /// The reservation an instance was launched into.
    pub fn reservation_of(&self, id: &str) -> Option<String> {
        self.lock().in_reservation.get(id).cloned()
    }
}

impl State {
    /// Gives a terminated instance's place in its reservation back, as EC2 does.
    fn release_reservation(&mut self, id: &str) {
        if let Some(r) = self.in_reservation.remove(id)
            && let Some((res, _)) = self.reservations.iter_mut().find(|(x, _)| x.id == r)
        {
            res.available += 1;
        }
    }

    /// The subnets (one per zone) and security groups `node_class` selects.
    fn network_of(&self, node_class: &EC2NodeClass) -> Result<ResolvedNetwork, CloudError> {
        let name = node_class.name();
        let zones = self
            .zones
            .get(name)
            .cloned()
            .unwrap_or_else(|| DEFAULT_ZONES.iter().map(|z| z.to_string()).collect());
        let security_groups = self
            .security_groups
            .get(name)
            .cloned()
            .unwrap_or_else(|| vec![DEFAULT_SECURITY_GROUP.to_string()]);
        if security_groups.is_empty() {
            return Err(CloudError::NodeClass {
                node_class: name.to_string(),
                reason: NodeClassReason::NoSecurityGroup,
                source: None,
            });
        }
        let subnets = zones
            .into_iter()
            .map(|zone| {
                let key = (name.to_string(), zone.clone());
                ResolvedSubnet {
                    id: self
                        .subnets
                        .get(&key)
                        .cloned()
                        .unwrap_or_else(|| format!("subnet-{zone}")),
                    available_ips: self.free_ips.get(&key).copied(),
                    zone,
                }
            })
            .collect();
        Ok(ResolvedNetwork {
            subnets,
            security_groups,
        })
    }
}

impl Cloud for FakeCloud {
    async fn launch(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        let call = format!("launch {}", request.launch_id);
        let then_unknown = {
            let mut state = self.lock();
            let first = state.faults.first() == Some(&CloudFault::LaunchedThenUnknown);
            if first {
                state.faults.remove(0);
                state.calls.push(call.clone());
            }
            first
        };
        let mut state = if then_unknown {
            self.lock()
        } else {
            self.enter(call.clone())?
        };
        let template = crate::model::content_hash::content_hash(&(
            request.node_class.name(),
            &request.labels,
            &request.taints,
            &request.startup_taints,
        ));
        state.templates.insert(template);
        if let Some(reason) = state.broken.get(request.node_class.name()) {
            return Err(CloudError::NodeClass {
                node_class: request.node_class.name().to_string(),
                reason: reason.clone(),
                source: None,
            });
        }
        let network = state.network_of(&request.node_class)?;
        let placed = InstanceNetwork {
            subnet: network
                .subnets
                .iter()
                .find(|s| s.zone == request.zone)
                .map(|s| s.id.clone()),
            security_groups: network.security_groups,
        };
        // A reserved launch goes into the reservation its labels name, and nowhere else.
        let target = match request.capacity_type {
            CapacityType::Reserved => match request.capacity_reservation() {
                Some(t) => Some(t.id),
                None => {
                    return Err(CloudError::Api(
                        format!("{call}: a reserved launch names no capacity reservation").into(),
                    ));
                }
            },
            _ => None,
        };
        let mut failed = Vec::new();
        for instance_type in &request.instance_types {
            let key = OfferingKey {
                instance_type: instance_type.clone(),
                zone: request.zone.clone(),
                capacity_type: request.capacity_type,
            };
            let pool_empty = state.pools.get(&key).is_some_and(|n| *n == 0);
            let reservation_full = target.as_ref().is_some_and(|id| {
                !state.reservations.iter().any(|(r, _)| {
                    &r.id == id && r.instance_type == key.instance_type && r.zone == key.zone && r.available > 0
                })
            });
            if state.out_of_capacity.contains(&key) || pool_empty || reservation_full {
                failed.push(key);
                continue;
            }
            if let Some(id) = &target
                && let Some((r, _)) = state.reservations.iter_mut().find(|(r, _)| &r.id == id)
            {
                r.available -= 1;
            }
            if let Some(n) = state.pools.get_mut(&key) {
                *n -= 1;
            }
            let subnet = (request.node_class.name().to_string(), request.zone.clone());
            if let Some(n) = state.free_ips.get_mut(&subnet) {
                *n = n.saturating_sub(1);
            }
            state.next_id += 1;
            let instance = Instance {
                id: format!("i-{:017x}", state.next_id),
                instance_type: instance_type.clone(),
                zone: request.zone.clone(),
                capacity_type: request.capacity_type,
                nodepool: request.nodepool.clone(),
                launch_id: request.launch_id.clone(),
                deployment: Some(request.deployment.clone()),
                state: InstanceState::Running,
                launched_at: Some(state.now),
                network: placed,
            };
            state.instances.insert(instance.id.clone(), instance.clone());
            state.requests.insert(instance.id.clone(), request.clone());
            if let Some(id) = &target {
                state.in_reservation.insert(instance.id.clone(), id.clone());
            }
            if then_unknown {
                return Err(CloudError::OutcomeUnknown(format!("injected timeout on {call}").into()));
            }
            return Ok(instance);
        }
        Err(CloudError::InsufficientCapacity { offerings: failed })
    }

    async fn network(&self, node_class: &EC2NodeClass) -> Result<ResolvedNetwork, CloudError> {
        let state = self.enter(format!("network {}", node_class.name()))?;
        state.network_of(node_class)
    }

    /// The class's `instanceProfile`, else `carpool-<role>` for its role, unless the role
    /// was made missing ([`FakeCloud::remove_role`]). Not recorded in the calls: it stands
    /// for the adapter's cached answer.
    async fn instance_profile(
        &self,
        node_class: &EC2NodeClass,
        _deployment: &str,
    ) -> Result<Option<String>, CloudError> {
        let state = self.lock();
        if let Some(profile) = &node_class.spec.instance_profile {
            return Ok(Some(profile.clone()));
        }
        let Some(role) = &node_class.spec.role else {
            return Ok(None);
        };
        if state.missing_roles.contains(role) {
            return Err(CloudError::NodeClass {
                node_class: node_class.name().to_string(),
                reason: NodeClassReason::RoleNotFound { role: role.clone() },
                source: None,
            });
        }
        Ok(Some(format!("carpool-{role}")))
    }

    /// Not recorded in [`FakeCloud::calls`] (see [`FakeCloud::images_asked`]) and takes no
    /// injected fault (see [`FakeCloud::fail_images`]): it stands for the adapter's cached
    /// resolution.
    async fn images(&self, node_class: &EC2NodeClass) -> Result<Vec<ResolvedImage>, CloudError> {
        let mut state = self.lock();
        state.images_asked.push(node_class.name().to_string());
        let what = format!("images {}", node_class.name());
        match state.unresolvable.get(node_class.name()) {
            Some(CloudFault::Throttled) => Err(CloudError::Throttled {
                what,
                source: Injected::boxed(),
            }),
            Some(CloudFault::Unauthorized) => Err(CloudError::Unauthorized {
                what,
                source: Injected::boxed(),
            }),
            Some(_) => Err(CloudError::Api(format!("injected failure on {what}").into())),
            None => Ok(state
                .images
                .get(node_class.name())
                .cloned()
                .unwrap_or_else(default_images)),
        }
    }

    async fn get(&self, id: &str) -> Result<Instance, CloudError> {
        let state = self.enter(format!("get {id}"))?;
        state.instances.get(id).cloned().ok_or_else(|| CloudError::NotFound {
            id: id.to_string(),
            source: None,
        })
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        let state = self.enter("list".into())?;
        Ok(state
            .instances
            .values()
            .filter(|i| i.state != InstanceState::Terminated)
            .cloned()
            .collect())
    }

    async fn terminate(&self, id: &str) -> Result<(), CloudError> {
        let mut state = self.enter(format!("terminate {id}"))?;
        if let Some(i) = state.instances.get_mut(id) {
            i.state = InstanceState::Terminated;
        }
        state.release_reservation(id);
        Ok(())
    }

    async fn spot_prices(&self, instance_types: &[String]) -> Result<Vec<SpotPrice>, CloudError> {
        let state = self.enter(format!("spot_prices {}", instance_types.join(",")))?;
        Ok(state
            .spot_prices
            .iter()
            .filter(|p| instance_types.contains(&p.instance_type))
            .cloned()
            .collect())
    }

    async fn on_demand_prices(&self, instance_types: &[String]) -> Result<Vec<OnDemandPrice>, CloudError> {
        let state = self.enter(format!("on_demand_prices {}", instance_types.join(",")))?;
        Ok(state
            .on_demand_prices
            .iter()
            .filter(|p| instance_types.contains(&p.instance_type))
            .cloned()
            .collect())
    }

    async fn offerings(&self) -> Result<Vec<ZonalOffering>, CloudError> {
        let state = self.enter("offerings".into())?;
        Ok(state.offerings.clone())
    }

    /// The active reservations the class's terms select, as DescribeCapacityReservations
    /// filters them (ended ones left out), dated by [`FakeCloud::set_now`].
    async fn capacity_reservations(&self, node_class: &EC2NodeClass) -> Result<Vec<CapacityReservation>, CloudError> {
        let terms = node_class
            .capacity_reservation_terms()
            .map_err(|reason| CloudError::NodeClass {
                node_class: node_class.name().to_string(),
                reason,
                source: None,
            })?;
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let state = self.enter(format!("capacity_reservations {}", node_class.name()))?;
        let now = state.now;
        Ok(state
            .reservations
            .iter()
            .filter(|(r, tags)| r.end_time.is_none_or(|e| e > now) && terms.iter().any(|t| t.selects(r, tags)))
            .map(|(r, _)| CapacityReservation {
                synced_at: now,
                ..r.clone()
            })
            .collect())
    }
}
