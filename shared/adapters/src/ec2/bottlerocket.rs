//! Bottlerocket's user data: TOML settings (`settings.kubernetes.*`), merged with the
//! EC2NodeClass's `userData` as Karpenter merges them (`Bottlerocket.Script` in
//! aws/karpenter-provider-aws `pkg/providers/amifamily/bootstrap/bottlerocket.go`): the
//! class's TOML is kept, and the settings the node needs to join override it: the cluster's
//! name, API server and CA, the NodePool's labels (added to the class's) and taints (added
//! to the class's). Written with `toml_edit`, which keeps the class's document (comments,
//! order) as it was.
//!
//! The class's kubelet settings become Bottlerocket's, as `Bottlerocket.Script` maps them:
//! `clusterDNS[0]` → `cluster-dns-ip`, `maxPods` → `max-pods`, `kubeReserved` →
//! `kube-reserved`, `systemReserved` → `system-reserved`, `evictionHard` →
//! `eviction-hard`, `evictionSoft` → `eviction-soft`, `evictionSoftGracePeriod` →
//! `eviction-soft-grace-period`, `evictionMaxPodGracePeriod` →
//! `eviction-max-pod-grace-period`, `imageGCHighThresholdPercent` and
//! `imageGCLowThresholdPercent` → `image-gc-{high,low}-threshold-percent` (strings, as
//! Bottlerocket takes them), `cpuCFSQuota` → `cpu-cfs-quota-enforced`. A map the class sets
//! replaces the userData's table of that name whole, as Karpenter assigns it. Bottlerocket
//! has no pods-per-core setting: Karpenter leaves `podsPerCore` out of a Bottlerocket
//! node's max pods (`PodsPerCoreEnabled: false` in `amifamily/bottlerocket.go`) and
//! refuses such a class (`validateKubeletFieldsSupported` in
//! `controllers/nodeclass/validation.go`).
//!
//! With `instanceStorePolicy: RAID0`, Bottlerocket's bootstrap command
//! `000-mount-instance-storage` runs `apiclient ephemeral-storage init` (a RAID0 array of
//! the instance store volumes) and `apiclient ephemeral-storage bind`, which mounts it
//! under the kubelet's and containerd's directories: with no `--dirs` from Bottlerocket
//! 1.46.0 (which binds its defaults), else with `--dirs /var/lib/containerd
//! /var/lib/kubelet /var/log/pods` (Karpenter's `EnableDefaultMountPaths`, from
//! `version.SupportsDefaultBind`). The version is read from the class's `alias`
//! (`bottlerocket@v1.46.0`, `@latest`) or `name` term (`bottlerocket-aws-k8s-1.33-x86_64-v1.46.0-…`);
//! when neither says, the explicit `--dirs` form, which every version runs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use toml_edit::{Array, DocumentMut, Item, Table, TableLike, value};

use crate::cluster_info::ClusterInfo;
use carpool::catalog::allocatable::INSTANCE_STORE_RAID0;
use carpool::model::EC2NodeClass;
use carpool::model::kubelet::KubeletConfiguration;

/// The bootstrap command that mounts a RAID0 instance store (Karpenter's name).
pub const MOUNT_INSTANCE_STORAGE: &str = "000-mount-instance-storage";

/// The directories a Bottlerocket older than 1.46.0 is told to bind the instance store to.
pub const BIND_DIRS: [&str; 3] = ["/var/lib/containerd", "/var/lib/kubelet", "/var/log/pods"];

/// How a Bottlerocket node binds its RAID0 instance store (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EphemeralBind {
    /// `apiclient ephemeral-storage bind`: Bottlerocket 1.46.0 and later.
    Default,
    /// `apiclient ephemeral-storage bind --dirs …` ([`BIND_DIRS`]).
    Dirs,
}

/// Whether a Bottlerocket version binds its default directories (`v1.46.0` and later, or
/// `latest`), as Karpenter's `version.SupportsDefaultBind`.
pub fn supports_default_bind(version: &str) -> bool {
    if version == "latest" {
        return true;
    }
    let mut parts = version.trim_start_matches('v').split('.');
    let (Some(major), Some(minor), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    match (major.parse::<u32>(), minor.parse::<u32>()) {
        (Ok(major), Ok(minor)) => major > 1 || (major == 1 && minor >= 46),
        _ => false,
    }
}

/// The Bottlerocket version a class's AMI selector terms name: an alias's
/// (`bottlerocket@v1.46.0`), else the `v…` part of a name term's AMI name
/// (Karpenter's `getVersionFromAlias`, `getVersionFromName`).
pub fn ami_version(node_class: &EC2NodeClass) -> Option<&str> {
    let terms = &node_class.spec.ami_selector_terms;
    terms
        .iter()
        .find_map(|t| t.alias.as_deref()?.split_once('@').map(|(_, v)| v))
        .or_else(|| {
            terms.iter().find_map(|t| {
                t.name
                    .as_deref()?
                    .split('-')
                    .find(|p| p.starts_with('v') && p.contains('.'))
            })
        })
}

/// How a class's nodes bind the instance store: `None` without `instanceStorePolicy:
/// RAID0`.
pub fn raid0_bind(node_class: &EC2NodeClass) -> Option<EphemeralBind> {
    (node_class.spec.instance_store_policy.as_deref() == Some(INSTANCE_STORE_RAID0)).then(|| {
        if ami_version(node_class).is_some_and(supports_default_bind) {
            EphemeralBind::Default
        } else {
            EphemeralBind::Dirs
        }
    })
}

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
/// settings, and, with `raid0`, the bootstrap command that mounts the instance store, over
/// the class's own TOML `user_data`.
pub fn settings(
    cluster: &ClusterInfo,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    kubelet: Option<&KubeletConfiguration>,
    raid0: Option<EphemeralBind>,
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
        if let Some(n) = k.eviction_max_pod_grace_period {
            k8s.insert("eviction-max-pod-grace-period", value(i64::from(n)));
        }
        // Strings, as Bottlerocket's settings take them (Karpenter's `strconv.FormatInt`).
        if let Some(n) = k.image_gc_high_threshold_percent {
            k8s.insert("image-gc-high-threshold-percent", value(n.to_string()));
        }
        if let Some(n) = k.image_gc_low_threshold_percent {
            k8s.insert("image-gc-low-threshold-percent", value(n.to_string()));
        }
        if let Some(b) = k.cpu_cfs_quota {
            k8s.insert("cpu-cfs-quota-enforced", value(b));
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
                ("eviction-soft", k.eviction_soft.clone()),
                ("eviction-soft-grace-period", k.eviction_soft_grace_period.clone()),
            ]
        })
        .unwrap_or_default()
    {
        if map.is_empty() {
            continue;
        }
        // The class's map replaces the userData's whole, as Karpenter assigns it.
        table(&mut doc, &["settings", "kubernetes"])?.remove(key);
        let t = table(&mut doc, &["settings", "kubernetes", key])?;
        for (k, v) in map {
            t.insert(&k, value(v));
        }
    }
    if let Some(bind) = raid0 {
        let mut bind_command = Array::from_iter(["apiclient", "ephemeral-storage", "bind"]);
        if bind == EphemeralBind::Dirs {
            bind_command.push("--dirs");
            bind_command.extend(BIND_DIRS);
        }
        let commands = Array::from_iter([
            Array::from_iter(["apiclient", "ephemeral-storage", "init"]),
            bind_command,
        ]);
        let mut command = Table::new();
        command.insert("commands", value(commands));
        command.insert("mode", value("always"));
        command.insert("essential", value(true));
        table(&mut doc, &["settings", "bootstrap-commands"])?.insert(MOUNT_INSTANCE_STORAGE, Item::Table(command));
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
            None,
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

    // `Bottlerocket.Script` (bootstrap/bottlerocket.go) maps every kubelet field it knows
    // into `settings.kubernetes` (bottlerocketsettings.go names them): the image GC
    // thresholds as strings (`strconv.FormatInt`), `CPUCFSQuota` as
    // `cpu-cfs-quota-enforced`, and a map set in the class replaces the userData's.
    #[test]
    fn every_kubelet_field_becomes_its_bottlerocket_setting_and_a_class_map_replaces_the_user_datas() {
        let q = |s: &str| s.parse::<carpool::model::Quantity>().unwrap();
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let kubelet = KubeletConfiguration {
            cluster_dns: vec!["10.0.0.10".into()],
            max_pods: Some(58),
            pods_per_core: Some(20),
            system_reserved: BTreeMap::from([("cpu".into(), q("100m"))]),
            kube_reserved: BTreeMap::from([("cpu".into(), q("250m")), ("memory".into(), q("1Gi"))]),
            eviction_hard: map(&[("memory.available", "200Mi"), ("nodefs.available", "15%")]),
            eviction_soft: map(&[("memory.available", "500Mi")]),
            eviction_soft_grace_period: map(&[("memory.available", "1m30s")]),
            eviction_max_pod_grace_period: Some(60),
            image_gc_high_threshold_percent: Some(80),
            image_gc_low_threshold_percent: Some(60),
            cpu_cfs_quota: Some(false),
            other: Default::default(),
        };
        let user = "[settings.kubernetes.kube-reserved]\nephemeral-storage = \"5Gi\"\n";
        let text = settings(&cluster(), &BTreeMap::new(), &[], Some(&kubelet), None, Some(user)).unwrap();
        let doc: DocumentMut = text.parse().unwrap();
        let k = &doc["settings"]["kubernetes"];
        assert_eq!(k["cluster-dns-ip"].as_str(), Some("10.0.0.10"), "{text}");
        assert_eq!(k["max-pods"].as_integer(), Some(58));
        assert_eq!(k["system-reserved"]["cpu"].as_str(), Some("100m"));
        assert_eq!(k["kube-reserved"]["cpu"].as_str(), Some("250m"));
        assert_eq!(k["kube-reserved"]["memory"].as_str(), Some("1Gi"));
        assert!(
            k["kube-reserved"].get("ephemeral-storage").is_none(),
            "the class's kubeReserved replaces the userData's: {text}"
        );
        assert_eq!(k["eviction-hard"]["memory.available"].as_str(), Some("200Mi"));
        assert_eq!(k["eviction-hard"]["nodefs.available"].as_str(), Some("15%"));
        assert_eq!(k["eviction-soft"]["memory.available"].as_str(), Some("500Mi"));
        assert_eq!(
            k["eviction-soft-grace-period"]["memory.available"].as_str(),
            Some("1m30s")
        );
        assert_eq!(k["eviction-max-pod-grace-period"].as_integer(), Some(60));
        assert_eq!(k["image-gc-high-threshold-percent"].as_str(), Some("80"));
        assert_eq!(k["image-gc-low-threshold-percent"].as_str(), Some("60"));
        assert_eq!(k["cpu-cfs-quota-enforced"].as_bool(), Some(false));
        // Bottlerocket has no pods-per-core setting.
        assert!(!text.contains("pods-per-core"), "{text}");
        assert!(doc["settings"].get("bootstrap-commands").is_none(), "{text}");
    }

    // `Bottlerocket.Script`: `InstanceStorePolicy == RAID0` adds the bootstrap command
    // `000-mount-instance-storage` (`apiclient ephemeral-storage init`, then `bind`, with
    // `--dirs` unless `EnableDefaultMountPaths`), essential, mode `always`; the class's
    // other bootstrap commands stay.
    #[test]
    fn raid0_adds_the_bootstrap_command_that_mounts_the_instance_store() {
        let user = "[settings.bootstrap-commands.100-mine]\ncommands = [[\"echo\", \"hi\"]]\nmode = \"once\"\nessential = false\n";
        for (bind, expected) in [
            (EphemeralBind::Default, vec!["apiclient", "ephemeral-storage", "bind"]),
            (
                EphemeralBind::Dirs,
                vec![
                    "apiclient",
                    "ephemeral-storage",
                    "bind",
                    "--dirs",
                    "/var/lib/containerd",
                    "/var/lib/kubelet",
                    "/var/log/pods",
                ],
            ),
        ] {
            let text = settings(&cluster(), &BTreeMap::new(), &[], None, Some(bind), Some(user)).unwrap();
            let doc: DocumentMut = text.parse().unwrap();
            let cmd = &doc["settings"]["bootstrap-commands"][MOUNT_INSTANCE_STORAGE];
            let commands: Vec<Vec<&str>> = cmd["commands"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect())
                .collect();
            assert_eq!(
                commands,
                vec![vec!["apiclient", "ephemeral-storage", "init"], expected],
                "{text}"
            );
            assert_eq!(cmd["mode"].as_str(), Some("always"));
            assert_eq!(cmd["essential"].as_bool(), Some(true));
            assert_eq!(
                doc["settings"]["bootstrap-commands"]["100-mine"]["mode"].as_str(),
                Some("once"),
                "{text}"
            );
        }
    }

    // `version.SupportsDefaultBind` and `Bottlerocket.resolveAMIVersion`
    // (`getVersionFromAlias`, `getVersionFromName` with `extractVersionFromName`).
    #[test]
    fn the_bind_follows_the_bottlerocket_version_the_class_names() {
        assert!(supports_default_bind("latest"));
        assert!(supports_default_bind("v1.46.0"));
        assert!(supports_default_bind("2.0.0"));
        assert!(!supports_default_bind("v1.45.9"));
        assert!(!supports_default_bind("v1.46"));
        assert!(!supports_default_bind(""));
        let class = |term: serde_json::Value, policy: Option<&str>| {
            let mut c = EC2NodeClass::named("br");
            c.spec.ami_selector_terms = vec![serde_json::from_value(term).unwrap()];
            c.spec.ami_family = Some("Bottlerocket".into());
            c.spec.instance_store_policy = policy.map(str::to_string);
            c
        };
        let latest = class(serde_json::json!({"alias": "bottlerocket@latest"}), Some("RAID0"));
        assert_eq!(ami_version(&latest), Some("latest"));
        assert_eq!(raid0_bind(&latest), Some(EphemeralBind::Default));
        let old = class(serde_json::json!({"alias": "bottlerocket@v1.20.3"}), Some("RAID0"));
        assert_eq!(raid0_bind(&old), Some(EphemeralBind::Dirs));
        let named = class(
            serde_json::json!({"name": "bottlerocket-aws-k8s-1.33-x86_64-v1.46.0-431fe75a"}),
            Some("RAID0"),
        );
        assert_eq!(ami_version(&named), Some("v1.46.0"));
        assert_eq!(raid0_bind(&named), Some(EphemeralBind::Default));
        let by_id = class(serde_json::json!({"id": "ami-0123456789abcdef0"}), Some("RAID0"));
        assert_eq!(raid0_bind(&by_id), Some(EphemeralBind::Dirs));
        assert_eq!(
            raid0_bind(&class(serde_json::json!({"alias": "bottlerocket@latest"}), None)),
            None
        );
    }

    #[test]
    fn without_user_data_the_settings_are_carpools_alone() {
        let text = settings(&cluster(), &BTreeMap::new(), &[], None, None, None).unwrap();
        let doc: DocumentMut = text.parse().unwrap();
        assert_eq!(doc["settings"]["kubernetes"]["cluster-name"].as_str(), Some("prod"));
    }

    #[test]
    fn user_data_that_is_not_toml_or_sets_a_table_to_a_value_is_the_classes_error() {
        let not_toml = settings(
            &cluster(),
            &BTreeMap::new(),
            &[],
            None,
            None,
            Some("#!/bin/bash\necho [x"),
        );
        assert!(matches!(not_toml, Err(BottlerocketError::NotToml(_))), "{not_toml:?}");
        let flat = settings(&cluster(), &BTreeMap::new(), &[], None, None, Some("settings = 3\n"));
        assert!(
            matches!(&flat, Err(BottlerocketError::NotATable(k)) if k == "settings"),
            "{flat:?}"
        );
    }
}
