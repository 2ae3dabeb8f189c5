//! One planned node's launch: recorded in the state store before CreateFleet (so a crash
//! after the call leaves a record, and the instance its launch-id tag, for housekeeping),
//! CreateFleet, then the record updated with the instance or marked failed, and the
//! outcome the batch acts on. A call whose outcome is unknown (a timeout, a 5xx after the
//! request was sent) leaves the record in flight: it counts as capacity, and housekeeping
//! resolves it through the launch-id tag (or fails it after a short grace).
//!
//! The provisioner's batch launches its planned nodes here, and [`replace`] launches the
//! replacement of a node that is going away, for the interruption function and the
//! consolidator, through the same path.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use futures_util::{StreamExt, stream};

pub mod replace;

use crate::catalog::RegionCatalog;
use crate::decide::PlannedNode;
use crate::decide::disruption::drift::{HASH_VERSION, template_hash};
use crate::decide::provisioning::templates::pool_labels;
use crate::decide::waves::wave::{HELD, wave_taint};
use crate::model::well_known as wk;
use crate::model::well_known::NODEPOOL_HASH as HASH_KEY;
use crate::model::well_known::WAVE_LABEL;
use crate::model::{EC2NodeClass, NodePool};
use crate::ports::{
    Cloud, CloudError, Cluster, EpochMillis, LaunchRecord, LaunchRequest, LaunchState, Reservation, StateStore, Timer,
    UnavailableOffering, epoch_millis,
};
use crate::run::provision::report::{LaunchFailure, Launched};
use crate::run::provision::{ProvisionError, Provisioner};
use crate::snapshot::Snapshot;

/// How long an offering that ran out of capacity is left out (Karpenter's ICE cache TTL).
pub const UNAVAILABLE_FOR: Duration = Duration::from_secs(180);

/// CreateFleet calls in flight at once: every planned node is launched concurrently, in
/// waves of this many, under EC2's request-rate limits for mutating calls.
pub const LAUNCH_CONCURRENCY: usize = 16;

/// `insufficient capacity for m5.large, c5.large and 58 more in us-east-1a (spot)`.
fn capacity_message(offerings: &[UnavailableOffering]) -> String {
    let Some(first) = offerings.first() else {
        return "insufficient capacity".into();
    };
    let names: Vec<&str> = offerings.iter().take(3).map(|o| o.instance_type.as_str()).collect();
    let more = offerings.len().saturating_sub(3);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "insufficient capacity for {}{more} in {} ({})",
        names.join(", "),
        first.zone,
        first.capacity_type.label()
    )
}

/// The launch request for a planned node of `pool` (found in `snapshot` with its class),
/// held back with the launch wave's taint when `in_wave`.
///
/// Nothing of the batch goes into the request's labels and taints, which the EC2 adapter
/// writes into the user data of a launch template named by its content: every wave's node
/// registers [`HELD`] alike, and the wave is named on the node once it has registered
/// ([`crate::decide::waves::wave::joins`]). So the launch templates are bounded by the
/// NodePools, classes and capacity types in use, however many batches launch.
pub fn launch_request(
    launch_id: &str,
    deployment: &str,
    node: &PlannedNode,
    pool: Option<&NodePool>,
    snapshot: &Snapshot,
    in_wave: bool,
) -> LaunchRequest {
    // The planned node's labels carry the values chosen for the NodePool's custom keys
    // (Karpenter's `NodeClaimTemplate.ToNodeClaim` labels the NodeClaim with them).
    let mut labels = pool.map(pool_labels).unwrap_or_default();
    labels.extend(node.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels.insert(wk::NODEPOOL.into(), node.nodepool.clone());
    labels.insert(wk::CAPACITY_TYPE.into(), node.capacity_type.label().to_string());
    let class_name = pool.map(|p| p.spec.template.spec.node_class_ref.name.clone());
    if let Some(class) = &class_name {
        labels.insert(wk::EC2NODECLASS.into(), class.clone());
    }
    let node_class = class_name
        .and_then(|name| snapshot.nodeclasses.iter().find(|c| c.name() == name).cloned())
        .unwrap_or_else(|| EC2NodeClass::named("default"));
    // What the consolidator's drift compares with the NodePool and class as they are later.
    if let Some(p) = pool {
        labels.insert(HASH_KEY.into(), template_hash(p, Some(&node_class)));
        labels.insert(wk::NODEPOOL_HASH_VERSION.into(), HASH_VERSION.into());
    }
    let mut request = LaunchRequest {
        launch_id: launch_id.to_string(),
        deployment: deployment.to_string(),
        nodepool: node.nodepool.clone(),
        node_class,
        instance_types: node.instance_types.clone(),
        zone: node.zone.clone(),
        capacity_type: node.capacity_type,
        labels,
        taints: pool.map(|p| p.spec.template.spec.taints.clone()).unwrap_or_default(),
        startup_taints: pool
            .map(|p| p.spec.template.spec.startup_taints.clone())
            .unwrap_or_default(),
    };
    if in_wave {
        request.startup_taints.push(wave_taint(HELD));
        request.labels.insert(WAVE_LABEL.into(), HELD.into());
    }
    request
}

/// The launch wave a batch's nodes belong to ([`crate::decide::waves::wave`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wave {
    /// Its id, the value of the wave taint.
    pub id: String,
    /// When the taint comes off whatever the wave's state.
    pub release_by: EpochMillis,
}

/// The outcome of one planned node's launch.
pub(crate) enum LaunchOutcome {
    /// Launched: what the report says, and the record as stored.
    Launched(Box<(Launched, LaunchRecord)>),
    /// No capacity: the offerings to leave out, and the failure to report. The record is
    /// removed, as the node is re-planned.
    OutOfCapacity(Vec<UnavailableOffering>, LaunchFailure),
    /// Any other failure; the record is marked failed.
    Failed(LaunchFailure),
    /// The call may have launched an instance: the failure to report, and the record as
    /// stored, still in flight (it counts as capacity until housekeeping resolves it).
    Unknown(Box<(LaunchFailure, LaunchRecord)>),
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Launches every planned node, [`LAUNCH_CONCURRENCY`] at a time, at `at`; the
    /// outcomes in the nodes' order.
    #[allow(clippy::too_many_arguments)] // the batch's context, passed through as is
    pub(crate) async fn launch_all(
        &self,
        nodes: &[PlannedNode],
        snapshot: &Snapshot,
        region: &RegionCatalog<'_>,
        at: SystemTime,
        created: &BTreeMap<String, EpochMillis>,
        reservation: Option<&Reservation>,
        wave: Option<&Wave>,
    ) -> Vec<Result<LaunchOutcome, ProvisionError>> {
        stream::iter(
            nodes
                .iter()
                .map(|node| self.launch(node, snapshot, region, at, created, reservation, wave)),
        )
        .buffered(LAUNCH_CONCURRENCY)
        .collect()
        .await
    }

    /// Records, launches and records again one planned node, at `at`, its room reserved
    /// for `reservation`'s pods when given, held back with `wave`'s taint when given.
    /// Store errors end the batch; cloud errors are outcomes.
    #[allow(clippy::too_many_arguments)] // the batch's context, passed through as is
    pub(crate) async fn launch(
        &self,
        node: &PlannedNode,
        snapshot: &Snapshot,
        region: &RegionCatalog<'_>,
        at: SystemTime,
        created: &BTreeMap<String, EpochMillis>,
        reservation: Option<&Reservation>,
        wave: Option<&Wave>,
    ) -> Result<LaunchOutcome, ProvisionError> {
        let launch_id = self.next_launch_id();
        let pool = snapshot.nodepools.iter().find(|p| p.name() == node.nodepool);
        let request = launch_request(
            &launch_id,
            &self.settings.deployment,
            node,
            pool,
            snapshot,
            wave.is_some(),
        );
        let failure = |error: String| LaunchFailure {
            nodepool: node.nodepool.clone(),
            instance_type: node.instance_type.clone(),
            zone: node.zone.clone(),
            capacity_type: node.capacity_type,
            error,
        };
        // Nothing that could break out of the user data's syntax reaches the cloud.
        if let Err(e) = request.check_labels_and_taints() {
            let message = format!("not launched: a label or taint of the node is invalid: {e}");
            tracing::error!(launch_id = %launch_id, nodepool = %node.nodepool, error = %message, "launch refused");
            return Ok(LaunchOutcome::Failed(failure(message)));
        }
        // Recorded before CreateFleet: a crash after the call leaves a record (and the
        // instance its launch-id tag) for housekeeping to follow up.
        let record = LaunchRecord {
            id: launch_id.clone(),
            instance_id: None,
            nodepool: node.nodepool.clone(),
            instance_type: node.instance_type.clone(),
            zone: node.zone.clone(),
            capacity_type: node.capacity_type,
            pods: node.pods.clone(),
            launched_at: epoch_millis(at),
            state: LaunchState::InFlight,
            reserved_for: reservation.cloned(),
            labels: request.labels.clone(),
            wave: wave.map(|w| w.id.clone()),
            release_by: wave.map(|w| w.release_by),
            version: 0,
        };
        let record = self.ports.store.create_launch(&record).await?;
        match self.ports.cloud.launch(&request).await {
            Ok(instance) => {
                let mut updated = record.clone();
                updated.instance_id = Some(instance.id.clone());
                updated.instance_type.clone_from(&instance.instance_type);
                updated.zone.clone_from(&instance.zone);
                updated.capacity_type = instance.capacity_type;
                let updated = self.ports.store.update_launch(&updated).await?;
                let price = region
                    .types()
                    .iter()
                    .find(|t| t.name == instance.instance_type)
                    .and_then(|it| region.prices().price(it, &instance.zone, instance.capacity_type))
                    .unwrap_or(node.price_per_hour);
                // The longest any of its pods waited, from creation to this CreateFleet.
                let max_pending_ms = node
                    .pods
                    .iter()
                    .filter_map(|p| created.get(p))
                    .map(|&t| epoch_millis(at).saturating_sub(t))
                    .max()
                    .unwrap_or(0);
                tracing::info!(
                    launch_id = %launch_id, instance_id = %instance.id, nodepool = %node.nodepool,
                    instance_type = %instance.instance_type, zone = %instance.zone,
                    capacity_type = %instance.capacity_type.label(), price_per_hour = price,
                    pod_count = node.pods.len(), pods = %node.pods.join(","), max_pending_ms,
                    "launched"
                );
                Ok(LaunchOutcome::Launched(Box::new((
                    Launched {
                        launch_id,
                        instance_id: instance.id,
                        nodepool: node.nodepool.clone(),
                        instance_type: instance.instance_type,
                        zone: instance.zone,
                        capacity_type: instance.capacity_type,
                        price_per_hour: price,
                        pods: node.pods.len(),
                    },
                    updated,
                ))))
            }
            Err(CloudError::InsufficientCapacity { offerings }) => {
                self.ports.store.delete_launch(&launch_id).await?;
                let until = epoch_millis(at + UNAVAILABLE_FOR);
                let mut unavailable: Vec<UnavailableOffering> = offerings
                    .iter()
                    .map(|o| UnavailableOffering {
                        instance_type: o.instance_type.clone(),
                        zone: o.zone.clone(),
                        capacity_type: o.capacity_type,
                        until,
                        reclaimed: false,
                    })
                    .collect();
                if unavailable.is_empty() {
                    // The cloud named no offering: every one tried is out.
                    unavailable = node
                        .instance_types
                        .iter()
                        .map(|t| UnavailableOffering {
                            instance_type: t.clone(),
                            zone: node.zone.clone(),
                            capacity_type: node.capacity_type,
                            until,
                            reclaimed: false,
                        })
                        .collect();
                }
                let message = capacity_message(&unavailable);
                tracing::warn!(launch_id = %launch_id, nodepool = %node.nodepool, zone = %node.zone,
                    capacity_type = %node.capacity_type.label(), error = %message, "launch: insufficient capacity; re-planning");
                Ok(LaunchOutcome::OutOfCapacity(unavailable, failure(message)))
            }
            Err(e) if e.is_outcome_unknown() => {
                let message = e.to_string();
                tracing::warn!(launch_id = %launch_id, nodepool = %node.nodepool, error = %message,
                    "launch outcome unknown; the record stays in flight, to be resolved by its launch-id tag");
                Ok(LaunchOutcome::Unknown(Box::new((failure(message), record))))
            }
            Err(e) => {
                let message = crate::error_chain::Chain(&e).to_string();
                tracing::error!(launch_id = %launch_id, nodepool = %node.nodepool, error = %message, "launch failed");
                let mut failed = record;
                failed.state = LaunchState::Failed {
                    reason: message.clone(),
                };
                self.ports.store.update_launch(&failed).await?;
                Ok(LaunchOutcome::Failed(failure(message)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::manifest::from_yaml;
    use crate::model::{CapacityType, Resources};

    // Karpenter: pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go `ToNodeClaim`
    // labels the NodeClaim with the template's labels and the values resolved for its custom
    // keys; the kubelet registers the node with them.
    #[test]
    fn a_launch_carries_the_planned_nodes_labels_with_its_custom_values_and_nothing_of_its_batch() {
        let pool: NodePool = from_yaml(
            r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: teams}
spec:
  template:
    metadata: {labels: {tier: web}}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: web}
      requirements:
      - {key: company.com/team, operator: In, values: [a, b]}
"#,
        )
        .unwrap();
        let mut snapshot = Snapshot::default();
        snapshot.nodepools.push(pool.clone());
        let node = PlannedNode {
            nodepool: "teams".into(),
            instance_type: "m5.large".into(),
            instance_types: vec!["m5.large".into()],
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::Spot,
            price_per_hour: 0.03,
            pods: vec!["default/web-0".into()],
            requests: Resources::default(),
            daemonset_overhead: Resources::default(),
            allocatable: Resources::default(),
            labels: BTreeMap::from([
                ("company.com/team".to_string(), "b".to_string()),
                ("tier".to_string(), "web".to_string()),
            ]),
        };
        let r = launch_request("l-1", "test", &node, Some(&pool), &snapshot, false);
        let label = |k: &str| r.labels.get(k).map(String::as_str);
        assert_eq!(label("company.com/team"), Some("b"));
        assert_eq!(label("tier"), Some("web"));
        assert_eq!(label(wk::NODEPOOL), Some("teams"));
        assert_eq!(label(wk::EC2NODECLASS), Some("web"));
        assert_eq!(label(wk::CAPACITY_TYPE), Some("spot"));
        assert_eq!(label(WAVE_LABEL), None, "not in a wave");
        // In a wave, the node registers held, and nothing of its batch is in the request:
        // two batches' launches differ only by their launch ids.
        let first = launch_request("run-1-1", "test", &node, Some(&pool), &snapshot, true);
        let second = launch_request("run-7-3", "test", &node, Some(&pool), &snapshot, true);
        assert_eq!(first.labels.get(WAVE_LABEL).map(String::as_str), Some(HELD));
        assert!(first.startup_taints.contains(&wave_taint(HELD)));
        assert_eq!(
            LaunchRequest {
                launch_id: String::new(),
                ..first
            },
            LaunchRequest {
                launch_id: String::new(),
                ..second
            }
        );
    }
}
