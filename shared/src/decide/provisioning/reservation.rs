//! Room kept for the pods of a node being disrupted.
//!
//! When a spot node is interrupted, the interruption function launches its replacement at
//! once, before the drain, sized for that node's pods. The provisioner runs at the same
//! time, and its pods must not take that room, nor may it launch again for the evicted
//! pods once they turn pending (they are recreated by their controllers, a Deployment's
//! under another name).
//!
//! The launch record of a replacement carries a [`Reservation`]. In the planning view,
//! its capacity (the synthetic node of the launch in flight, or the node once registered
//! and still starting) is tainted [`RESERVED_TAINT`]` = <disrupted instance>:NoSchedule`,
//! and the pending pods it was launched for tolerate that taint: the pods by name, and the
//! pods of the same controllers (the ReplicaSet, StatefulSet or Job) by owner. Nobody else
//! is planned there.
//!
//! The taint lives only in the planner's view: on the real node kube-scheduler binds as it
//! will. Once the node has started (past the registration TTL, or its launch record gone)
//! the reservation ends, and its room is anyone's.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Taint, Toleration};

use crate::decide::provisioning::in_flight::in_flight_node_name;
use crate::decide::provisioning::pod::pod_key;
use crate::model::pod::Pod;
use crate::model::well_known::RESERVED_TAINT;
use crate::model::{EpochMillis, LaunchRecord, LaunchState, Reservation};
use crate::snapshot::Snapshot;

/// A pod's controller, as `namespace/Kind/name`: its ownerReference marked `controller`.
pub fn owner_key(pod: &Pod) -> Option<String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("{namespace}/{}/{}", o.kind, o.name))
}

/// The reservation of a replacement for `pods`, the pods of the disrupted instance.
pub fn reservation_for(disrupted: &str, pods: &[&Pod]) -> Reservation {
    let owners: BTreeSet<String> = pods.iter().filter_map(|p| owner_key(p)).collect();
    Reservation {
        disrupted: disrupted.to_string(),
        pods: pods.iter().map(|p| pod_key(p)).collect(),
        owners: owners.into_iter().collect(),
    }
}

fn taint(disrupted: &str) -> Taint {
    Taint {
        key: RESERVED_TAINT.into(),
        value: Some(disrupted.to_string()),
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

fn toleration(disrupted: &str) -> Toleration {
    Toleration {
        key: Some(RESERVED_TAINT.into()),
        operator: Some("Equal".into()),
        value: Some(disrupted.to_string()),
        effect: Some("NoSchedule".into()),
        toleration_seconds: None,
    }
}

/// Whether a pod is one a reservation was made for.
fn reserved_for(pod: &Pod, reservation: &Reservation) -> bool {
    reservation.pods.contains(&pod_key(pod))
        || owner_key(pod).is_some_and(|o| reservation.owners.binary_search(&o).is_ok())
}

/// Keeps the reserved capacity of `launches` in `view` (whose nodes are already the
/// [capacity view](crate::decide::provisioning::in_flight::capacity_view)) for the pods it was launched for:
/// taints it, and lets those pods alone tolerate the taint. A reservation lasts while its
/// launch is in flight, or registered and younger than the registration TTL.
pub fn keep_reserved(view: &mut Snapshot, launches: &[LaunchRecord], now: EpochMillis, registration_ttl_ms: i64) {
    // The node name of each reserved launch's capacity, and the instance it replaces.
    let mut reserved: BTreeMap<String, &Reservation> = BTreeMap::new();
    let mut by_instance: BTreeMap<&str, &Reservation> = BTreeMap::new();
    for launch in launches {
        let Some(reservation) = &launch.reserved_for else {
            continue;
        };
        if now.saturating_sub(launch.launched_at) >= registration_ttl_ms {
            continue;
        }
        match &launch.state {
            LaunchState::InFlight => {
                reserved.insert(in_flight_node_name(&launch.id), reservation);
                if let Some(id) = launch.instance_id.as_deref() {
                    by_instance.insert(id, reservation);
                }
            }
            LaunchState::Registered { node } => {
                reserved.insert(node.clone(), reservation);
            }
            LaunchState::Failed { .. } => {}
        }
    }
    if reserved.is_empty() && by_instance.is_empty() {
        return;
    }
    let mut used: Vec<&Reservation> = Vec::new();
    for node in &mut view.nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let instance = crate::model::node::node_instance_id(node).map(str::to_string);
        let reservation = reserved
            .get(&name)
            .copied()
            .or_else(|| instance.as_deref().and_then(|i| by_instance.get(i).copied()));
        let Some(reservation) = reservation else {
            continue;
        };
        let spec = node.spec.get_or_insert_with(Default::default);
        spec.taints
            .get_or_insert_with(Vec::new)
            .push(taint(&reservation.disrupted));
        used.push(reservation);
    }
    for pod in &mut view.pods {
        let tolerate: Vec<&str> = used
            .iter()
            .filter(|r| reserved_for(pod, r))
            .map(|r| r.disrupted.as_str())
            .collect();
        if tolerate.is_empty() {
            continue;
        }
        let spec = pod.spec.get_or_insert_with(Default::default);
        let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
        // Idempotent: a view kept from an earlier round already has them.
        for t in tolerate.into_iter().map(toleration) {
            if !tolerations.contains(&t) {
                tolerations.push(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::decide::provisioning::in_flight::capacity_view;
    use crate::decide::provisioning_plan;
    use crate::fixtures::{EC2NodeClassBuilder, NodePoolBuilder, PodBuilder, launch_record};
    use crate::model::CapacityType;
    use crate::model::manifest::from_value;

    fn pod(name: &str, replica_set: &str) -> Pod {
        PodBuilder::pending_web(name, "1", "1Gi")
            .owner("apps/v1", "ReplicaSet", replica_set)
            .pod()
            .unwrap()
    }

    fn snapshot(pods: Vec<Pod>) -> Snapshot {
        Snapshot {
            pods,
            nodepools: vec![from_value(&NodePoolBuilder::new("default").build()).unwrap()],
            nodeclasses: vec![from_value(&EC2NodeClassBuilder::standard().build()).unwrap()],
            ..Snapshot::default()
        }
    }

    fn replacement(pods: &[&Pod]) -> LaunchRecord {
        LaunchRecord {
            reserved_for: Some(reservation_for("i-spot", pods)),
            instance_type: "m5.xlarge".into(),
            ..launch_record("disrupt-i-spot-0", Some("i-od"), 1_000, CapacityType::OnDemand)
        }
    }

    fn view(pods: Vec<Pod>, launches: &[LaunchRecord], now: EpochMillis) -> Snapshot {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        let mut view = snapshot(pods);
        view.nodes = capacity_view(&view, launches, &region, now, 900_000);
        keep_reserved(&mut view, launches, now, 900_000);
        view
    }

    fn plan(view: &Snapshot) -> crate::decide::ProvisioningPlan {
        let catalog = Catalog::embedded().unwrap();
        let region = catalog.region("us-east-1").unwrap();
        provisioning_plan(view, &region)
    }

    #[test]
    fn an_evicted_pod_recreated_under_another_name_is_planned_on_its_reserved_replacement() {
        let evicted = pod("web-abc", "web-7d9");
        let launches = [replacement(&[&evicted])];
        // The ReplicaSet recreated it as web-xyz: same controller, new name.
        let plan = plan(&view(vec![pod("web-xyz", "web-7d9")], &launches, 2_000));
        assert!(plan.nodes.is_empty(), "no launch for the evicted pod: {:?}", plan.nodes);
        assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    }

    #[test]
    fn another_pending_pod_does_not_get_the_room_reserved_for_the_evicted_ones() {
        let evicted = pod("web-abc", "web-7d9");
        let launches = [replacement(&[&evicted])];
        let plan = plan(&view(vec![pod("batch-1", "batch-55")], &launches, 2_000));
        assert_eq!(plan.nodes.len(), 1, "the stranger gets a node of its own: {plan:?}");
        assert_eq!(plan.nodes[0].pods, vec!["web/batch-1".to_string()]);
    }

    #[test]
    fn a_reservation_ends_with_the_registration_ttl() {
        let evicted = pod("web-abc", "web-7d9");
        let launches = [replacement(&[&evicted])];
        let view = view(vec![pod("batch-1", "batch-55")], &launches, 1_000 + 900_000);
        let reserved = view
            .nodes
            .iter()
            .flat_map(|n| n.spec.iter().flat_map(|s| s.taints.iter().flatten()))
            .any(|t| t.key == RESERVED_TAINT);
        assert!(!reserved, "no reserved taint past the TTL");
    }

    #[test]
    fn the_owner_key_is_the_controller_reference() {
        assert_eq!(
            owner_key(&pod("web-abc", "web-7d9")).as_deref(),
            Some("web/ReplicaSet/web-7d9")
        );
        let bare = PodBuilder::pending_web("bare", "1", "1Gi").pod().unwrap();
        assert_eq!(owner_key(&bare), None);
    }
}
