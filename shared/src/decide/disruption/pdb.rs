//! PodDisruptionBudgets as a drain sees them: which PDBs cover a pod, and what they allow
//! now, so that a blocked eviction can be explained ("`shop/web` allows 0 disruptions:
//! 2 healthy, 2 desired").
//!
//! The apiserver's eviction subresource and the disruption controller select a PDB's pods
//! the same way: same namespace, the PDB's selector matching the pod's labels. A PDB with
//! no selector selects nothing; an empty selector selects every pod of the namespace
//! (policy/v1). The in-memory `FakeCluster` evicts through [`covers`] too.

use crate::model::pod::Pod;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::{Deserialize, Serialize};

use crate::decide::provisioning::selector::Selector;

/// Whether `pdb` covers `pod`: same namespace (unset is `default`), and the PDB's selector
/// matches the pod's labels. A PDB without a selector, or with one that does not compile,
/// covers nothing.
pub fn covers(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    let namespace = |ns: &Option<String>| ns.clone().unwrap_or_else(|| "default".to_string());
    if namespace(&pdb.metadata.namespace) != namespace(&pod.metadata.namespace) {
        return false;
    }
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    let none = BTreeMap::new();
    Selector::from_k8s(selector).is_ok_and(|s| s.matches(pod.metadata.labels.as_ref().unwrap_or(&none)))
}

/// The status the disruption controller computed for a PDB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStatus {
    /// `status.disruptionsAllowed`: how many of its pods may be evicted now.
    pub disruptions_allowed: i32,
    /// `status.currentHealthy`: its pods Running and Ready.
    pub current_healthy: i32,
    /// `status.desiredHealthy`: how many must stay healthy.
    pub desired_healthy: i32,
    /// `status.expectedPods`: how many pods its controllers want.
    pub expected_pods: i32,
}

/// A PDB that covers a pod, with its status: the explanation of a blocked eviction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PdbBudget {
    /// The PDB's namespace.
    pub namespace: String,
    /// The PDB's name.
    pub name: String,
    /// Its status; `None` while the disruption controller has not computed it.
    pub status: Option<BudgetStatus>,
}

impl PdbBudget {
    /// A PDB and its status as read.
    pub fn of(pdb: &PodDisruptionBudget) -> Self {
        PdbBudget {
            namespace: pdb.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            name: pdb.metadata.name.clone().unwrap_or_default(),
            status: pdb.status.as_ref().map(|s| BudgetStatus {
                disruptions_allowed: s.disruptions_allowed,
                current_healthy: s.current_healthy,
                desired_healthy: s.desired_healthy,
                expected_pods: s.expected_pods,
            }),
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The disruptions it allows now, when its status is known.
    pub fn disruptions_allowed(&self) -> Option<i32> {
        self.status.map(|s| s.disruptions_allowed)
    }
}

impl fmt::Display for PdbBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(
                f,
                "PDB {} allows {} disruption(s): {} healthy, {} desired, {} expected",
                self.key(),
                s.disruptions_allowed,
                s.current_healthy,
                s.desired_healthy,
                s.expected_pods
            ),
            None => write!(f, "PDB {} has no status yet", self.key()),
        }
    }
}

/// The PDBs that cover `pod`, in the order given, with their status. More than one is
/// itself why the apiserver refuses the eviction.
pub fn covering(pod: &Pod, pdbs: &[PodDisruptionBudget]) -> Vec<PdbBudget> {
    pdbs.iter().filter(|b| covers(b, pod)).map(PdbBudget::of).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{PodBuilder, pdb};
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
    use serde_json::json;

    fn web(namespace: &str) -> Pod {
        PodBuilder::new("web-0")
            .namespace(namespace)
            .label("app", "web")
            .pod()
            .unwrap()
    }

    #[test]
    fn a_pdb_covers_the_pods_its_selector_matches_in_its_namespace() {
        let budget = pdb(
            "shop",
            "web",
            json!({"matchLabels": {"app": "web"}}),
            json!({"minAvailable": 1}),
        )
        .unwrap();
        assert!(covers(&budget, &web("shop")));
        assert!(!covers(&budget, &web("other")), "another namespace");
        let other = pdb(
            "shop",
            "api",
            json!({"matchLabels": {"app": "api"}}),
            json!({"minAvailable": 1}),
        )
        .unwrap();
        assert!(!covers(&other, &web("shop")), "another selector");
    }

    /// policy/v1: an empty selector selects every pod of the namespace; no selector, none
    /// (kubernetes `pkg/controller/disruption` `getPodsForPdb`).
    #[test]
    fn an_empty_selector_covers_the_namespace_and_a_missing_one_nothing() {
        let empty = pdb("shop", "all", json!({}), json!({"maxUnavailable": 0})).unwrap();
        assert!(covers(&empty, &web("shop")));
        let mut missing = empty.clone();
        if let Some(spec) = missing.spec.as_mut() {
            spec.selector = None;
        }
        assert!(!covers(&missing, &web("shop")));
    }

    #[test]
    fn a_blocked_pod_is_explained_by_its_pdbs_and_their_status() {
        let mut budget = pdb(
            "shop",
            "web",
            json!({"matchLabels": {"app": "web"}}),
            json!({"minAvailable": 2}),
        )
        .unwrap();
        budget.status = Some(PodDisruptionBudgetStatus {
            disruptions_allowed: 0,
            current_healthy: 2,
            desired_healthy: 2,
            expected_pods: 2,
            ..PodDisruptionBudgetStatus::default()
        });
        let unrelated = pdb(
            "shop",
            "api",
            json!({"matchLabels": {"app": "api"}}),
            json!({"minAvailable": 1}),
        )
        .unwrap();
        let found = covering(&web("shop"), &[unrelated, budget]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].key(), "shop/web");
        assert_eq!(found[0].disruptions_allowed(), Some(0));
        assert_eq!(
            found[0].to_string(),
            "PDB shop/web allows 0 disruption(s): 2 healthy, 2 desired, 2 expected"
        );
    }
}
