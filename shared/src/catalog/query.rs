//! The cheapest instance types for a set of requirements: what `carpool catalog` answers.

use serde::Serialize;

use super::RegionCatalog;
use crate::model::{CapacityType, InstanceType, Requirements};

/// What to look for.
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// Label requirements every offering must meet.
    pub requirements: Requirements,
    /// Only this capacity type, if set; otherwise the cheaper of the two per type.
    pub capacity_type: Option<CapacityType>,
    /// Least allocatable CPU, millicores.
    pub min_cpu_millis: i64,
    /// Least allocatable memory, bytes.
    pub min_memory_bytes: i64,
}

/// One instance type that fits, at its cheapest matching offering.
#[derive(Clone, Debug, Serialize)]
pub struct Match<'a> {
    /// The instance type.
    #[serde(skip)]
    pub instance_type: &'a InstanceType,
    /// The capacity type of the cheapest offering.
    pub capacity_type: CapacityType,
    /// USD per hour of the cheapest offering.
    pub price_per_hour: f64,
    /// The zones with a matching offering, sorted.
    pub zones: Vec<String>,
}

/// The instance types meeting the query, cheapest first (ties by name).
pub fn cheapest<'a>(catalog: &RegionCatalog<'a>, q: &Query) -> Vec<Match<'a>> {
    let mut out = Vec::new();
    for &it in catalog.types() {
        if it.allocatable.cpu_millis < q.min_cpu_millis || it.allocatable.memory < q.min_memory_bytes {
            continue;
        }
        let mut best: Option<Match<'a>> = None;
        for ct in q.capacity_type.map_or(CapacityType::ALL.to_vec(), |c| vec![c]) {
            let mut zones = Vec::new();
            let mut price = f64::INFINITY;
            for o in catalog.offerings_of(it).into_iter().filter(|o| o.capacity_type == ct) {
                if q.requirements.matches_labels(&o.labels(it, catalog.region())).is_ok() {
                    price = price.min(o.price);
                    zones.push(o.zone);
                }
            }
            if zones.is_empty() || best.as_ref().is_some_and(|b| b.price_per_hour <= price) {
                continue;
            }
            zones.sort();
            best = Some(Match {
                instance_type: it,
                capacity_type: ct,
                price_per_hour: price,
                zones,
            });
        }
        out.extend(best);
    }
    out.sort_by(|a, b| {
        a.price_per_hour
            .total_cmp(&b.price_per_hour)
            .then_with(|| a.instance_type.name.cmp(&b.instance_type.name))
    });
    out
}
