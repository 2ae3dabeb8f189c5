//! The baseline Carpool is measured against: Karpenter's scheduler, written out.
//!
//! Rules, as in Karpenter's `pkg/controllers/provisioning/scheduling`:
//!
//! 1. Pods are taken by CPU, then memory, descending.
//! 2. A pod joins the first in-flight node (in creation order) where it fits: the node
//!    keeps every instance type that satisfies all its pods' requirements and holds their
//!    summed requests plus its DaemonSets; the pod joins if at least one type remains.
//! 3. Otherwise it opens a node from the heaviest NodePool whose taints it tolerates and
//!    whose requirements it is compatible with, keeping every type that holds it alone.
//! 4. Topology: a zonal spread picks the zone with the fewest matching pods (those bound to
//!    the snapshot's nodes counted); hostname
//!    spreads and hostname anti-affinity cap matching pods per node; zonal pod affinity
//!    follows the zone of the first pod.
//! 5. Each node then launches the cheapest type it kept, at its cheapest offering (in its
//!    zone, if it has one) among those its pods' zone and capacity-type requirements accept.
//!
//! No cost model steers the packing: a node grows while the largest type still fits.

use std::collections::HashMap;

use carpool::catalog::RegionCatalog;
use carpool::decide::provisioning::daemonsets::DaemonSetInfo;
use carpool::decide::provisioning::namespaces::Namespaces;
use carpool::decide::provisioning::plan::MAX_ALTERNATIVES;
use carpool::decide::provisioning::pod::{PodInfo, Volumes, is_provisionable};
use carpool::decide::provisioning::taints::untolerated;
use carpool::decide::provisioning::templates::{self, Template};
use carpool::decide::provisioning::unschedulable::Reason;
use carpool::decide::{PlannedNode, ProvisioningPlan, Unschedulable};
use carpool::model::well_known as wk;
use carpool::model::{CapacityType, Resources};
use carpool::snapshot::Snapshot;

struct Claim {
    template: usize,
    zone: Option<String>,
    options: Vec<usize>,
    used: Resources,
    pods: Vec<usize>,
}

fn labels_match(p: &PodInfo, t: &Template, option: usize, zone: Option<&str>) -> bool {
    let o = &t.types[option];
    p.branches.iter().any(|b| {
        b.iter().all(|r| {
            let v = match r.key() {
                wk::ZONE => return zone.is_none_or(|z| r.has(z)) && o.offers.iter().any(|off| r.has(&off.zone)),
                wk::CAPACITY_TYPE => return o.offers.iter().any(|off| r.has(off.capacity_type.label())),
                k => o.labels.get(k),
            };
            match v {
                Some(v) => r.has(v),
                None => r.allows_absent(),
            }
        })
    })
}

/// Whether a pod's node affinity allows an offering's zone and capacity type (Karpenter
/// launches a node claim only into offerings every pod's requirements accept).
fn offer_allowed(p: &PodInfo, zone: &str, capacity_type: CapacityType) -> bool {
    p.branches.iter().any(|b| {
        b.iter().all(|r| match r.key() {
            wk::ZONE => r.has(zone),
            wk::CAPACITY_TYPE => r.has(capacity_type.label()),
            _ => true,
        })
    })
}

fn zone_spread_key(p: &PodInfo) -> Option<&carpool::decide::provisioning::pod::Spread> {
    p.spreads.iter().find(|s| s.hard && s.key == wk::ZONE)
}

/// Plans with the baseline rules.
pub fn plan(snapshot: &Snapshot, region: &RegionCatalog<'_>) -> ProvisioningPlan {
    let daemonsets: Vec<DaemonSetInfo> = snapshot
        .daemonsets
        .iter()
        .filter_map(|d| DaemonSetInfo::from_k8s(d).ok())
        .collect();
    let (templates, _) = templates::build(
        &snapshot.nodepools,
        &snapshot.nodeclasses,
        region,
        &daemonsets,
        &snapshot.nodes,
    );
    let volumes = Volumes::new(&snapshot.pvcs, &snapshot.pvs);
    let namespaces = Namespaces::new(snapshot);
    let mut pods: Vec<PodInfo> = snapshot
        .pods
        .iter()
        .filter(|p| is_provisionable(p))
        .filter_map(|p| PodInfo::from_pod(p, &volumes, &namespaces).ok())
        .collect();
    pods.sort_by(|a, b| {
        b.requests
            .cpu_millis
            .cmp(&a.requests.cpu_millis)
            .then(b.requests.memory.cmp(&a.requests.memory))
            .then(a.key.cmp(&b.key))
    });
    // The zones a NodePool can launch into: a zonal spread's domains (Karpenter's
    // topology takes its domains from the NodePools' requirements).
    let zones: Vec<String> = region
        .zones()
        .iter()
        .filter(|z| {
            templates
                .iter()
                .any(|t| t.types.iter().any(|o| o.offers.iter().any(|off| &off.zone == *z)))
        })
        .cloned()
        .collect();
    let mut claims: Vec<Claim> = Vec::new();
    let mut zone_counts: HashMap<String, HashMap<String, i32>> = HashMap::new();
    let mut affinity_zone: HashMap<String, String> = HashMap::new();
    let mut plan = ProvisioningPlan::default();

    let group = |p: &PodInfo| p.labels.get("app").cloned().unwrap_or_default();
    // Karpenter's topology counts the pods already bound, by their node's zone.
    for pod in &snapshot.pods {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let zone = snapshot
            .nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(node))
            .and_then(|n| n.metadata.labels.as_ref()?.get(wk::ZONE).cloned());
        let app = pod.metadata.labels.as_ref().and_then(|l| l.get("app")).cloned();
        if let (Some(zone), Some(app)) = (zone, app) {
            *zone_counts.entry(app).or_default().entry(zone).or_default() += 1;
        }
    }
    let per_node_cap = |p: &PodInfo| {
        let anti = p
            .anti_affinity
            .iter()
            .any(|t| t.key == wk::HOSTNAME && t.matches(&p.namespace, &p.labels));
        let spread = p
            .spreads
            .iter()
            .find(|s| s.hard && s.key == wk::HOSTNAME)
            .map(|s| s.max_skew as usize);
        if anti { Some(1) } else { spread }
    };

    for (i, p) in pods.iter().enumerate() {
        // The zone this pod must use, if a zonal constraint decides it.
        let wanted_zone: Option<String> = if zone_spread_key(p).is_some() {
            let counts = zone_counts.entry(group(p)).or_default();
            let allowed: Vec<&String> = zones
                .iter()
                .filter(|z| p.branches.iter().any(|b| b.get(wk::ZONE).is_none_or(|r| r.has(z))))
                .collect();
            let min = allowed
                .iter()
                .map(|z| counts.get(*z).copied().unwrap_or(0))
                .min()
                .unwrap_or(0);
            allowed
                .into_iter()
                .find(|z| counts.get(*z).copied().unwrap_or(0) == min)
                .cloned()
        } else if p.affinity.iter().any(|t| t.key == wk::ZONE) {
            affinity_zone.get(&group(p)).cloned()
        } else {
            None
        };
        let cap = per_node_cap(p);
        let mut placed = false;
        for c in claims.iter_mut() {
            let t = &templates[c.template];
            if untolerated(&p.tolerations, &t.taints).is_some() {
                continue;
            }
            if let (Some(w), Some(z)) = (&wanted_zone, &c.zone)
                && w != z
            {
                continue;
            }
            if let Some(cap) = cap
                && c.pods.iter().filter(|&&q| group(&pods[q]) == group(p)).count() >= cap
            {
                continue;
            }
            let zone = wanted_zone.as_deref().or(c.zone.as_deref());
            let used = c.used.plus(&p.requests);
            let options: Vec<usize> = c
                .options
                .iter()
                .copied()
                .filter(|&o| used.fits_in(&t.types[o].net).is_ok() && labels_match(p, t, o, zone))
                .filter(|&o| zone.is_none_or(|z| t.types[o].offers.iter().any(|off| off.zone == z)))
                .collect();
            if options.is_empty() {
                continue;
            }
            c.options = options;
            c.used = used;
            c.pods.push(i);
            if c.zone.is_none() {
                c.zone = wanted_zone.clone();
            }
            placed = true;
            break;
        }
        if !placed {
            for (ti, t) in templates.iter().enumerate() {
                if untolerated(&p.tolerations, &t.taints).is_some()
                    || !p.branches.iter().any(|b| t.requirements.compatible(b).is_ok())
                {
                    continue;
                }
                let zone = wanted_zone.as_deref();
                let options: Vec<usize> = (0..t.types.len())
                    .filter(|&o| p.requests.fits_in(&t.types[o].net).is_ok() && labels_match(p, t, o, zone))
                    .filter(|&o| zone.is_none_or(|z| t.types[o].offers.iter().any(|off| off.zone == z)))
                    .collect();
                if options.is_empty() {
                    continue;
                }
                claims.push(Claim {
                    template: ti,
                    zone: wanted_zone.clone(),
                    options,
                    used: p.requests.clone(),
                    pods: vec![i],
                });
                placed = true;
                break;
            }
        }
        if !placed {
            plan.unschedulable
                .push(Unschedulable::new(p.key.clone(), Reason::NoNodePool));
            continue;
        }
        let Some(c) = claims.iter().find(|c| c.pods.last() == Some(&i)) else {
            continue;
        };
        if let Some(z) = &c.zone {
            if zone_spread_key(p).is_some() {
                *zone_counts.entry(group(p)).or_default().entry(z.clone()).or_default() += 1;
            }
            if p.affinity.iter().any(|t| t.key == wk::ZONE) {
                affinity_zone.entry(group(p)).or_insert_with(|| z.clone());
            }
        }
    }

    for c in &claims {
        let t = &templates[c.template];
        // Cheapest (type, offering) among the options, in the claim's zone if it has one.
        let mut priced: Vec<(f64, usize, String, CapacityType)> = Vec::new();
        for &o in &c.options {
            let best = t.types[o]
                .offers
                .iter()
                .filter(|off| c.zone.as_ref().is_none_or(|z| &off.zone == z))
                .filter(|off| {
                    c.pods
                        .iter()
                        .all(|&q| offer_allowed(&pods[q], &off.zone, off.capacity_type))
                })
                .min_by(|a, b| a.price.total_cmp(&b.price));
            if let Some(off) = best {
                priced.push((off.price, o, off.zone.clone(), off.capacity_type));
            }
        }
        priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let Some((price, o, zone, ct)) = priced.first().cloned() else {
            continue;
        };
        let alternatives: Vec<String> = priced
            .iter()
            .filter(|(_, _, z, k)| *z == zone && *k == ct)
            .take(MAX_ALTERNATIVES)
            .map(|(_, i, _, _)| t.types[*i].instance_type.name.clone())
            .collect();
        let it = &t.types[o];
        plan.nodes.push(PlannedNode {
            nodepool: t.name.clone(),
            instance_type: it.instance_type.name.clone(),
            instance_types: alternatives,
            zone,
            capacity_type: ct,
            price_per_hour: price,
            pods: c.pods.iter().map(|&i| pods[i].key.clone()).collect(),
            requests: c.used.clone(),
            daemonset_overhead: it.overhead.clone(),
            allocatable: it.instance_type.allocatable.clone(),
            labels: t.labels.clone(),
        });
    }
    plan.cost_per_hour = plan.nodes.iter().map(|n| n.price_per_hour).sum();
    plan
}
