//! An in-memory cluster that applies the apiserver's eviction rule.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Taint, Toleration};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;

use super::FakeClock;
use super::Injected;
use crate::decide::disruption::drain::grace;
use crate::decide::disruption::pdb::covers;
use crate::model::manifest::{Validate, from_value};
use crate::model::pod::Pod;
use crate::model::well_known::TERMINATION_FINALIZER;
use crate::model::{EC2NodeClass, NodeOverlay, NodePool};
use crate::ports::{
    Clock, Cluster, ClusterError, Eviction, InvalidObject, MetadataPatch, PodEvent, PodRef, StatusOf, Validated,
};

/// The apiserver's message for an eviction a PDB blocks.
pub const PDB_BLOCKS: &str = "Cannot evict pod as it would violate the pod's disruption budget.";
/// The apiserver's message for a pod that more than one PDB covers.
pub const SEVERAL_PDBS: &str =
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

/// An error to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterErrorKind {
    /// `ClusterError::NotFound`.
    NotFound,
    /// `ClusterError::Conflict`.
    Conflict,
    /// `ClusterError::Throttled`.
    Throttled,
    /// `ClusterError::Unauthorized`.
    Unauthorized,
    /// `ClusterError::Api`.
    Api,
}

type Key = (String, String);

#[derive(Debug, Default)]
struct State {
    pods: BTreeMap<Key, Pod>,
    nodes: BTreeMap<String, Node>,
    pdbs: BTreeMap<Key, PodDisruptionBudget>,
    /// Evictions each PDB allowed: the evicted pods still count as expected, as the
    /// disruption controller counts them while their controller replaces them.
    disrupted: BTreeMap<Key, i32>,
    daemonsets: BTreeMap<Key, DaemonSet>,
    deployments: BTreeMap<Key, k8s_openapi::api::apps::v1::Deployment>,
    replica_sets: BTreeMap<Key, k8s_openapi::api::apps::v1::ReplicaSet>,
    pvs: BTreeMap<String, PersistentVolume>,
    pvcs: BTreeMap<Key, PersistentVolumeClaim>,
    storage_classes: BTreeMap<String, StorageClass>,
    csinodes: BTreeMap<String, CSINode>,
    namespaces: BTreeMap<String, Namespace>,
    nodepools: BTreeMap<String, serde_json::Value>,
    ec2nodeclasses: BTreeMap<String, serde_json::Value>,
    nodeoverlays: BTreeMap<String, serde_json::Value>,
    capacity_buffers: BTreeMap<String, serde_json::Value>,
    pod_templates: Vec<k8s_openapi::api::core::v1::PodTemplate>,
    /// Events published, in order.
    events: Vec<PodEvent>,
    /// The PersistentVolumes attached to each node (its VolumeAttachments).
    attachments: BTreeMap<String, BTreeSet<String>>,
    /// When set, an evicted pod shuts down for its grace period, as a kubelet lets it:
    /// it stays, `deletionTimestamp` set to the eviction's time plus its grace period,
    /// until this clock passes that time ([`FakeCluster::with_kubelet`]).
    kubelet: Option<Arc<FakeClock>>,
}

/// A cluster in memory: pods, nodes, PDBs, DaemonSets, PersistentVolumes and their
/// claims, StorageClasses, CSINodes, Namespaces, NodePools and EC2NodeClasses.
///
/// It records every call, can be told to fail the next calls (or the next call of a
/// given name, [`FakeCluster::fail_on`]), and evicts as the
/// apiserver does: a pod covered by one PDB (same namespace, selector matching its
/// labels) is evicted only while the PDB allows a disruption, computed from `minAvailable`
/// or `maxUnavailable` (integers or percentages) against the healthy (Running and Ready)
/// pods the selector matches. An evicted pod is removed at once (no kubelet, no
/// replacement) and still counts as expected for its PDB, so each eviction decrements
/// the disruptions allowed. `pdbs()` returns the PDBs with that status filled in.
/// Published Events are kept, in order ([`FakeCluster::events`]).
#[derive(Debug, Default)]
pub struct FakeCluster {
    state: Mutex<State>,
    calls: Mutex<Vec<String>>,
    fail_next: Mutex<Vec<ClusterErrorKind>>,
    fail_on: Mutex<Vec<(String, ClusterErrorKind)>>,
    fail_events: Mutex<Option<ClusterErrorKind>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn key(namespace: Option<&String>, name: Option<&String>) -> Key {
    (
        namespace.cloned().unwrap_or_else(|| "default".to_string()),
        name.cloned().unwrap_or_default(),
    )
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Running, Ready and not terminating: what the disruption controller counts as healthy.
fn healthy(pod: &Pod) -> bool {
    phase(pod) == "Running"
        && pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `value` of `total` (an integer, or a percentage rounded up, as the controller does).
fn scaled(value: &IntOrString, total: i32) -> i32 {
    match value {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => {
            let pct: i64 = s.trim_end_matches('%').trim().parse().unwrap_or(0);
            let scaled = (pct * i64::from(total) + 99) / 100;
            i32::try_from(scaled).unwrap_or(i32::MAX)
        }
    }
}

impl State {
    fn budget(&self, k: &Key, pdb: &PodDisruptionBudget) -> PodDisruptionBudgetStatus {
        let matching: Vec<&Pod> = self
            .pods
            .values()
            .filter(|p| !matches!(phase(p), "Succeeded" | "Failed") && covers(pdb, p))
            .collect();
        let current = i32::try_from(matching.iter().filter(|p| healthy(p)).count()).unwrap_or(i32::MAX);
        let expected = i32::try_from(matching.len())
            .unwrap_or(i32::MAX)
            .saturating_add(self.disrupted.get(k).copied().unwrap_or(0));
        let spec = pdb.spec.clone().unwrap_or_default();
        let desired = match (&spec.max_unavailable, &spec.min_available) {
            (Some(max), _) => (expected - scaled(max, expected)).max(0),
            (None, Some(min)) => scaled(min, expected),
            (None, None) => 0,
        };
        PodDisruptionBudgetStatus {
            current_healthy: current,
            desired_healthy: desired,
            disruptions_allowed: (current - desired).max(0),
            expected_pods: expected,
            observed_generation: pdb.metadata.generation,
            ..PodDisruptionBudgetStatus::default()
        }
    }

    fn node_mut(&mut self, name: &str) -> Result<&mut Node, ClusterError> {
        self.nodes.get_mut(name).ok_or_else(|| ClusterError::NotFound {
            what: format!("node {name}"),
            source: None,
        })
    }

    /// The pod `k` leaves: at once, or, with a kubelet, once its grace period has run.
    fn terminate(&mut self, k: &Key) {
        let Some(clock) = &self.kubelet else {
            self.pods.remove(k);
            return;
        };
        let now = clock.now();
        if let Some(pod) = self.pods.get_mut(k)
            && pod.metadata.deletion_timestamp.is_none()
        {
            let grace = grace(pod);
            pod.metadata.deletion_timestamp = Some(crate::model::time::kube_time(now + grace));
            pod.metadata.deletion_grace_period_seconds = Some(i64::try_from(grace.as_secs()).unwrap_or(i64::MAX));
        }
    }

    /// Removes the pods whose grace period has run (with a kubelet).
    fn reap(&mut self) {
        let Some(clock) = &self.kubelet else { return };
        let now = clock.now();
        self.pods.retain(|_, p| {
            p.metadata
                .deletion_timestamp
                .as_ref()
                .is_none_or(|t| SystemTime::from(t.0) > now)
        });
    }

    fn evict(&mut self, k: Key) -> Eviction {
        let Some(pod) = self.pods.get(&k) else {
            return Eviction::Gone;
        };
        let ignores_pdbs =
            matches!(phase(pod), "Pending" | "Succeeded" | "Failed") || pod.metadata.deletion_timestamp.is_some();
        let covering: Vec<(&Key, &PodDisruptionBudget)> = self.pdbs.iter().filter(|(_, b)| covers(b, pod)).collect();
        if ignores_pdbs || covering.is_empty() {
            self.terminate(&k);
            return Eviction::Evicted;
        }
        let [(pdb_key, pdb)] = covering.as_slice() else {
            return Eviction::Blocked {
                reason: SEVERAL_PDBS.to_string(),
            };
        };
        let status = self.budget(pdb_key, pdb);
        if !healthy(pod) {
            // An unhealthy pod does not count against the budget when the budget is met
            // (`IfHealthyBudget`, the default) or always (`AlwaysAllow`).
            let policy = pdb
                .spec
                .as_ref()
                .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref());
            if policy == Some("AlwaysAllow") || status.current_healthy >= status.desired_healthy {
                self.terminate(&k);
                return Eviction::Evicted;
            }
        }
        if status.disruptions_allowed > 0 {
            let pdb_key = (*pdb_key).clone();
            *self.disrupted.entry(pdb_key).or_insert(0) += 1;
            self.terminate(&k);
            return Eviction::Evicted;
        }
        Eviction::Blocked {
            reason: PDB_BLOCKS.to_string(),
        }
    }
}

fn validated<T: DeserializeOwned + Validate>(objects: &BTreeMap<String, serde_json::Value>) -> Validated<T> {
    let mut out = Validated::default();
    for (name, value) in objects {
        match from_value::<T>(value) {
            Ok(o) => out.valid.push(o),
            Err(e) => out.invalid.push(InvalidObject {
                name: name.clone(),
                reason: e.to_string(),
            }),
        }
    }
    out
}

fn object_name(value: &serde_json::Value) -> String {
    value["metadata"]["name"].as_str().unwrap_or_default().to_string()
}

fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

fn apply(map: &mut Option<BTreeMap<String, String>>, patch: &MetadataPatch) {
    let map = map.get_or_insert_with(BTreeMap::new);
    for (k, v) in patch {
        match v {
            Some(v) => map.insert(k.clone(), v.clone()),
            None => map.remove(k),
        };
    }
}

impl FakeCluster {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cluster with a kubelet on every node: an evicted pod shuts down for its
    /// grace period (`terminationGracePeriodSeconds`, 30 s unless set) by `clock`, as the
    /// local stack's kwok stage `pod-terminate` keeps it, before it is gone.
    #[must_use]
    pub fn with_kubelet(self, clock: Arc<FakeClock>) -> Self {
        lock(&self.state).kubelet = Some(clock);
        self
    }

    /// Attaches PersistentVolume `pv` to `node` (a VolumeAttachment).
    pub fn attach_volume(&self, node: &str, pv: &str) {
        lock(&self.state)
            .attachments
            .entry(node.to_string())
            .or_default()
            .insert(pv.to_string());
    }

    /// Detaches `pv` from `node` (the attach-detach controller's deletion).
    pub fn detach_volume(&self, node: &str, pv: &str) {
        if let Some(pvs) = lock(&self.state).attachments.get_mut(node) {
            pvs.remove(pv);
        }
    }

    /// Adds or replaces a pod (its namespace defaults to `default`).
    pub fn add_pod(&self, pod: Pod) {
        let k = key(pod.metadata.namespace.as_ref(), pod.metadata.name.as_ref());
        lock(&self.state).pods.insert(k, pod);
    }

    /// Removes every pod (the workload scaled to zero, or finished).
    pub fn clear_pods(&self) {
        lock(&self.state).pods.clear();
    }

    /// Adds or replaces a node.
    pub fn add_node(&self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        lock(&self.state).nodes.insert(name, node);
    }

    /// Adds or replaces a PDB; its status is computed, whatever it holds.
    pub fn add_pdb(&self, pdb: PodDisruptionBudget) {
        let k = key(pdb.metadata.namespace.as_ref(), pdb.metadata.name.as_ref());
        let mut state = lock(&self.state);
        state.disrupted.remove(&k);
        state.pdbs.insert(k, pdb);
    }

    /// Adds or replaces a Deployment (its namespace defaults to `default`).
    pub fn add_deployment(&self, deployment: k8s_openapi::api::apps::v1::Deployment) {
        let k = key(
            deployment.metadata.namespace.as_ref(),
            deployment.metadata.name.as_ref(),
        );
        lock(&self.state).deployments.insert(k, deployment);
    }

    /// Adds or replaces a ReplicaSet (its namespace defaults to `default`).
    pub fn add_replica_set(&self, rs: k8s_openapi::api::apps::v1::ReplicaSet) {
        let k = key(rs.metadata.namespace.as_ref(), rs.metadata.name.as_ref());
        lock(&self.state).replica_sets.insert(k, rs);
    }

    /// A Deployment as it is now.
    pub fn deployment_now(&self, namespace: &str, name: &str) -> Option<k8s_openapi::api::apps::v1::Deployment> {
        lock(&self.state)
            .deployments
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Adds or replaces a DaemonSet.
    pub fn add_daemonset(&self, ds: DaemonSet) {
        let k = key(ds.metadata.namespace.as_ref(), ds.metadata.name.as_ref());
        lock(&self.state).daemonsets.insert(k, ds);
    }

    /// Adds or replaces a PersistentVolume.
    pub fn add_pv(&self, pv: PersistentVolume) {
        let name = pv.metadata.name.clone().unwrap_or_default();
        lock(&self.state).pvs.insert(name, pv);
    }

    /// Adds or replaces a PersistentVolumeClaim (its namespace defaults to `default`).
    pub fn add_pvc(&self, pvc: PersistentVolumeClaim) {
        let k = key(pvc.metadata.namespace.as_ref(), pvc.metadata.name.as_ref());
        lock(&self.state).pvcs.insert(k, pvc);
    }

    /// Adds or replaces a StorageClass.
    pub fn add_storage_class(&self, sc: StorageClass) {
        let name = sc.metadata.name.clone().unwrap_or_default();
        lock(&self.state).storage_classes.insert(name, sc);
    }

    /// Adds or replaces a CSINode.
    pub fn add_csinode(&self, csinode: CSINode) {
        let name = csinode.metadata.name.clone().unwrap_or_default();
        lock(&self.state).csinodes.insert(name, csinode);
    }

    /// Adds or replaces a Namespace.
    pub fn add_namespace(&self, namespace: Namespace) {
        let name = namespace.metadata.name.clone().unwrap_or_default();
        lock(&self.state).namespaces.insert(name, namespace);
    }

    /// Adds or replaces a NodePool as the API holds it (JSON), valid or not.
    pub fn add_nodepool(&self, object: serde_json::Value) {
        lock(&self.state).nodepools.insert(object_name(&object), object);
    }

    /// Adds or replaces an EC2NodeClass as the API holds it (JSON), valid or not.
    pub fn add_ec2nodeclass(&self, object: serde_json::Value) {
        lock(&self.state).ec2nodeclasses.insert(object_name(&object), object);
    }

    /// Adds or replaces a NodeOverlay as the API holds it (JSON), valid or not.
    pub fn add_nodeoverlay(&self, object: serde_json::Value) {
        lock(&self.state).nodeoverlays.insert(object_name(&object), object);
    }

    /// Adds (or replaces) a CapacityBuffer, as written (invalid ones are kept, and listed
    /// apart as the apiserver would serve them).
    pub fn add_capacity_buffer(&self, object: serde_json::Value) {
        lock(&self.state).capacity_buffers.insert(object_name(&object), object);
    }

    /// Adds a PodTemplate.
    pub fn add_pod_template(&self, template: k8s_openapi::api::core::v1::PodTemplate) {
        lock(&self.state).pod_templates.push(template);
    }

    /// Removes a pod, as its controller or the kubelet would (a scale-down, a Job's pod
    /// done, a pod whose node is gone); no PDB is consulted.
    pub fn remove_pod(&self, namespace: &str, name: &str) {
        lock(&self.state)
            .pods
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// The pods there are now, as `namespace/name`.
    pub fn pod_keys(&self) -> std::collections::BTreeSet<String> {
        lock(&self.state)
            .pods
            .keys()
            .map(|(ns, name)| format!("{ns}/{name}"))
            .collect()
    }

    /// The evicted pods have been replaced by their controllers: the PDBs count the
    /// replacements from now on, as the disruption controller forgets an evicted pod once
    /// it is gone.
    pub fn settle_disruptions(&self) {
        lock(&self.state).disrupted.clear();
    }

    /// A node as it is now.
    pub fn node(&self, name: &str) -> Option<Node> {
        lock(&self.state).nodes.get(name).cloned()
    }

    /// A pod as it is now.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        lock(&self.state)
            .pods
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// The disruptions a PDB allows now.
    pub fn disruptions_allowed(&self, namespace: &str, pdb: &str) -> Option<i32> {
        let state = lock(&self.state);
        let k = (namespace.to_string(), pdb.to_string());
        state.pdbs.get(&k).map(|p| state.budget(&k, p).disruptions_allowed)
    }

    /// The Events published so far, in order.
    pub fn events(&self) -> Vec<PodEvent> {
        lock(&self.state).events.clone()
    }

    /// The calls made so far, as `method argument`.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.calls).clone()
    }

    /// Makes the next call fail with `kind` (several queue up).
    pub fn fail_next(&self, kind: ClusterErrorKind) {
        lock(&self.fail_next).push(kind);
    }

    /// Makes the next call named `call` (as [`FakeCluster::calls`] lists it, e.g.
    /// `evict shop/web-0`) fail with `kind`, the other calls unchanged (several queue up;
    /// each fails once).
    pub fn fail_on(&self, call: &str, kind: ClusterErrorKind) {
        lock(&self.fail_on).push((call.to_string(), kind));
    }

    /// Makes every `publish_event` fail with `kind` (`None`: publish again), the other
    /// calls unchanged.
    pub fn fail_events(&self, kind: Option<ClusterErrorKind>) {
        *lock(&self.fail_events) = kind;
    }

    fn enter(&self, call: String) -> Result<MutexGuard<'_, State>, ClusterError> {
        lock(&self.calls).push(call.clone());
        let mut failures = lock(&self.fail_next);
        if !failures.is_empty() {
            return Err(injected(failures.remove(0), &call));
        }
        let mut targeted = lock(&self.fail_on);
        if let Some(i) = targeted.iter().position(|(c, _)| *c == call) {
            let (_, kind) = targeted.remove(i);
            return Err(injected(kind, &call));
        }
        let mut state = lock(&self.state);
        state.reap();
        Ok(state)
    }
}

/// The error of an injected `kind` on `call`.
fn injected(kind: ClusterErrorKind, call: &str) -> ClusterError {
    let what = format!("injected on {call}");
    match kind {
        ClusterErrorKind::NotFound => ClusterError::NotFound {
            what,
            source: Some(Injected::boxed()),
        },
        ClusterErrorKind::Conflict => ClusterError::Conflict(what),
        ClusterErrorKind::Throttled => ClusterError::Throttled {
            what,
            source: Injected::boxed(),
        },
        ClusterErrorKind::Unauthorized => ClusterError::Unauthorized {
            what,
            source: Injected::boxed(),
        },
        ClusterErrorKind::Api => ClusterError::Api(what.into()),
    }
}

impl Cluster for FakeCluster {
    async fn pending_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        let state = self.enter("pending_pods".into())?;
        Ok(state
            .pods
            .values()
            .filter(|p| {
                phase(p) == "Pending"
                    && p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_none_or(str::is_empty)
            })
            .cloned()
            .collect())
    }

    async fn nodes(&self) -> Result<Vec<Node>, ClusterError> {
        let state = self.enter("nodes".into())?;
        Ok(state.nodes.values().cloned().collect())
    }

    /// One per call: the fake does not page its lists.
    fn requests_sent(&self) -> u64 {
        lock(&self.calls).len() as u64
    }

    async fn nodes_of_waves(&self, waves: &[String]) -> Result<Vec<Node>, ClusterError> {
        let state = self.enter("nodes".into())?;
        Ok(state
            .nodes
            .values()
            .filter(|n| crate::model::node::in_waves(n, waves))
            .cloned()
            .collect())
    }

    async fn scheduled_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        let state = self.enter("scheduled_pods".into())?;
        Ok(state
            .pods
            .values()
            .filter(|p| {
                !matches!(phase(p), "Succeeded" | "Failed")
                    && p.spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| !n.is_empty())
            })
            .cloned()
            .collect())
    }

    async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        let state = self.enter(format!("pods_on_node {node}"))?;
        Ok(state
            .pods
            .values()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .cloned()
            .collect())
    }

    async fn daemonsets(&self) -> Result<Vec<DaemonSet>, ClusterError> {
        let state = self.enter("daemonsets".into())?;
        Ok(state.daemonsets.values().cloned().collect())
    }

    async fn pdbs(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        let state = self.enter("pdbs".into())?;
        Ok(state
            .pdbs
            .iter()
            .map(|(k, p)| PodDisruptionBudget {
                status: Some(state.budget(k, p)),
                ..p.clone()
            })
            .collect())
    }

    async fn persistent_volumes(&self) -> Result<Vec<PersistentVolume>, ClusterError> {
        let state = self.enter("persistent_volumes".into())?;
        Ok(state.pvs.values().cloned().collect())
    }

    async fn persistent_volume_claims(&self) -> Result<Vec<PersistentVolumeClaim>, ClusterError> {
        let state = self.enter("persistent_volume_claims".into())?;
        Ok(state.pvcs.values().cloned().collect())
    }

    async fn storage_classes(&self) -> Result<Vec<StorageClass>, ClusterError> {
        let state = self.enter("storage_classes".into())?;
        Ok(state.storage_classes.values().cloned().collect())
    }

    async fn csinodes(&self) -> Result<Vec<CSINode>, ClusterError> {
        let state = self.enter("csinodes".into())?;
        Ok(state.csinodes.values().cloned().collect())
    }

    async fn namespaces(&self) -> Result<Vec<Namespace>, ClusterError> {
        let state = self.enter("namespaces".into())?;
        Ok(state.namespaces.values().cloned().collect())
    }

    async fn nodepools(&self) -> Result<Validated<NodePool>, ClusterError> {
        let state = self.enter("nodepools".into())?;
        Ok(validated(&state.nodepools))
    }

    async fn ec2nodeclasses(&self) -> Result<Validated<EC2NodeClass>, ClusterError> {
        let state = self.enter("ec2nodeclasses".into())?;
        Ok(validated(&state.ec2nodeclasses))
    }

    async fn nodeoverlays(&self) -> Result<Validated<NodeOverlay>, ClusterError> {
        let state = self.enter("nodeoverlays".into())?;
        Ok(validated(&state.nodeoverlays))
    }

    async fn capacity_buffers(&self) -> Result<Validated<crate::model::capacity_buffer::CapacityBuffer>, ClusterError> {
        let state = self.enter("capacity_buffers".into())?;
        Ok(validated(&state.capacity_buffers))
    }

    async fn pod_templates(&self) -> Result<Vec<k8s_openapi::api::core::v1::PodTemplate>, ClusterError> {
        let state = self.enter("pod_templates".into())?;
        Ok(state.pod_templates.clone())
    }

    async fn cordon(&self, node: &str) -> Result<(), ClusterError> {
        let mut state = self.enter(format!("cordon {node}"))?;
        state.node_mut(node)?.spec.get_or_insert_default().unschedulable = Some(true);
        Ok(())
    }

    async fn taint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        let mut state = self.enter(format!("taint {node} {}:{}", taint.key, taint.effect))?;
        let taints = state
            .node_mut(node)?
            .spec
            .get_or_insert_default()
            .taints
            .get_or_insert_default();
        match taints.iter_mut().find(|t| same_taint(t, taint)) {
            Some(t) => *t = taint.clone(),
            None => taints.push(taint.clone()),
        }
        Ok(())
    }

    async fn untaint(&self, node: &str, taint: &Taint) -> Result<(), ClusterError> {
        let mut state = self.enter(format!("untaint {node} {}:{}", taint.key, taint.effect))?;
        let spec = state.node_mut(node)?.spec.get_or_insert_default();
        if let Some(taints) = spec.taints.as_mut() {
            taints.retain(|t| !same_taint(t, taint));
        }
        Ok(())
    }

    async fn tolerate(&self, pod: &Pod, toleration: &Toleration) -> Result<(), ClusterError> {
        let k = key(pod.metadata.namespace.as_ref(), pod.metadata.name.as_ref());
        let mut state = self.enter(format!(
            "tolerate {}/{} {}",
            k.0,
            k.1,
            toleration.key.as_deref().unwrap_or("")
        ))?;
        let stored = state.pods.get_mut(&k).ok_or_else(|| ClusterError::NotFound {
            what: format!("pod {}/{}", k.0, k.1),
            source: None,
        })?;
        let listed = pod.spec.as_ref().and_then(|s| s.tolerations.as_ref());
        let tolerations = &mut stored.spec.get_or_insert_default().tolerations;
        if tolerations.as_ref().is_some_and(|t| t.contains(toleration)) {
            return Ok(());
        }
        if tolerations.as_ref() != listed {
            return Err(ClusterError::Conflict(format!(
                "pod {}/{}: tolerations changed since listed",
                k.0, k.1
            )));
        }
        tolerations.get_or_insert_default().push(toleration.clone());
        Ok(())
    }

    async fn evict(&self, pod: &PodRef) -> Result<Eviction, ClusterError> {
        let mut state = self.enter(format!("evict {}", pod.key()))?;
        let k = (pod.namespace.clone(), pod.name.clone());
        if let (Some(uid), Some(listed)) = (&pod.uid, state.pods.get(&k))
            && listed.metadata.uid.as_deref() != Some(uid.as_str())
        {
            // The apiserver's answer to a failed UID precondition: 409.
            return Err(ClusterError::Conflict(format!(
                "pod {}: the UID in the precondition ({uid}) does not match the object's",
                pod.key()
            )));
        }
        Ok(state.evict(k))
    }

    async fn attached_volumes(&self, node: &str) -> Result<Vec<String>, ClusterError> {
        let state = self.enter(format!("attached_volumes {node}"))?;
        Ok(state
            .attachments
            .get(node)
            .map(|pvs| pvs.iter().cloned().collect())
            .unwrap_or_default())
    }

    async fn delete_node(&self, node: &str, uid: &str) -> Result<(), ClusterError> {
        let mut state = self.enter(format!("delete_node {node}"))?;
        if let Some(n) = state.nodes.get(node)
            && n.metadata.uid.as_deref().unwrap_or_default() != uid
        {
            // The apiserver's answer to a failed UID precondition: 409.
            return Err(ClusterError::Conflict(format!(
                "node {node}: the UID in the precondition ({uid}) does not match the object's"
            )));
        }
        let finalized = state
            .nodes
            .get(node)
            .is_some_and(|n| n.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()));
        if finalized {
            // The apiserver marks it for deletion; it goes once its finalizers are removed.
            let now = state.kubelet.as_ref().map_or(SystemTime::UNIX_EPOCH, |c| c.now());
            if let Some(n) = state.nodes.get_mut(node) {
                n.metadata
                    .deletion_timestamp
                    .get_or_insert_with(|| crate::model::time::kube_time(now));
            }
        } else {
            state.nodes.remove(node);
        }
        Ok(())
    }

    async fn add_finalizer(&self, node: &str) -> Result<(), ClusterError> {
        let mut state = self.enter(format!("add_finalizer {node}"))?;
        let finalizers = state.node_mut(node)?.metadata.finalizers.get_or_insert_default();
        if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
            finalizers.push(TERMINATION_FINALIZER.to_string());
        }
        Ok(())
    }

    async fn remove_finalizer(&self, node: &str) -> Result<(), ClusterError> {
        let mut state = self.enter(format!("remove_finalizer {node}"))?;
        let Some(n) = state.nodes.get_mut(node) else {
            return Ok(());
        };
        if let Some(f) = n.metadata.finalizers.as_mut() {
            f.retain(|f| f != TERMINATION_FINALIZER);
        }
        let gone = n.metadata.deletion_timestamp.is_some() && n.metadata.finalizers.as_ref().is_none_or(Vec::is_empty);
        if gone {
            state.nodes.remove(node);
        }
        Ok(())
    }

    async fn write_status(&self, kind: StatusOf, name: &str, status: &serde_json::Value) -> Result<(), ClusterError> {
        let mut state = self.enter(format!("write_status {} {name}", kind.kind()))?;
        let objects = match kind {
            StatusOf::NodePool => &mut state.nodepools,
            StatusOf::EC2NodeClass => &mut state.ec2nodeclasses,
        };
        let Some(object) = objects.get_mut(name) else {
            return Err(ClusterError::NotFound {
                what: format!("{} {name}", kind.kind()),
                source: None,
            });
        };
        // A merge patch of `status`: the fields given replace theirs.
        if !object["status"].is_object() {
            object["status"] = serde_json::json!({});
        }
        if let (Some(current), Some(fields)) = (object["status"].as_object_mut(), status.as_object()) {
            for (k, v) in fields {
                current.insert(k.clone(), v.clone());
            }
        }
        Ok(())
    }

    async fn patch_labels_annotations(
        &self,
        node: &str,
        labels: &MetadataPatch,
        annotations: &MetadataPatch,
    ) -> Result<(), ClusterError> {
        let mut state = self.enter(format!("patch_labels_annotations {node}"))?;
        let meta = &mut state.node_mut(node)?.metadata;
        apply(&mut meta.labels, labels);
        apply(&mut meta.annotations, annotations);
        Ok(())
    }

    async fn publish_event(&self, event: &PodEvent) -> Result<(), ClusterError> {
        let call = format!("publish_event {} {}", event.pod.key(), event.reason);
        let mut state = self.enter(call.clone())?;
        if let Some(kind) = *lock(&self.fail_events) {
            return Err(injected(kind, &call));
        }
        state.events.push(event.clone());
        Ok(())
    }

    async fn replica_set(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::apps::v1::ReplicaSet>, ClusterError> {
        let state = self.enter(format!("replica_set {namespace}/{name}"))?;
        Ok(state
            .replica_sets
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }

    async fn deployment(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::apps::v1::Deployment>, ClusterError> {
        let state = self.enter(format!("deployment {namespace}/{name}"))?;
        Ok(state
            .deployments
            .get(&(namespace.to_string(), name.to_string()))
            .cloned())
    }

    /// Sets the annotations, bumps `generation` and `resourceVersion`, and leaves the
    /// status as it was: the rollout is under way until a test settles it.
    async fn restart_deployment(
        &self,
        restart: &crate::model::rollout_restart::RolloutRestart,
    ) -> Result<(), ClusterError> {
        use crate::model::rollout_restart::{RESTARTED_AT, SURGED_FOR};
        let mut state = self.enter(format!("restart_deployment {}", restart.key()))?;
        let k = (restart.namespace.clone(), restart.name.clone());
        let Some(d) = state.deployments.get_mut(&k) else {
            return Err(ClusterError::NotFound {
                what: format!("deployment {}", restart.key()),
                source: None,
            });
        };
        let version = d.metadata.resource_version.clone().unwrap_or_default();
        if !restart.resource_version.is_empty() && restart.resource_version != version {
            return Err(ClusterError::Conflict(format!(
                "deployment {}: at version {version}, not {}",
                restart.key(),
                restart.resource_version
            )));
        }
        d.metadata
            .annotations
            .get_or_insert_default()
            .insert(SURGED_FOR.into(), restart.for_pod.clone());
        d.spec
            .get_or_insert_default()
            .template
            .metadata
            .get_or_insert_default()
            .annotations
            .get_or_insert_default()
            .insert(RESTARTED_AT.into(), restart.restarted_at.clone());
        d.metadata.generation = Some(d.metadata.generation.unwrap_or(0) + 1);
        d.metadata.resource_version = Some((version.parse::<u64>().unwrap_or(0) + 1).to_string());
        Ok(())
    }
}
