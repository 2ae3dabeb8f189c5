//! Capacity Blocks for ML end at a fixed time: the nodes Carpool launched into one are
//! disrupted as an interruption with a known deadline, before EC2 reclaims them.
//!
//! Karpenter (aws/karpenter-provider-aws `pkg/controllers/capacityreservation/expiration`)
//! deletes the NodeClaims of a capacity block once it is expiring: 40 minutes before its
//! end ([`crate::model::capacity_reservation::CAPACITY_BLOCK_EXPIRATION_LEAD`],
//! `CapacityReservationFromEC2`), "10 minutes
//! before EC2 begins reclaiming the instances", which EC2 does from 30 minutes before the
//! end ([`CAPACITY_BLOCK_RECLAIM_LEAD`]). Carpool starts the same disruption a spot warning
//! starts (taint, replacement, drain by eviction, terminate), from the scheduled sweep,
//! with a hard deadline at the start of EC2's reclaim: the node is drained within those
//! 10 minutes and terminated then, drained or not.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use crate::model::node::node_instance_id;
use crate::model::well_known as wk;
use crate::model::{CapacityReservation, EpochMillis, ReservationTarget, ReservationType};

/// How long before a Capacity Block's end EC2 starts reclaiming its instances: 30 minutes
/// ("Capacity Blocks for ML", Amazon EC2 User Guide; Karpenter's expiration controller).
pub const CAPACITY_BLOCK_RECLAIM_LEAD: Duration = Duration::from_secs(30 * 60);

/// A node of a Capacity Block that is expiring, and when it must be gone by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpiringNode {
    /// The Node's name.
    pub node: String,
    /// Its instance.
    pub instance_id: String,
    /// The Capacity Block's id.
    pub reservation: String,
    /// When EC2 starts reclaiming the block: the drain's hard deadline.
    pub deadline: EpochMillis,
}

fn block_of(node: &Node) -> Option<ReservationTarget> {
    let labels = node.metadata.labels.as_ref()?;
    ReservationTarget::from_labels(labels).filter(|t| t.reservation_type == ReservationType::CapacityBlock)
}

/// The Capacity Blocks the nodes are in (by their `karpenter.k8s.aws/capacity-reservation-*`
/// labels): the ones to look up.
pub fn blocks_in_use(nodes: &[Node]) -> BTreeSet<String> {
    nodes.iter().filter_map(block_of).map(|t| t.id).collect()
}

/// The Carpool nodes (`carpool.sh/managed`) in a Capacity Block of `reservations` that is
/// expiring at `now`, each with its deadline. A node whose block is not among
/// `reservations` (ended, or not found) is left to EC2.
pub fn expiring(nodes: &[Node], reservations: &[CapacityReservation], now: EpochMillis) -> Vec<ExpiringNode> {
    let reclaim = i64::try_from(CAPACITY_BLOCK_RECLAIM_LEAD.as_millis()).unwrap_or(i64::MAX);
    nodes
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.get(wk::CARPOOL_MANAGED).is_some_and(|v| v == "true"))
        })
        .filter_map(|n| {
            let target = block_of(n)?;
            let r = reservations.iter().find(|r| r.id == target.id)?;
            let end = r.end_time?;
            if !r.is_expiring(now) {
                return None;
            }
            Some(ExpiringNode {
                node: n.metadata.name.clone()?,
                instance_id: node_instance_id(n)?.to_string(),
                reservation: r.id.clone(),
                deadline: end.saturating_sub(reclaim).max(now),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::NodeBuilder;

    fn node(name: &str, block: &str, reservation_type: &str) -> Node {
        NodeBuilder::new(name)
            .label(wk::CARPOOL_MANAGED, "true")
            .label(wk::CAPACITY_RESERVATION_ID, block)
            .label(wk::CAPACITY_RESERVATION_TYPE, reservation_type)
            .provider_id(&format!("aws:///us-east-1a/i-{name}"))
            .node()
            .unwrap()
    }

    fn block(id: &str, end: EpochMillis) -> CapacityReservation {
        CapacityReservation {
            id: id.into(),
            instance_type: "p5.48xlarge".into(),
            zone: "us-east-1a".into(),
            owner_id: "123456789012".into(),
            reservation_type: ReservationType::CapacityBlock,
            instance_match_criteria: "targeted".into(),
            available: 0,
            end_time: Some(end),
            synced_at: 0,
        }
    }

    /// aws/karpenter-provider-aws `capacityreservation/expiration` `Controller.Reconcile`:
    /// the nodes of an expiring capacity block go, 40 minutes before its end; an ODCR's
    /// nodes never do.
    #[test]
    fn a_capacity_blocks_nodes_expire_forty_minutes_before_its_end_with_the_reclaim_as_deadline() {
        let end = 10 * 3_600_000;
        let nodes = [node("a", "cr-1", "capacity-block"), node("b", "cr-2", "default")];
        assert_eq!(blocks_in_use(&nodes).into_iter().collect::<Vec<_>>(), ["cr-1"]);
        let blocks = [block("cr-1", end)];
        assert!(expiring(&nodes, &blocks, end - 41 * 60_000).is_empty());
        let got = expiring(&nodes, &blocks, end - 40 * 60_000);
        assert_eq!(
            got,
            [ExpiringNode {
                node: "a".into(),
                instance_id: "i-a".into(),
                reservation: "cr-1".into(),
                deadline: end - 30 * 60_000,
            }]
        );
    }
}
