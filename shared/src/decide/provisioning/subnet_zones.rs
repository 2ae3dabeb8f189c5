//! A NodePool can launch only where its EC2NodeClass has subnets: Karpenter narrows the
//! zone requirement of each NodePool to its class's subnet zones. Carpool does the same
//! by adding `topology.kubernetes.io/zone In [zones]` to the pool's requirements before
//! planning, so a plan never picks a zone the launch would fail in.

use std::collections::BTreeMap;

use crate::model::NodePool;
use crate::model::requirements::{NodeSelectorRequirement, Operator};
use crate::model::well_known as wk;

/// The pools with their zones narrowed to their class's subnet zones; a pool whose class
/// is not in `zones_by_class` is left as it is.
pub fn narrow_to_subnet_zones(pools: &mut [NodePool], zones_by_class: &BTreeMap<String, Vec<String>>) {
    for pool in pools {
        let class = &pool.spec.template.spec.node_class_ref.name;
        if let Some(zones) = zones_by_class.get(class) {
            pool.spec.template.spec.requirements.push(NodeSelectorRequirement {
                key: wk::ZONE.to_string(),
                operator: Operator::In,
                values: zones.clone(),
                min_values: None,
            });
        }
    }
}

/// The zones of each class's subnets as its status records them (`status.subnets[].zone`,
/// as Karpenter writes it), by class name; a class whose status names no subnet is left
/// out, so that its pools are not narrowed. A cluster dump has no cloud to ask, and this
/// is what the provisioner's subnet lookup finds for a class Karpenter has resolved.
pub fn zones_by_class_from_status(classes: &[crate::model::EC2NodeClass]) -> BTreeMap<String, Vec<String>> {
    classes
        .iter()
        .filter_map(|c| {
            let subnets = c.status.as_ref()?.get("subnets")?.as_array()?;
            let mut zones: Vec<String> = subnets
                .iter()
                .filter_map(|s| s.get("zone")?.as_str().filter(|z| !z.is_empty()).map(str::to_string))
                .collect();
            zones.sort();
            zones.dedup();
            (!zones.is_empty()).then(|| (c.name().to_string(), zones))
        })
        .collect()
}
