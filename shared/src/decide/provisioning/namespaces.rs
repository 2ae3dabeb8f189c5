//! The namespaces a pod affinity term covers: its `namespaces` list together with the
//! namespaces its `namespaceSelector` matches (kube-scheduler's
//! `framework.AffinityTerm.Matches`, Karpenter's `Topology.buildNamespaceList`).
//!
//! A selector is resolved here, once, against the namespaces the snapshot knows: those it
//! has Namespace objects for and those its pods are in. A namespace without an object is
//! taken to carry only the `kubernetes.io/metadata.name` label that the apiserver sets on
//! every namespace (see [`Snapshot::namespace_labels`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::decide::provisioning::selector::Selector;
use crate::snapshot::Snapshot;

/// The namespaces of a snapshot, with their labels.
#[derive(Clone, Debug, Default)]
pub struct Namespaces {
    labels: BTreeMap<String, BTreeMap<String, String>>,
}

impl Namespaces {
    /// The namespaces of the snapshot's Namespace objects and of its pods.
    pub fn new(snapshot: &Snapshot) -> Self {
        let names: BTreeSet<&str> = snapshot
            .namespaces
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .chain(
                snapshot
                    .pods
                    .iter()
                    .map(|p| p.metadata.namespace.as_deref().unwrap_or("default")),
            )
            .collect();
        Namespaces {
            labels: names
                .into_iter()
                .map(|n| (n.to_string(), snapshot.namespace_labels(n)))
                .collect(),
        }
    }

    /// The names of the known namespaces whose labels `selector` matches.
    pub fn matching(&self, selector: &Selector) -> BTreeSet<String> {
        self.labels
            .iter()
            .filter(|(_, labels)| selector.matches(labels))
            .map(|(name, _)| name.clone())
            .collect()
    }
}
