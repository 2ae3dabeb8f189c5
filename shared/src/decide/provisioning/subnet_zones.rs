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
