//! NodeOverlays applied to a region: every offering an overlay's requirements select is
//! priced as the overlay says, and every instance type it selects gets its extended
//! resources, so that every decision downstream (the planner, the lower bound,
//! consolidation's savings, spot-to-spot, the CLI, the metrics) sees the prices the user
//! pays and the resources the nodes will have.
//!
//! As Karpenter does it (kubernetes-sigs/karpenter `pkg/controllers/nodeoverlay`):
//! - Overlays are taken in `NodeOverlayList.OrderByWeight` order: the higher weight
//!   first, and between equal weights the name later in the alphabet first.
//! - An offering's price is changed by the first overlay in that order that selects it,
//!   and by no other (`InstanceTypeStore.updateInstanceTypeOffering` keeps the first
//!   update): changes do not compound.
//! - An overlay that selects an offering that an applied overlay of the same weight also
//!   selects conflicts (`isOfferingUpdateConflicting` compares with the weight of the last
//!   overlay stored for the offering, whether or not that one set its price) and is not
//!   applied at all, to any offering (`validateAndUpdateInstanceTypeOverrides` checks
//!   before it stores); Karpenter sets its `ValidationSucceeded` condition False with
//!   reason `Conflict`. With `OrderByWeight`, the one whose name is later wins.
//! - A change never takes a price below zero (`AdjustedPrice`).
//! - `capacity` applies to a whole instance type when the overlay selects any of its
//!   offerings (`getOverlaidOfferings`), adding the resources or replacing them
//!   (`ApplyCapacityOverlay`). Two overlays of the same weight that give one type the same
//!   resource conflict (`isCapacityUpdateConflicting`), as prices do. Between weights,
//!   the higher weight's quantity stands, as the API's `weight` field and Karpenter's
//!   NodeOverlay documentation state ("higher weight wins"); the store's loop in
//!   `updateInstanceTypeCapacity` would let a later, lower-weight overlay overwrite it,
//!   which Carpool does not copy.
//! - Hugepages added as capacity are taken from the memory pods may use
//!   (`InstanceType.precompute`).
//!
//! Where Carpool differs: Karpenter evaluates overlays per NodePool, so requirements may
//! name `karpenter.sh/nodepool` or a NodePool's template labels. Carpool applies overlays
//! to the region once for every pool, so an overlay whose requirements name a key that is
//! not an offering's label is skipped, with the reason. An offering is selected when the
//! labels a node of it would carry (instance type labels, zone, region, capacity type)
//! meet the requirements, as a node selector matches them.
//!
//! A type with extended resources is a copy of the catalog's, made once per distinct set of
//! resources and kept for the process (a few per overlay configuration), so that the
//! region's types stay references to the catalog's lifetime.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, OnceLock, PoisonError};

use serde::Serialize;

use super::RegionCatalog;
use crate::model::manifest::Validate;
use crate::model::{CapacityType, InstanceType, NodeOverlay, Requirements, well_known};

/// An overlay that was not applied, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SkippedOverlay {
    /// The overlay's name.
    pub name: String,
    /// Why it was skipped.
    pub reason: String,
}

/// What applying overlays did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OverlayOutcome {
    /// The overlays applied, with how many offerings each priced.
    pub applied: Vec<(String, usize)>,
    /// The overlays skipped, with why.
    pub skipped: Vec<SkippedOverlay>,
}

/// One offering with a price.
struct Offered {
    /// Index of its type in the region's types.
    ty: usize,
    zone: String,
    capacity_type: CapacityType,
}

/// Whether a node of the offering would meet every requirement, as a node selector
/// matches its labels ([`Requirements::matches_labels`]): the type's labels, with the
/// offering's zone, region and capacity type.
fn selects(requirements: &Requirements, type_labels: &BTreeMap<String, String>, region: &str, o: &Offered) -> bool {
    requirements.iter().all(|r| {
        let value = match r.key() {
            well_known::ZONE => Some(o.zone.as_str()),
            well_known::REGION => Some(region),
            well_known::CAPACITY_TYPE => Some(o.capacity_type.label()),
            key => type_labels.get(key).map(String::as_str),
        };
        value.map_or_else(|| r.allows_absent(), |v| r.has(v))
    })
}

/// Applies `overlays` to the region, replacing what earlier overlays set; returns what was
/// applied and what was skipped (see the module's rules).
pub fn apply(region: &mut RegionCatalog<'_>, overlays: &[NodeOverlay]) -> OverlayOutcome {
    region.prices_mut().clear_changes();
    region.commitments.clear();
    if let Some(listed) = region.listed_types.take() {
        region.types = listed;
    }
    let mut outcome = OverlayOutcome::default();
    if overlays.is_empty() {
        return outcome;
    }
    let mut ordered: Vec<&NodeOverlay> = overlays.iter().collect();
    // OrderByWeight: weight descending, then name descending.
    ordered.sort_by_key(|o| (Reverse(o.weight()), Reverse(o.name().to_string())));
    // Every offering with a price, and each type's labels, computed once.
    let type_labels: Vec<BTreeMap<String, String>> = region.types().iter().map(|it| it.labels()).collect();
    let mut offerings: Vec<Offered> = Vec::new();
    for (ty, it) in region.types().iter().enumerate() {
        for zone in region.zones() {
            for ct in CapacityType::ALL {
                if region.prices().list_price(it, zone, ct).is_some() {
                    offerings.push(Offered {
                        ty,
                        zone: zone.clone(),
                        capacity_type: ct,
                    });
                }
            }
        }
    }
    // Offering index → the last applied overlay that selected it (name, weight); and the
    // offerings priced.
    let mut touched: HashMap<usize, (String, i32)> = HashMap::new();
    let mut priced: HashSet<usize> = HashSet::new();
    // Type index → the last applied capacity overlay (name, weight, its resources); and
    // the resources given so far.
    let mut capacity_touched: HashMap<usize, (String, i32, BTreeSet<String>)> = HashMap::new();
    let mut capacity: BTreeMap<usize, BTreeMap<String, i64>> = BTreeMap::new();
    for overlay in ordered {
        let name = overlay.name().to_string();
        let skip = |reason: String| SkippedOverlay {
            name: name.clone(),
            reason,
        };
        if let Err(e) = overlay.validate() {
            outcome.skipped.push(skip(e.to_string()));
            continue;
        }
        if let Some(r) = overlay
            .spec
            .requirements
            .iter()
            .find(|r| !well_known::OFFERING_LABELS.contains(&r.key.as_str()))
        {
            outcome.skipped.push(skip(format!(
                "spec.requirements: {:?} is not a label of an offering; Carpool applies overlays to every NodePool alike, so it cannot select by NodePool or by a NodePool's labels",
                r.key
            )));
            continue;
        }
        let change = overlay.price_change();
        let resources: BTreeMap<String, i64> = overlay
            .spec
            .capacity
            .iter()
            .map(|(k, q)| (k.clone(), q.units_ceil()))
            .collect();
        if change.is_none() && resources.is_empty() {
            continue;
        }
        let requirements = overlay.requirements();
        let selected: Vec<usize> = offerings
            .iter()
            .enumerate()
            .filter(|(_, o)| selects(&requirements, &type_labels[o.ty], region.region(), o))
            .map(|(i, _)| i)
            .collect();
        let types: BTreeSet<usize> = selected.iter().map(|&i| offerings[i].ty).collect();
        let price_conflict = change.and_then(|_| {
            selected.iter().find_map(|i| {
                let (other, w) = touched.get(i)?;
                (*w == overlay.weight()).then(|| {
                    let o = &offerings[*i];
                    format!(
                        "Conflict: NodeOverlay {other:?} has the same weight ({w}) and selects {} {} in {} too; give one a higher weight",
                        region.types()[o.ty].name,
                        o.capacity_type,
                        o.zone
                    )
                })
            })
        });
        let capacity_conflict = (!resources.is_empty())
            .then(|| {
                types.iter().find_map(|t| {
                    let (other, w, given) = capacity_touched.get(t)?;
                    let shared = resources.keys().find(|r| given.contains(*r))?;
                    (*w == overlay.weight()).then(|| {
                        format!(
                            "Conflict: NodeOverlay {other:?} has the same weight ({w}) and gives {} {shared:?} too; give one a higher weight",
                            region.types()[*t].name
                        )
                    })
                })
            })
            .flatten();
        if let Some(reason) = price_conflict.or(capacity_conflict) {
            outcome.skipped.push(skip(reason));
            continue;
        }
        let mut count = 0;
        if let Some(change) = change {
            for &i in &selected {
                touched.insert(i, (name.clone(), overlay.weight()));
                if !priced.insert(i) {
                    continue;
                }
                let o = &offerings[i];
                let ty = region.types()[o.ty].name.clone();
                region.prices_mut().set_change(&ty, &o.zone, o.capacity_type, change);
                count += 1;
            }
        }
        if let Ok(Some(per_hour)) = overlay.commitment() {
            let covers = selected
                .iter()
                .map(|&i| &offerings[i])
                .filter(|o| o.capacity_type == CapacityType::OnDemand)
                .map(|o| (region.types()[o.ty].name.clone(), o.zone.clone()))
                .collect();
            region.commitments.push(super::commitment::Commitment {
                overlay: name.clone(),
                per_hour,
                covers,
            });
        }
        if !resources.is_empty() {
            for &t in &types {
                let given = capacity.entry(t).or_default();
                for (r, q) in &resources {
                    given.entry(r.clone()).or_insert(*q);
                }
                capacity_touched.insert(t, (name.clone(), overlay.weight(), resources.keys().cloned().collect()));
            }
        }
        outcome.applied.push((name, count));
    }
    if !capacity.is_empty() {
        let listed = region.types.clone();
        for (t, extra) in &capacity {
            region.types[*t] = with_capacity(listed[*t], extra);
        }
        region.listed_types = Some(listed);
    }
    outcome
}

/// The catalog's type with `extra` resources: made once per type and set of resources.
fn with_capacity(it: &InstanceType, extra: &BTreeMap<String, i64>) -> &'static InstanceType {
    type Key = (String, Vec<(String, i64)>);
    static MADE: OnceLock<Mutex<HashMap<Key, &'static InstanceType>>> = OnceLock::new();
    let key: Key = (it.name.clone(), extra.iter().map(|(k, v)| (k.clone(), *v)).collect());
    let mut made = MADE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    made.entry(key).or_insert_with(|| {
        let mut copy = it.clone();
        copy.overlay_capacity = extra.clone();
        // As `allocatable::capacity` and `allocatable::allocatable` count them, so that a
        // NodePool's class, which recomputes both from the facts, agrees.
        for (name, amount) in extra {
            let before = copy.capacity.get(name);
            copy.capacity.set(name, *amount);
            copy.allocatable.set(name, *amount);
            if name.starts_with("hugepages-") {
                copy.allocatable.memory = (copy.allocatable.memory - (*amount - before)).max(0);
            }
        }
        Box::leak(Box::new(copy))
    })
}

impl OverlayOutcome {
    /// The skipped overlays as a snapshot's skipped objects: `NodeOverlay/<name>` and why.
    pub fn skipped_objects(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.skipped
            .iter()
            .map(|s| (format!("NodeOverlay/{}", s.name), s.reason.clone()))
    }
}

impl RegionCatalog<'_> {
    /// Applies `overlays` to the region's prices and types: see [`apply`].
    pub fn apply_overlays(&mut self, overlays: &[NodeOverlay]) -> OverlayOutcome {
        apply(self, overlays)
    }
}
