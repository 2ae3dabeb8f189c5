//! Bottlerocket's user data: TOML settings (`settings.kubernetes.*`), merged with the
//! EC2NodeClass's `userData` as Karpenter merges them (`Bottlerocket.Script` in
//! aws/karpenter-provider-aws `pkg/providers/amifamily/bootstrap/bottlerocket.go`): the
//! class's TOML is kept, and the settings the node needs to join override it: the cluster's
//! name, API server and CA, the NodePool's labels (added to the class's) and taints (added
//! to the class's), and the class's kubelet settings (`maxPods`, `clusterDNS`, reserved
//! resources, hard evictions). Written with `toml_edit`, which keeps the class's document
//! (comments, order) as it was.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use toml_edit::{Array, DocumentMut, Item, Table, TableLike, value};

use crate::cluster_info::ClusterInfo;
use carpool::model::kubelet::KubeletConfiguration;

/// What is wrong with the class's `userData`, read as Bottlerocket settings.
#[derive(Debug, thiserror::Error)]
pub enum BottlerocketError {
    /// It is not TOML.
    #[error("the EC2NodeClass's userData is not Bottlerocket TOML")]
    NotToml(#[source] toml_edit::TomlError),
    /// A key Carpool sets holds a value where Bottlerocket expects a table.
    #[error("the EC2NodeClass's userData sets {0} to a value, not a table")]
    NotATable(String),
}

/// The table at `path`, made if missing; an error where the class's TOML has a value there.
fn table<'a>(doc: &'a mut DocumentMut, path: &[&str]) -> Result<&'a mut dyn TableLike, BottlerocketError> {
    let mut t: &mut dyn TableLike = doc.as_table_mut();
    for (i, key) in path.iter().enumerate() {
        t = t
            .entry(key)
            .or_insert(Item::Table(Table::new()))
            .as_table_like_mut()
            .ok_or_else(|| BottlerocketError::NotATable(path[..=i].join(".")))?;
    }
    Ok(t)
}

/// The Bottlerocket user data of a node of `cluster` with these labels, taints and kubelet
/// settings, over the class's own TOML `user_data`.
pub fn settings(
    cluster: &ClusterInfo,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    kubelet: Option<&KubeletConfiguration>,
    user_data: Option<&str>,
) -> Result<String, BottlerocketError> {
    let mut doc: DocumentMut = user_data
        .unwrap_or_default()
        .parse()
        .map_err(BottlerocketError::NotToml)?;
    let k8s = table(&mut doc, &["settings", "kubernetes"])?;
    k8s.insert("cluster-name", value(cluster.name.as_str()));
    k8s.insert("api-server", value(cluster.endpoint.as_str()));
    k8s.insert("cluster-certificate", value(cluster.ca_base64.as_str()));
    if let Some(k) = kubelet {
        if let Some(dns) = k.cluster_dns.first() {
            k8s.insert("cluster-dns-ip", value(dns.as_str()));
        }
        if let Some(max_pods) = k.max_pods {
            k8s.insert("max-pods", value(i64::from(max_pods)));
        }
    }
    for (key, map) in kubelet
        .map(|k| {
            let quantities = |m: &BTreeMap<String, carpool::model::Quantity>| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            };
            vec![
                ("kube-reserved", quantities(&k.kube_reserved)),
                ("system-reserved", quantities(&k.system_reserved)),
                ("eviction-hard", k.eviction_hard.clone()),
            ]
        })
        .unwrap_or_default()
    {
        if map.is_empty() {
            continue;
        }
        let t = table(&mut doc, &["settings", "kubernetes", key])?;
        for (k, v) in map {
            t.insert(&k, value(v));
        }
    }
    let node_labels = table(&mut doc, &["settings", "kubernetes", "node-labels"])?;
    for (k, v) in labels {
        node_labels.insert(k, value(v.as_str()));
    }
    let node_taints = table(&mut doc, &["settings", "kubernetes", "node-taints"])?;
    for t in taints {
        let entry = format!("{}:{}", t.value.as_deref().unwrap_or_default(), t.effect);
        let values = node_taints.entry(&t.key).or_insert(value(Array::new())).as_array_mut();
        match values {
            Some(a) if !a.iter().any(|v| v.as_str() == Some(entry.as_str())) => a.push(entry),
            Some(_) => {}
            // The class set this key to something else: Carpool's taint wins, as its
            // labels do.
            None => {
                node_taints.insert(&t.key, value(Array::from_iter([entry])));
            }
        }
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> ClusterInfo {
        ClusterInfo::new("prod", "https://api.example", "Q0E=", "10.100.0.0/16")
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    // As Karpenter's `Bottlerocket.Script` (bootstrap/bottlerocket.go) and its test
    // "should merge custom user data" in bottlerocket_test.go: the class's settings stay,
    // the cluster's are Carpool's, labels and taints are added to the class's.
    #[test]
    fn the_class_settings_stay_and_the_cluster_labels_and_taints_are_carpools() {
        let user = r#"
# the team's settings
[settings.host-containers.admin]
enabled = true

[settings.kubernetes]
cluster-name = "wrong"
node-labels = { team = "web" }
node-taints = { dedicated = ["web:NoSchedule"] }
"#;
        let labels = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "general".to_string())]);
        let kubelet = KubeletConfiguration {
            max_pods: Some(58),
            cluster_dns: vec!["10.100.0.10".into()],
            ..KubeletConfiguration::default()
        };
        let text = settings(
            &cluster(),
            &labels,
            &[taint("gpu", "true", "NoSchedule")],
            Some(&kubelet),
            Some(user),
        )
        .unwrap();
        let doc: DocumentMut = text.parse().unwrap();
        let k = &doc["settings"]["kubernetes"];
        assert_eq!(k["cluster-name"].as_str(), Some("prod"), "{text}");
        assert_eq!(k["api-server"].as_str(), Some("https://api.example"));
        assert_eq!(k["cluster-certificate"].as_str(), Some("Q0E="));
        assert_eq!(k["cluster-dns-ip"].as_str(), Some("10.100.0.10"));
        assert_eq!(k["max-pods"].as_integer(), Some(58));
        assert_eq!(k["node-labels"]["team"].as_str(), Some("web"));
        assert_eq!(k["node-labels"]["karpenter.sh/nodepool"].as_str(), Some("general"));
        assert_eq!(k["node-taints"]["dedicated"][0].as_str(), Some("web:NoSchedule"));
        assert_eq!(k["node-taints"]["gpu"][0].as_str(), Some("true:NoSchedule"));
        assert_eq!(
            doc["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
            Some(true)
        );
        assert!(
            text.contains("# the team's settings"),
            "the class's comments are kept: {text}"
        );
    }

    #[test]
    fn without_user_data_the_settings_are_carpools_alone() {
        let text = settings(&cluster(), &BTreeMap::new(), &[], None, None).unwrap();
        let doc: DocumentMut = text.parse().unwrap();
        assert_eq!(doc["settings"]["kubernetes"]["cluster-name"].as_str(), Some("prod"));
    }

    #[test]
    fn user_data_that_is_not_toml_or_sets_a_table_to_a_value_is_the_classes_error() {
        let not_toml = settings(&cluster(), &BTreeMap::new(), &[], None, Some("#!/bin/bash\necho [x"));
        assert!(matches!(not_toml, Err(BottlerocketError::NotToml(_))), "{not_toml:?}");
        let flat = settings(&cluster(), &BTreeMap::new(), &[], None, Some("settings = 3\n"));
        assert!(
            matches!(&flat, Err(BottlerocketError::NotATable(k)) if k == "settings"),
            "{flat:?}"
        );
    }
}
