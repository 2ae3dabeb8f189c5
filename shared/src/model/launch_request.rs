//! What a launch asks the cloud for: one planned node's types, zone and capacity type.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};

use crate::model::{CapacityType, EC2NodeClass};

/// One instance type in one zone with one capacity type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OfferingKey {
    /// The instance type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
}

/// What to launch for one planned node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchRequest {
    /// The launch id; the instance is tagged with it, so a retried launch can be found.
    pub launch_id: String,
    /// The deployment launching it (`CARPOOL_DEPLOYMENT`); the instance is tagged with it,
    /// and housekeeping terminates only instances that carry this deployment's tag.
    pub deployment: String,
    /// The NodePool.
    pub nodepool: String,
    /// The EC2NodeClass that says how to launch (read from the cluster by this run).
    pub node_class: EC2NodeClass,
    /// The instance types acceptable, cheapest first.
    pub instance_types: Vec<String>,
    /// The zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// Labels the node registers with.
    pub labels: BTreeMap<String, String>,
    /// Taints the node registers with.
    pub taints: Vec<Taint>,
    /// Taints the node starts with, removed by an agent.
    pub startup_taints: Vec<Taint>,
}

impl LaunchRequest {
    /// The capacity reservation a `reserved` launch targets: the one its labels
    /// `karpenter.k8s.aws/capacity-reservation-id` and `-type` name, as the plan set them.
    pub fn capacity_reservation(&self) -> Option<crate::model::ReservationTarget> {
        crate::model::ReservationTarget::from_labels(&self.labels)
    }

    /// Checks that every label and taint the node would register with has the syntax the
    /// apiserver accepts on a Node ([`super::label_syntax`]): they are written into the
    /// node's user data, and nothing else may be. NodePools and pods are checked when they
    /// are read; this is the last check before the cloud.
    pub fn check_labels_and_taints(&self) -> Result<(), super::label_syntax::LabelSyntaxError> {
        for (k, v) in &self.labels {
            super::label_syntax::label(k, v)?;
        }
        self.taints
            .iter()
            .chain(&self.startup_taints)
            .try_for_each(super::label_syntax::taint)
    }
}
