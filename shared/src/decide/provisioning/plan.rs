//! The provisioning plan: a value, printed by the CLI and executed by the provisioner.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::decide::provisioning::templates::Skipped;
use crate::decide::provisioning::unschedulable::{Kind, Reason};
use crate::model::{CapacityType, Resources};

/// Alternatives carried per node for CreateFleet flexibility.
pub const MAX_ALTERNATIVES: usize = 60;

/// A node to launch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedNode {
    /// The NodePool it belongs to.
    pub nodepool: String,
    /// The cheapest instance type that fits its pods.
    pub instance_type: String,
    /// Every instance type that fits its pods and constraints, cheapest first (at most 60),
    /// starting with `instance_type`.
    pub instance_types: Vec<String>,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// USD per hour of `instance_type` in this zone and capacity type.
    pub price_per_hour: f64,
    /// The pods planned onto it, as `namespace/name`.
    pub pods: Vec<String>,
    /// The pods' total requests.
    pub requests: Resources,
    /// What the DaemonSets that land on it request.
    pub daemonset_overhead: Resources,
    /// Allocatable of `instance_type`.
    pub allocatable: Resources,
    /// The labels the node is launched with, beyond those its instance type, zone and
    /// capacity type decide: the NodePool's template labels, `karpenter.sh/nodepool`, and
    /// the value chosen for each requirement on a key that only the NodePool defines.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// Pods planned onto a node that exists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExistingPlacement {
    /// The node name.
    pub node: String,
    /// The pods, as `namespace/name`.
    pub pods: Vec<String>,
}

/// A pod no node can take, and why.
///
/// In JSON: `pod`, `kind` (the last reason's, see [`Unschedulable::kind`]), `reason` (the
/// message, [`Unschedulable::reason`]) and `reasons` (each with its `kind` and data). Only
/// `pod` and `reasons` are read back; the rest follows from them.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Unschedulable {
    /// `namespace/name`.
    pub pod: String,
    /// Why: one reason per NodePool and relaxation level that refused the pod, the most
    /// relaxed level's last; never empty.
    pub reasons: Vec<Reason>,
}

impl Unschedulable {
    /// A pod unschedulable for one reason.
    pub fn new(pod: impl Into<String>, reason: Reason) -> Self {
        Unschedulable {
            pod: pod.into(),
            reasons: vec![reason],
        }
    }

    /// The kind of the last reason: the constraint that failed at the most relaxed level
    /// tried.
    pub fn kind(&self) -> Kind {
        self.reasons.last().map_or(Kind::NoNodePool, Reason::kind)
    }

    /// Whether any reason is of `kind`.
    pub fn has(&self, kind: Kind) -> bool {
        self.reasons.iter().any(|r| r.kind() == kind)
    }

    /// The message: the reasons, separated by `; `.
    pub fn reason(&self) -> String {
        let texts: Vec<String> = self.reasons.iter().map(Reason::to_string).collect();
        texts.join("; ")
    }
}

impl Serialize for Unschedulable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("Unschedulable", 4)?;
        s.serialize_field("pod", &self.pod)?;
        s.serialize_field("kind", &self.kind())?;
        s.serialize_field("reason", &self.reason())?;
        s.serialize_field("reasons", &self.reasons)?;
        s.end()
    }
}

/// What to launch for the pending pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvisioningPlan {
    /// New nodes.
    pub nodes: Vec<PlannedNode>,
    /// Pods placed on existing nodes.
    pub existing: Vec<ExistingPlacement>,
    /// Pods that cannot be placed.
    pub unschedulable: Vec<Unschedulable>,
    /// NodePools and EC2NodeClasses left out, and why.
    pub skipped: Vec<Skipped>,
    /// Total USD per hour of the new nodes.
    pub cost_per_hour: f64,
    /// A lower bound on the USD per hour of any valid plan placing the same pods on new
    /// nodes, when computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lower_bound_per_hour: Option<f64>,
    /// Zones a new node was not planned in because its EC2NodeClass's subnets there had
    /// too few free IP addresses, once per NodePool and zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones_passed_over: Vec<ZonePassedOver>,
}

/// A zone passed over for a new node: its subnets lack the addresses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZonePassedOver {
    /// The NodePool.
    pub nodepool: String,
    /// The zone.
    pub zone: String,
    /// The free addresses left in its subnet with the most, when it was passed over.
    pub available: i64,
    /// What the node and its pods needed.
    pub needed: i64,
}

impl ZonePassedOver {
    /// The reason, for people.
    pub fn reason(&self) -> String {
        format!(
            "zone {} passed over for NodePool {}: its subnets have {} free IP address(es), a node there needs {}",
            self.zone, self.nodepool, self.available, self.needed
        )
    }
}

impl ProvisioningPlan {
    /// Records that `zone` was passed over for a node of `nodepool` (the first time only).
    pub fn pass_over_zone(&mut self, nodepool: &str, zone: &str, available: i64, needed: i64) {
        if !self
            .zones_passed_over
            .iter()
            .any(|z| z.nodepool == nodepool && z.zone == zone)
        {
            self.zones_passed_over.push(ZonePassedOver {
                nodepool: nodepool.to_string(),
                zone: zone.to_string(),
                available,
                needed,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::provisioning::unschedulable::Shortfall;

    #[test]
    fn an_unschedulable_pod_round_trips_with_its_kind_and_message_beside_its_reasons() {
        let plan = ProvisioningPlan {
            unschedulable: vec![Unschedulable {
                pod: "default/web-0".into(),
                reasons: vec![
                    Reason::Limits { nodepool: "a".into() },
                    Reason::Resources {
                        nodepool: "b".into(),
                        shortfall: Shortfall::NotPlaced,
                    },
                ],
            }],
            ..ProvisioningPlan::default()
        };
        let json = serde_json::to_value(&plan).unwrap();
        let u = &json["unschedulable"][0];
        assert_eq!(u["kind"], "resources");
        assert_eq!(
            u["reason"],
            "limits: NodePool a has no room for another node under its limits; \
             resources: NodePool b could not place the pod on a new node"
        );
        assert_eq!(u["reasons"][0]["kind"], "limits");
        assert_eq!(serde_json::from_value::<ProvisioningPlan>(json).unwrap(), plan);
    }
}
