//! Node templates: each NodePool resolved against its EC2NodeClass and the region's
//! catalog, into the instance types and offerings it may launch, with what each type
//! can hold once the DaemonSets that would land on it are counted.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node as K8sNode, Taint};

use crate::catalog::RegionCatalog;
use crate::catalog::allocatable::{NodeSettings, with_settings};
use crate::decide::provisioning::daemonsets::{DaemonSetInfo, landing};
use crate::decide::provisioning::pod::HostPort;
use crate::model::manifest::from_yaml;
use crate::model::well_known as wk;
use crate::model::{CapacityReservation, CapacityType, EC2NodeClass, InstanceType, NodePool, Requirements, Resources};

/// The NodePool used when the input has none: on-demand and spot, amd64 and arm64, Linux,
/// categories c, m and r, generation above 2.
pub const DEFAULT_NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}
      - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
      - {key: kubernetes.io/os, operator: In, values: [linux]}
      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
      - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["2"]}
"#;

/// One offering of a type: zone, capacity type, price.
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
}

/// An instance type a template may launch.
#[derive(Clone, Debug)]
pub struct TypeOption {
    /// The type, with allocatable computed for the EC2NodeClass's kubelet settings.
    pub instance_type: InstanceType,
    /// The node's labels without zone and capacity type.
    pub labels: BTreeMap<String, String>,
    /// The DaemonSet requests that land on such a node.
    pub overhead: Resources,
    /// The host ports the DaemonSets that land on such a node bind: no pending pod that
    /// binds one can go there (Karpenter's `getDaemonHostPortUsage`).
    pub daemon_ports: Vec<HostPort>,
    /// Allocatable less the DaemonSet overhead: what pending pods can use.
    pub net: Resources,
    /// The offerings the template allows, cheapest first.
    pub offers: Vec<Offer>,
}

impl TypeOption {
    /// The price of the type in a zone and capacity type, if offered there.
    pub fn price(&self, zone: &str, ct: CapacityType) -> Option<f64> {
        self.offers
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == ct)
            .map(|o| o.price)
    }

    /// The cheapest price of the type that the market sets: a reserved offer's is near
    /// zero and holds a few nodes at most, so it prices neither the packer's resources nor
    /// the types' order (unless the type has no other offer).
    pub fn min_price(&self) -> f64 {
        self.offers
            .iter()
            .find(|o| o.capacity_type != CapacityType::Reserved)
            .or(self.offers.first())
            .map_or(f64::INFINITY, |o| o.price)
    }
}

/// A NodePool, resolved.
#[derive(Clone, Debug)]
pub struct Template {
    /// The NodePool's name.
    pub name: String,
    /// Its weight; higher is tried first.
    pub weight: i32,
    /// Its requirements, labels and name as requirements.
    pub requirements: Requirements,
    /// Labels every node gets (template labels, `karpenter.sh/nodepool` and
    /// `karpenter.k8s.aws/ec2nodeclass`).
    pub labels: BTreeMap<String, String>,
    /// The requirements on custom keys: keys that are neither well known nor template
    /// labels, so that no instance type defines them. The NodePool labels each node it
    /// launches with a value they allow (Karpenter's
    /// `NodeClaimTemplate.resolveCustomLabelsFromRequirements`), narrowed by the pods the
    /// node is for; they never exclude an instance type.
    pub custom: Requirements,
    /// The zone id of each zone (`topology.k8s.aws/zone-id`), as the EC2NodeClass's status
    /// reports its subnets; empty when it reports none.
    pub zone_ids: BTreeMap<String, String>,
    /// Taints pods must tolerate.
    pub taints: Vec<Taint>,
    /// Taints present at start; pods need not tolerate them.
    pub startup_taints: Vec<Taint>,
    /// The types it may launch, cheapest first.
    pub types: Vec<TypeOption>,
    /// Limits by resource name (`cpu` in millicores), plus `nodes`.
    pub limits: BTreeMap<String, i64>,
    /// What the pool's existing nodes already use against the limits.
    pub used: BTreeMap<String, i64>,
    /// The EC2NodeClass settings that shape allocatable.
    pub settings: NodeSettings,
    /// The capacity reservations behind its `reserved` offers, by (type, zone), ODCRs
    /// first: how many nodes each can still take is counted across templates by the
    /// planner ([`crate::decide::provisioning::reserved_capacity`]).
    pub reservations: BTreeMap<(String, String), Vec<CapacityReservation>>,
    /// The price tolerance of its zone balance, as a fraction, when it asks for one
    /// ([`NodePool::zone_balance`]).
    pub zone_balance: Option<f64>,
}

/// A NodePool or EC2NodeClass left out, and why.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Skipped {
    /// `NodePool/name` or `EC2NodeClass/name`.
    pub object: String,
    /// Why.
    pub reason: String,
}

/// The settings of an EC2NodeClass that change a node's resources.
pub fn node_settings(class: Option<&EC2NodeClass>) -> NodeSettings {
    NodeSettings {
        kubelet: class.and_then(|c| c.spec.kubelet.clone()).unwrap_or_default(),
        root_volume_bytes: class.and_then(EC2NodeClass::root_volume_bytes),
        instance_store_raid0: class.and_then(|c| c.spec.instance_store_policy.as_deref())
            == Some(crate::catalog::allocatable::INSTANCE_STORE_RAID0),
        extra_ebs_volumes: class.map_or(0, |c| {
            crate::catalog::allocatable::extra_ebs_volumes(&c.spec.block_device_mappings)
        }),
        bottlerocket: class
            .is_some_and(|c| c.user_data_format() == crate::model::ec2nodeclass::UserDataFormat::Bottlerocket),
    }
}

/// The labels a pool puts on every node: its template labels, `karpenter.sh/nodepool` and
/// `karpenter.k8s.aws/ec2nodeclass` (Karpenter's `NewNodeClaimTemplate`), and Carpool's
/// own.
pub fn pool_labels(pool: &NodePool) -> BTreeMap<String, String> {
    let mut labels = pool.spec.template.metadata.labels.clone();
    labels.insert(wk::NODEPOOL.to_string(), pool.name().to_string());
    labels.insert(
        wk::EC2NODECLASS.to_string(),
        pool.spec.template.spec.node_class_ref.name.clone(),
    );
    labels.insert(wk::CARPOOL_MANAGED.to_string(), "true".to_string());
    labels
}

/// The zone id of each zone of the EC2NodeClass's subnets, from the `status.subnets[]`
/// (`zone`, `zoneID`) that Karpenter's subnet controller writes; Karpenter's
/// `computeRequirements` labels offerings with them.
pub fn zone_ids(class: Option<&EC2NodeClass>) -> BTreeMap<String, String> {
    let subnets = class
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.get("subnets"))
        .and_then(serde_json::Value::as_array);
    subnets
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let zone = s.get("zone")?.as_str()?;
            let id = s.get("zoneID")?.as_str()?;
            (!zone.is_empty() && !id.is_empty()).then(|| (zone.to_string(), id.to_string()))
        })
        .collect()
}

fn limit_amount(name: &str, q: &crate::model::Quantity) -> i64 {
    if name == "cpu" { q.millis_ceil() } else { q.units_ceil() }
}

fn existing_usage(pool: &str, nodes: &[K8sNode]) -> BTreeMap<String, i64> {
    let mut used = BTreeMap::new();
    for n in nodes {
        if n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(wk::NODEPOOL))
            .map(String::as_str)
            != Some(pool)
        {
            continue;
        }
        *used.entry("nodes".to_string()).or_insert(0) += 1;
        let capacity = n.status.as_ref().and_then(|s| s.capacity.as_ref());
        if let Some(r) = capacity.and_then(|c| Resources::from_k8s(c).ok()) {
            for name in r.names() {
                *used.entry(name.to_string()).or_insert(0) += r.get(name);
            }
        }
    }
    used
}

/// Resolves the NodePools (or the default one) into templates, heaviest weight first.
pub fn build(
    pools: &[NodePool],
    classes: &[EC2NodeClass],
    region: &RegionCatalog<'_>,
    daemonsets: &[DaemonSetInfo],
    nodes: &[K8sNode],
) -> (Vec<Template>, Vec<Skipped>) {
    let mut skipped = Vec::new();
    let default_pool;
    let pools: &[NodePool] = if pools.is_empty() {
        match from_yaml::<NodePool>(DEFAULT_NODEPOOL) {
            Ok(p) => {
                default_pool = [p];
                &default_pool
            }
            Err(e) => {
                skipped.push(Skipped {
                    object: "NodePool/default".into(),
                    reason: e.to_string(),
                });
                &[]
            }
        }
    } else {
        pools
    };
    let mut templates = Vec::new();
    for pool in pools {
        // A static NodePool (`spec.replicas`) launches for no pod: Karpenter's
        // `Provisioner.NewScheduler` leaves it out; its nodes are kept by
        // [`super::static_capacity`].
        if pool.replicas().is_some() {
            continue;
        }
        let mut requirements = match pool.requirements() {
            Ok(r) => r,
            Err(e) => {
                skipped.push(Skipped {
                    object: format!("NodePool/{}", pool.name()),
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let class = classes
            .iter()
            .find(|c| c.name() == pool.spec.template.spec.node_class_ref.name);
        let settings = node_settings(class);
        let zone_ids = zone_ids(class);
        let labels = pool_labels(pool);
        requirements.add_all(&Requirements::from_labels(&labels));
        let mut custom = Requirements::new();
        for r in requirements.iter() {
            if !wk::is_well_known(r.key()) && !labels.contains_key(r.key()) {
                custom.add(r.clone());
            }
        }
        let taints = pool.spec.template.spec.taints.clone();
        let startup_taints = pool.spec.template.spec.startup_taints.clone();
        let mut types = Vec::new();
        let mut reserved: BTreeMap<(String, String), Vec<CapacityReservation>> = BTreeMap::new();
        for &it in region.types() {
            let mut node_labels = it.labels();
            node_labels.extend(labels.clone());
            let region_name = region.region();
            let allowed = |o: &crate::model::Offering, reservation: Option<&CapacityReservation>| {
                requirements.iter().all(|r| {
                    let value = match r.key() {
                        wk::ZONE => Some(o.zone.as_str()),
                        wk::ZONE_ID => zone_ids.get(&o.zone).map(String::as_str),
                        wk::REGION => Some(region_name),
                        wk::CAPACITY_TYPE => Some(o.capacity_type.label()),
                        wk::CAPACITY_RESERVATION_ID => reservation.map(|c| c.id.as_str()),
                        wk::CAPACITY_RESERVATION_TYPE => reservation.map(|c| c.reservation_type.label()),
                        key => node_labels.get(key).map(String::as_str),
                    };
                    // A custom key is the NodePool's to label: it excludes no type.
                    value.map_or_else(|| r.allows_absent() || custom.has_key(r.key()), |v| r.has(v))
                })
            };
            let mut offers: Vec<Offer> = region
                .offerings_of(it)
                .into_iter()
                .filter(|o| allowed(o, None))
                .map(|o| Offer {
                    zone: o.zone,
                    capacity_type: o.capacity_type,
                    price: o.price,
                })
                .collect();
            // Reserved offerings of the class's reservations, where the NodePool allows
            // `reserved` (Karpenter: a NodePool that does not list it in its
            // `karpenter.sh/capacity-type` requirement never uses a reservation).
            if let Some(class) = class {
                for (o, r) in region.reserved_offerings_of(it, class.name()) {
                    if !allowed(&o, Some(r)) {
                        continue;
                    }
                    reserved
                        .entry((it.name.clone(), o.zone.clone()))
                        .or_default()
                        .push(r.clone());
                    if !offers
                        .iter()
                        .any(|x| x.zone == o.zone && x.capacity_type == CapacityType::Reserved)
                    {
                        offers.push(Offer {
                            zone: o.zone,
                            capacity_type: o.capacity_type,
                            price: o.price,
                        });
                    }
                }
            }
            if offers.is_empty() {
                continue;
            }
            offers.sort_by(|a, b| a.price.total_cmp(&b.price).then_with(|| a.zone.cmp(&b.zone)));
            let it = with_settings(it, &settings);
            // Karpenter's `isDaemonPodCompatible`: a DaemonSet counts when it tolerates the
            // NodePool's taints; startup taints are removed once the node is up.
            let mut ds = Resources::default();
            let mut daemon_ports = Vec::new();
            for d in landing(daemonsets, &node_labels, &custom, &taints) {
                ds = ds.plus(&d.requests);
                daemon_ports.extend(d.host_ports.iter().cloned());
            }
            let net = it.allocatable.minus(&ds);
            if net.any_negative().is_some() {
                continue;
            }
            types.push(TypeOption {
                instance_type: it,
                labels: node_labels,
                overhead: ds,
                daemon_ports,
                net,
                offers,
            });
        }
        for list in reserved.values_mut() {
            list.sort_by(|a, b| {
                a.reservation_type
                    .cmp(&b.reservation_type)
                    .then_with(|| a.id.cmp(&b.id))
            });
        }
        types.sort_by(|a, b| {
            a.min_price()
                .total_cmp(&b.min_price())
                .then_with(|| a.instance_type.name.cmp(&b.instance_type.name))
        });
        let limits = pool
            .spec
            .limits
            .iter()
            .map(|(k, q)| (k.clone(), limit_amount(k, q)))
            .collect();
        templates.push(Template {
            name: pool.name().to_string(),
            weight: pool.weight(),
            requirements,
            labels,
            custom,
            zone_ids,
            taints,
            startup_taints,
            types,
            limits,
            used: existing_usage(pool.name(), nodes),
            settings,
            reservations: reserved,
            zone_balance: pool.zone_balance().ok().flatten(),
        });
    }
    templates.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
    (templates, skipped)
}
