//! The workload's pods: what each Deployment or Job asks of its pods ([`Shape`]), the pods
//! the simulated controllers keep ([`SimPod`]), and their Kubernetes objects, as the
//! apiserver would hold them, for Carpool's runs and for the independent checker.

use std::collections::BTreeMap;

use carpool::model::Resources;
use carpool::model::pod::Pod;
use serde_json::{Value, json};

use super::scenario::{GPU, Pdb, PodTemplate, Scenario};

/// A Deployment's or Job's pods, all alike.
#[derive(Clone, Debug)]
pub struct Shape {
    /// The workload's name (the `app` label).
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// What each pod requests (one pod slot included).
    pub requests: Resources,
    /// The constraints.
    pub template: PodTemplate,
    /// Its PDB.
    pub pdb: Option<Pdb>,
    /// A Job's pods run this long once bound.
    pub run_seconds: Option<f64>,
}

impl Shape {
    /// The shapes of a scenario: its Deployments, then its Jobs.
    pub fn all(scenario: &Scenario) -> Result<Vec<Shape>, String> {
        let mut out = Vec::new();
        for d in &scenario.deployments {
            out.push(Shape {
                name: d.name.clone(),
                namespace: d.namespace.clone(),
                requests: d.pod.requests.resources()?,
                template: d.pod.clone(),
                pdb: d.pdb.clone(),
                run_seconds: None,
            });
        }
        for j in &scenario.jobs {
            out.push(Shape {
                name: j.name.clone(),
                namespace: j.namespace.clone(),
                requests: j.pod.requests.resources()?,
                template: j.pod.clone(),
                pdb: None,
                run_seconds: Some(j.duration_minutes * 60.0),
            });
        }
        Ok(out)
    }

    /// Whether the PDB lets this many of `expected` pods be unhealthy: the healthy pods it
    /// needs (`desiredHealthy`, as the disruption controller computes it, percentages
    /// rounded up).
    pub fn desired_healthy(&self, expected: i64) -> Option<i64> {
        let pdb = self.pdb.as_ref()?;
        let scaled = |v: &Value| -> i64 {
            match v {
                Value::Number(n) => n.as_i64().unwrap_or(0),
                Value::String(s) => {
                    let pct: i64 = s.trim_end_matches('%').trim().parse().unwrap_or(0);
                    (pct * expected + 99) / 100
                }
                _ => 0,
            }
        };
        Some(match (&pdb.max_unavailable, &pdb.min_available) {
            (Some(max), _) => (expected - scaled(max)).max(0),
            (None, Some(min)) => scaled(min),
            (None, None) => 0,
        })
    }
}

/// A pod of the simulation.
#[derive(Clone, Debug)]
pub struct SimPod {
    /// `namespace/name`.
    pub key: String,
    /// Its name.
    pub name: String,
    /// Its shape.
    pub shape: usize,
    /// The Job slot it runs for, if a Job's.
    pub slot: Option<usize>,
    /// When it was created (seconds of the simulation).
    pub created: f64,
    /// Its node, once bound.
    pub node: Option<String>,
    /// When it was bound.
    pub bound_at: Option<f64>,
}

/// `2026-12-01T00:00:00Z` plus `seconds`.
pub fn timestamp(start: jiff::Timestamp, seconds: f64) -> String {
    let at = start
        .checked_add(jiff::SignedDuration::from_secs_f64(seconds.max(0.0)))
        .unwrap_or(start);
    at.round(jiff::TimestampRound::new().smallest(jiff::Unit::Second))
        .unwrap_or(at)
        .to_string()
}

/// The pod as the apiserver holds it: pending (unschedulable, as kube-scheduler marks a
/// pod it could not place) or bound to `node`, Running and Ready.
pub fn pod_json(pod: &SimPod, shape: &Shape, start: jiff::Timestamp) -> Value {
    let t = &shape.template;
    let mut requests =
        json!({"cpu": format!("{}m", shape.requests.cpu_millis), "memory": shape.requests.memory.to_string()});
    let gpu = shape.requests.get(GPU);
    if gpu > 0 {
        requests[GPU] = json!(gpu.to_string());
    }
    let mut spec = json!({"containers": [{"name": "main", "image": "registry.example/app", "resources": {"requests": requests.clone(), "limits": if gpu > 0 { json!({GPU: gpu.to_string()}) } else { json!({}) }}}]});
    if !t.node_selector.is_empty() {
        spec["nodeSelector"] = json!(t.node_selector);
    }
    if !t.tolerations.is_empty() {
        spec["tolerations"] = Value::Array(
            t.tolerations
                .iter()
                .map(|tol| {
                    let mut v = json!({"key": tol.key});
                    if let Some(op) = &tol.operator {
                        v["operator"] = json!(op);
                    }
                    if let Some(val) = &tol.value {
                        v["value"] = json!(val);
                    }
                    if let Some(e) = &tol.effect {
                        v["effect"] = json!(e);
                    }
                    v
                })
                .collect(),
        );
    }
    let own = json!({"matchLabels": {"app": shape.name}});
    let mut affinity = serde_json::Map::new();
    if !t.node_affinity.is_empty() {
        let exprs: Vec<Value> = t
            .node_affinity
            .iter()
            .map(|r| json!({"key": r.key, "operator": r.operator, "values": r.values}))
            .collect();
        affinity.insert(
            "nodeAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}),
        );
    }
    if let Some(key) = &t.anti_affinity {
        affinity.insert(
            "podAntiAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": own, "topologyKey": key}]}),
        );
    }
    if !affinity.is_empty() {
        spec["affinity"] = Value::Object(affinity);
    }
    if !t.spread.is_empty() {
        spec["topologySpreadConstraints"] = Value::Array(
            t.spread
                .iter()
                .map(|s| json!({"maxSkew": s.max_skew, "topologyKey": s.topology_key, "whenUnsatisfiable": s.when_unsatisfiable, "labelSelector": own}))
                .collect(),
        );
    }
    let owner = if shape.run_seconds.is_some() {
        json!({"apiVersion": "batch/v1", "kind": "Job", "name": shape.name, "uid": format!("uid-{}", shape.name), "controller": true})
    } else {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{}-rs", shape.name), "uid": format!("uid-{}", shape.name), "controller": true})
    };
    let mut annotations = BTreeMap::new();
    if t.do_not_disrupt {
        annotations.insert("karpenter.sh/do-not-disrupt", "true");
    }
    let status = match (&pod.node, pod.bound_at) {
        (Some(node), at) => {
            spec["nodeName"] = json!(node);
            let at = timestamp(start, at.unwrap_or(pod.created));
            json!({"phase": "Running", "startTime": at, "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": at},
                {"type": "Ready", "status": "True", "lastTransitionTime": at}]})
        }
        (None, _) => json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "lastTransitionTime": timestamp(start, pod.created)}]}),
    };
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": pod.name, "namespace": shape.namespace, "uid": format!("uid-{}", pod.key),
            "labels": {"app": shape.name}, "annotations": annotations,
            "creationTimestamp": timestamp(start, pod.created), "ownerReferences": [owner]},
        "spec": spec, "status": status})
}

/// [`pod_json`] read as a Pod.
pub fn pod_object(pod: &SimPod, shape: &Shape, start: jiff::Timestamp) -> Option<Pod> {
    serde_json::from_value(pod_json(pod, shape, start)).ok()
}

/// The PDB object of a shape, if it has one.
pub fn pdb_json(shape: &Shape) -> Option<Value> {
    let pdb = shape.pdb.as_ref()?;
    let mut spec = json!({"selector": {"matchLabels": {"app": shape.name}}});
    if let Some(v) = &pdb.min_available {
        spec["minAvailable"] = v.clone();
    }
    if let Some(v) = &pdb.max_unavailable {
        spec["maxUnavailable"] = v.clone();
    }
    Some(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": shape.name, "namespace": shape.namespace}, "spec": spec}))
}
