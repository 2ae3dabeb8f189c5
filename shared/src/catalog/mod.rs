//! The instance-type catalog: facts, allocatable resources, offerings and prices.
//!
//! [`Catalog::embedded`] loads the data compiled into the binary once per process.
//! [`Catalog::region`] gives a [`RegionCatalog`]: the types offered in one region, their
//! zones, and a [`PriceBook`] that live prices can update without changing callers;
//! [`overlay::apply`] prices it as the cluster's NodeOverlays say.

pub mod allocatable;
pub mod commitment;
mod embedded;
pub mod overlay;
pub mod prices;
pub mod query;
pub mod zones;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::OnceLock;

pub use prices::{PriceBook, SpotModel};

use crate::model::{CapacityReservation, CapacityType, InstanceType, Offering};

/// The region whose price table stands in where a region has none.
pub const PRICE_FALLBACK_REGION: &str = "us-east-1";

/// A catalog that cannot answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// The embedded data is damaged (a build defect, not a user error).
    #[error("embedded catalog data is invalid: {0}")]
    Embedded(String),
    /// A region Carpool has no data for.
    #[error("unknown region {region:?}; known regions: {known}")]
    UnknownRegion {
        /// The region asked for.
        region: String,
        /// The regions known, comma-separated.
        known: String,
    },
}

/// Every instance type Carpool knows, with offerings and prices by region.
#[derive(Debug)]
pub struct Catalog {
    types: Vec<InstanceType>,
    by_name: HashMap<String, usize>,
    incomplete: Vec<String>,
    offered: BTreeMap<String, Vec<String>>,
    on_demand: BTreeMap<String, HashMap<String, f64>>,
}

static EMBEDDED: OnceLock<Result<Catalog, CatalogError>> = OnceLock::new();

impl Catalog {
    /// The catalog compiled into the binary, loaded on first use.
    pub fn embedded() -> Result<&'static Catalog, CatalogError> {
        EMBEDDED
            .get_or_init(|| {
                let e = embedded::load()?;
                let by_name = e.types.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
                Ok(Catalog {
                    types: e.types,
                    by_name,
                    incomplete: e.incomplete,
                    offered: e.offered,
                    on_demand: e.on_demand,
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Every instance type with enough facts to schedule on, sorted by name.
    pub fn types(&self) -> &[InstanceType] {
        &self.types
    }

    /// Rows of the data that lack vCPU, memory, architecture or pod limits.
    pub fn incomplete(&self) -> &[String] {
        &self.incomplete
    }

    /// An instance type by name.
    pub fn get(&self, name: &str) -> Option<&InstanceType> {
        self.by_name.get(name).map(|&i| &self.types[i])
    }

    /// The regions with offerings data or a price table.
    pub fn regions(&self) -> Vec<&str> {
        let mut r: Vec<&str> = self
            .offered
            .keys()
            .chain(self.on_demand.keys())
            .map(String::as_str)
            .collect();
        r.sort_unstable();
        r.dedup();
        r
    }

    /// The catalog of one region.
    pub fn region(&self, region: &str) -> Result<RegionCatalog<'_>, CatalogError> {
        let zones = zones::zones(region);
        let table = self.on_demand.get(region);
        let names: Vec<&String> = match (self.offered.get(region), table) {
            (Some(names), _) => names.iter().collect(),
            (None, Some(prices)) => prices.keys().collect(),
            (None, None) => Vec::new(),
        };
        if names.is_empty() || zones.is_empty() {
            return Err(CatalogError::UnknownRegion {
                region: region.to_string(),
                known: self.regions().join(", "),
            });
        }
        let mut types: Vec<&InstanceType> = names.into_iter().filter_map(|n| self.get(n)).collect();
        types.sort_by(|a, b| a.name.cmp(&b.name));
        let (prices, estimated) = match table {
            Some(t) => (t.clone(), false),
            None => (
                self.on_demand.get(PRICE_FALLBACK_REGION).cloned().unwrap_or_default(),
                true,
            ),
        };
        Ok(RegionCatalog {
            region: region.to_string(),
            zones,
            types,
            prices: PriceBook::new(prices, estimated),
            unavailable: HashSet::new(),
            offered: None,
            listed_types: None,
            reservations: BTreeMap::new(),
            commitments: Vec::new(),
        })
    }
}

/// The instance types, zones and prices of one region.
#[derive(Clone, Debug)]
pub struct RegionCatalog<'a> {
    region: String,
    zones: Vec<String>,
    types: Vec<&'a InstanceType>,
    prices: PriceBook,
    /// Offerings known to be out of capacity (type, zone, capacity type).
    unavailable: HashSet<(String, String, CapacityType)>,
    /// When set, the only (type, zone) pairs EC2 offers, as read live.
    offered: Option<HashSet<(String, String)>>,
    /// The types as listed, before NodeOverlays gave some extended resources (set while
    /// some have them).
    listed_types: Option<Vec<&'a InstanceType>>,
    /// The capacity reservations each EC2NodeClass selects, with the room each has left
    /// (set per run: [`RegionCatalog::set_capacity_reservations`]).
    reservations: BTreeMap<String, Vec<CapacityReservation>>,
    /// The Savings Plan commitments the NodeOverlays state ([`commitment`]).
    commitments: Vec<commitment::Commitment>,
}

impl<'a> RegionCatalog<'a> {
    /// The region name.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The zones offerings are in.
    pub fn zones(&self) -> &[String] {
        &self.zones
    }

    /// The Savings Plan commitments the applied NodeOverlays state, in their order.
    pub fn commitments(&self) -> &[commitment::Commitment] {
        &self.commitments
    }

    /// The instance types offered in the region.
    pub fn types(&self) -> &[&'a InstanceType] {
        &self.types
    }

    /// The prices; live prices are set through [`RegionCatalog::prices_mut`].
    pub fn prices(&self) -> &PriceBook {
        &self.prices
    }

    /// The prices, for live updates.
    pub fn prices_mut(&mut self) -> &mut PriceBook {
        &mut self.prices
    }

    /// Leaves an offering out until the catalog is rebuilt: it ran out of capacity.
    pub fn mark_unavailable(&mut self, instance_type: &str, zone: &str, capacity_type: CapacityType) {
        self.unavailable
            .insert((instance_type.to_string(), zone.to_string(), capacity_type));
    }

    /// Whether an offering was marked unavailable ([`RegionCatalog::mark_unavailable`]).
    pub fn is_unavailable(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) -> bool {
        !self.unavailable.is_empty()
            && self
                .unavailable
                .contains(&(instance_type.to_string(), zone.to_string(), capacity_type))
    }

    /// Sets the capacity reservations an EC2NodeClass selects, each with the instances it
    /// can still take: its `reserved` offerings.
    pub fn set_capacity_reservations(&mut self, node_class: &str, reservations: Vec<CapacityReservation>) {
        self.reservations.insert(node_class.to_string(), reservations);
    }

    /// The capacity reservations an EC2NodeClass selects (none unless set).
    pub fn capacity_reservations(&self, node_class: &str) -> &[CapacityReservation] {
        self.reservations.get(node_class).map_or(&[], Vec::as_slice)
    }

    /// Every class's capacity reservations, by class.
    pub fn all_capacity_reservations(&self) -> &BTreeMap<String, Vec<CapacityReservation>> {
        &self.reservations
    }

    /// The `reserved` offerings of a type for an EC2NodeClass, one per reservation with
    /// room (Karpenter's `ReservedCapacityResolver.ResolveOfferings`), each with the
    /// reservation; none in a zone where the reserved offering was marked unavailable (a
    /// launch found it full) or where the type is not offered.
    pub fn reserved_offerings_of(&self, it: &InstanceType, node_class: &str) -> Vec<(Offering, &CapacityReservation)> {
        let Some(price) = self.prices.price(it, "", CapacityType::Reserved) else {
            return Vec::new();
        };
        self.capacity_reservations(node_class)
            .iter()
            .filter(|r| r.instance_type == it.name && r.available > 0 && self.zones.contains(&r.zone))
            .filter(|r| !self.is_unavailable(&it.name, &r.zone, CapacityType::Reserved))
            .filter(|r| {
                self.offered
                    .as_ref()
                    .is_none_or(|o| o.contains(&(it.name.clone(), r.zone.clone())))
            })
            .map(|r| {
                (
                    Offering {
                        instance_type: it.name.clone(),
                        zone: r.zone.clone(),
                        capacity_type: CapacityType::Reserved,
                        price,
                        available: true,
                    },
                    r,
                )
            })
            .collect()
    }

    /// Keeps only the (type, zone) pairs EC2 says it offers (DescribeInstanceTypeOfferings).
    pub fn restrict_to_offered(&mut self, offered: impl IntoIterator<Item = (String, String)>) {
        self.offered = Some(offered.into_iter().collect());
    }

    /// Keeps only the instance types `keep` accepts (the simulator drops the types no
    /// NodePool of its scenario allows, which no decision could choose).
    pub fn retain_types(&mut self, keep: impl Fn(&InstanceType) -> bool) {
        self.types.retain(|t| keep(t));
        if let Some(listed) = &mut self.listed_types {
            listed.retain(|t| keep(t));
        }
    }

    /// The offerings of one type: every zone × capacity type with a known price, less the
    /// ones marked unavailable or not offered.
    pub fn offerings_of(&self, it: &InstanceType) -> Vec<Offering> {
        let mut out = Vec::new();
        for zone in &self.zones {
            if let Some(offered) = &self.offered
                && !offered.contains(&(it.name.clone(), zone.clone()))
            {
                continue;
            }
            for ct in CapacityType::ALL {
                if !self.unavailable.is_empty() && self.unavailable.contains(&(it.name.clone(), zone.clone(), ct)) {
                    continue;
                }
                if let Some(price) = self.prices.price(it, zone, ct) {
                    out.push(Offering {
                        instance_type: it.name.clone(),
                        zone: zone.clone(),
                        capacity_type: ct,
                        price,
                        available: true,
                    });
                }
            }
        }
        out
    }
}
