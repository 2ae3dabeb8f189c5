//! A node of the snapshot as a topology domain, usable or not: kube-scheduler counts
//! spread domains over every node it knows (Karpenter's `Topology.countDomains`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;

/// A node of the snapshot as a topology domain: its labels (with a hostname) and taints.
pub(super) struct NodeView {
    /// Its labels.
    pub(super) labels: BTreeMap<String, String>,
    /// Its taints.
    pub(super) taints: Vec<Taint>,
}
