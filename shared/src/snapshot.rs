//! A cluster snapshot: the objects `kubectl get ... -o json` (or `-o yaml`) prints, read
//! from one or more texts.
//!
//! Accepted: a `List` (or any `*List`) of items, a single object, a JSON array of objects,
//! and several YAML documents separated by `---`. Kinds read: Pod, Node, DaemonSet,
//! PodDisruptionBudget, PersistentVolume, PersistentVolumeClaim, StorageClass, CSINode,
//! Namespace, NodePool, EC2NodeClass and NodeOverlay; other kinds are ignored.
//!
//! A text that does not parse, or an object of a read kind that does not deserialize, is
//! an error naming the source and the JSON path, except:
//! - a pod that does not deserialize is kept as a bad pod, with the reason, so that one
//!   bad pod does not spoil the rest (the planner reports it as unschedulable);
//! - an invalid NodePool, EC2NodeClass or NodeOverlay is skipped with the reason, and the
//!   others work.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::model::manifest::from_value;
use crate::model::pod::Pod;
use crate::model::{EC2NodeClass, NodeOverlay, NodePool};

/// Everything read from the input.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Pods.
    pub pods: Vec<Pod>,
    /// Pods that could not be read: `namespace/name` and why.
    pub bad_pods: Vec<(String, String)>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// DaemonSets.
    pub daemonsets: Vec<DaemonSet>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<PodDisruptionBudget>,
    /// PersistentVolumes.
    pub pvs: Vec<PersistentVolume>,
    /// PersistentVolumeClaims.
    pub pvcs: Vec<PersistentVolumeClaim>,
    /// StorageClasses.
    pub storage_classes: Vec<StorageClass>,
    /// CSINodes: the volume attach limits of existing nodes, per driver.
    pub csinodes: Vec<CSINode>,
    /// Namespaces, for the labels a pod affinity term's `namespaceSelector` reads. A
    /// snapshot without them knows only the namespaces' names (see [`Snapshot::namespace_labels`]).
    pub namespaces: Vec<Namespace>,
    /// Valid NodePools.
    pub nodepools: Vec<NodePool>,
    /// Valid EC2NodeClasses.
    pub nodeclasses: Vec<EC2NodeClass>,
    /// Valid NodeOverlays (`karpenter.sh/v1alpha1`): the prices the user pays.
    pub nodeoverlays: Vec<NodeOverlay>,
    /// NodePools, EC2NodeClasses and NodeOverlays skipped: `Kind/name` and why.
    pub skipped: Vec<(String, String)>,
    /// Not read from the input but from the cloud, by the run that resolves the classes:
    /// per EC2NodeClass and zone, the free IP addresses of its subnet with the most
    /// ([`crate::model::ResolvedNetwork::free_ips_by_zone`]). Empty for a dump: no zone is
    /// then held back for want of addresses.
    pub free_ips: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u32>>,
}

/// Input that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {path}: {message}")]
pub struct SnapshotError {
    /// The file (or other source) name.
    pub source_name: String,
    /// The JSON path in it, e.g. `items[3].spec.taints[0]`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn object_name(v: &Value) -> String {
    let meta = &v["metadata"];
    let name = meta["name"].as_str().unwrap_or("<unnamed>");
    match meta["namespace"].as_str() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

impl Snapshot {
    /// The labels of a namespace, for a pod affinity term's `namespaceSelector`: the
    /// Namespace object's when the snapshot has it, else only the
    /// `kubernetes.io/metadata.name` label that the apiserver sets on every namespace
    /// (NamespaceDefaultLabelName, GA since Kubernetes 1.22): a dump without Namespace
    /// objects is read as if its namespaces had no labels of their own.
    pub fn namespace_labels(&self, name: &str) -> std::collections::BTreeMap<String, String> {
        let mut labels = self
            .namespaces
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        labels.insert("kubernetes.io/metadata.name".into(), name.into());
        labels
    }

    /// Reads one text (JSON or YAML, one or several documents) into the snapshot.
    pub fn add_text(&mut self, source_name: &str, text: &str) -> Result<(), SnapshotError> {
        let err = |path: String, message: String| SnapshotError {
            source_name: source_name.to_string(),
            path,
            message,
        };
        let trimmed = text.trim_start();
        let documents: Vec<Value> = if trimmed.starts_with('{') || trimmed.starts_with('[') {
            vec![serde_json::from_str(text).map_err(|e| err("(root)".into(), e.to_string()))?]
        } else {
            let mut docs = Vec::new();
            for (i, de) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
                let v: Value = serde_path_to_error::deserialize(de).map_err(|e| {
                    let path = e.path().to_string();
                    err(format!("document {i}: {path}"), e.inner().to_string())
                })?;
                if !v.is_null() {
                    docs.push(v);
                }
            }
            docs
        };
        let multi = documents.len() > 1;
        for (d, doc) in documents.iter().enumerate() {
            let prefix = if multi {
                format!("document {d}: ")
            } else {
                String::new()
            };
            match doc {
                Value::Array(items) => self.add_items(items, &prefix, source_name)?,
                Value::Object(o) if o.get("items").is_some_and(Value::is_array) => {
                    let items = o
                        .get("items")
                        .and_then(Value::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or_default();
                    self.add_items(items, &format!("{prefix}items"), source_name)?;
                }
                Value::Object(_) => self.add_object(doc, &format!("{prefix}(root)"), source_name)?,
                _ => {
                    return Err(err(
                        format!("{prefix}(root)"),
                        "expected a Kubernetes object or List".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    fn add_items(&mut self, items: &[Value], path: &str, source_name: &str) -> Result<(), SnapshotError> {
        for (i, item) in items.iter().enumerate() {
            self.add_object(item, &format!("{path}[{i}]"), source_name)?;
        }
        Ok(())
    }

    fn add_object(&mut self, v: &Value, path: &str, source_name: &str) -> Result<(), SnapshotError> {
        fn typed<T: DeserializeOwned>(v: &Value, path: &str, source_name: &str) -> Result<T, SnapshotError> {
            serde_path_to_error::deserialize(v).map_err(|e| SnapshotError {
                source_name: source_name.to_string(),
                path: format!("{path}.{}", e.path()),
                message: e.inner().to_string(),
            })
        }
        let kind = v["kind"].as_str().unwrap_or_default();
        match kind {
            "Pod" => match typed::<Pod>(v, path, source_name) {
                Ok(p) => self.pods.push(p),
                Err(e) => self
                    .bad_pods
                    .push((object_name(v), format!("{}: {}", e.path, e.message))),
            },
            "Node" => self.nodes.push(typed(v, path, source_name)?),
            "DaemonSet" => self.daemonsets.push(typed(v, path, source_name)?),
            "PodDisruptionBudget" => self.pdbs.push(typed(v, path, source_name)?),
            "PersistentVolume" => self.pvs.push(typed(v, path, source_name)?),
            "PersistentVolumeClaim" => self.pvcs.push(typed(v, path, source_name)?),
            "StorageClass" => self.storage_classes.push(typed(v, path, source_name)?),
            "CSINode" => self.csinodes.push(typed(v, path, source_name)?),
            "Namespace" => self.namespaces.push(typed(v, path, source_name)?),
            "NodePool" => match from_value::<NodePool>(v) {
                Ok(np) => self.nodepools.push(np),
                Err(e) => self
                    .skipped
                    .push((format!("NodePool/{}", object_name(v)), e.to_string())),
            },
            "EC2NodeClass" => match from_value::<EC2NodeClass>(v) {
                Ok(nc) => self.nodeclasses.push(nc),
                Err(e) => self
                    .skipped
                    .push((format!("EC2NodeClass/{}", object_name(v)), e.to_string())),
            },
            "NodeOverlay" => match from_value::<NodeOverlay>(v) {
                Ok(o) => self.nodeoverlays.push(o),
                Err(e) => self
                    .skipped
                    .push((format!("NodeOverlay/{}", object_name(v)), e.to_string())),
            },
            "" => {
                return Err(SnapshotError {
                    source_name: source_name.to_string(),
                    path: format!("{path}.kind"),
                    message: "missing kind; is this kubectl output?".into(),
                });
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubectl_list_and_yaml_documents_both_read() {
        let mut s = Snapshot::default();
        s.add_text(
            "a.json",
            r#"{"apiVersion":"v1","kind":"List","items":[
                {"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default"},"spec":{"containers":[]}},
                {"apiVersion":"v1","kind":"Service","metadata":{"name":"ignored"}}]}"#,
        )
        .unwrap();
        s.add_text(
            "b.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: bad}\nspec: {template: {spec: {nodeClassRef: {group: g, kind: k, name: n}, requirements: [{key: a, operator: Near}]}}}\n",
        )
        .unwrap();
        assert_eq!((s.pods.len(), s.nodes.len(), s.nodepools.len()), (1, 1, 0));
        assert_eq!(s.skipped.len(), 1);
        assert!(s.skipped[0].1.contains("requirements[0].operator"), "{:?}", s.skipped);
    }

    #[test]
    fn a_bad_pod_is_kept_aside_and_a_bad_node_is_an_error_with_its_path() {
        let mut s = Snapshot::default();
        s.add_text("x.json", r#"{"kind":"List","items":[{"kind":"Pod","metadata":{"name":"p","namespace":"ns"},"spec":{"containers":"oops"}}]}"#)
            .unwrap();
        assert_eq!(s.bad_pods[0].0, "ns/p");
        assert!(s.bad_pods[0].1.contains("spec.containers"));
        let err = s
            .add_text(
                "y.json",
                r#"{"kind":"List","items":[{"kind":"Node","metadata":{"name":"n"},"spec":{"taints":7}}]}"#,
            )
            .unwrap_err();
        assert_eq!(err.path, "items[0].spec.taints");
        assert!(err.to_string().starts_with("y.json: items[0].spec.taints: "));
        let err = s.add_text("z.json", "{not json").unwrap_err();
        assert_eq!(err.source_name, "z.json");
    }
}
