//! The user data of an Amazon Linux 2 node (an `al2` alias, for the Kubernetes versions
//! that still publish AL2 AMIs): a shell script that runs the AMI's
//! `/etc/eks/bootstrap.sh` with the cluster's name, endpoint, CA and DNS address, and the
//! kubelet's labels, taints and the EC2NodeClass's kubelet settings, as Karpenter's AL2
//! bootstrap writes it (`pkg/providers/amifamily/bootstrap/eksbootstrap.go`,
//! `EKS.eksBootstrapScript`, and `Options.kubeletExtraArgs` in `bootstrap.go`):
//!
//! - `--ip-family ipv6` when the class's first `clusterDNS` address is not IPv4;
//!   `--dns-cluster-ip` with that address, else the service CIDR's tenth address.
//! - `--use-max-pods false` when the class sets `maxPods` (bootstrap.sh then leaves max
//!   pods to the `--max-pods` flag).
//! - `--kubelet-extra-args` with, in Karpenter's order, `--node-labels`,
//!   `--register-with-taints`, `--max-pods=N`, `--pods-per-core=N`,
//!   `--system-reserved="cpu=100m,memory=100Mi"`, `--kube-reserved="…"`,
//!   `--eviction-hard="memory.available<100Mi,nodefs.available<10%"`,
//!   `--eviction-soft="…"`, `--eviction-soft-grace-period="memory.available=1m30s"`,
//!   `--eviction-max-pod-grace-period=N`, `--image-gc-high-threshold=N`,
//!   `--image-gc-low-threshold=N`, `--cpu-cfs-quota=true|false`. Map entries are in key
//!   order (Karpenter's come in Go's map order, which the kubelet does not care about);
//!   grace periods are written as the class writes them (Karpenter reprints them as Go
//!   durations, `1m30s`, which the kubelet reads the same).
//! - `--local-disks raid0` with `instanceStorePolicy: RAID0`: bootstrap.sh stripes the
//!   instance store volumes into one RAID0 array and mounts it under the kubelet's and
//!   containerd's directories.
//!
//! The class's own `userData` parts come first and Carpool's script last, in one MIME
//! multipart document, as Karpenter merges them for AL2 (`EKS.mergeCustomUserData`): the
//! user's setup runs before the node joins.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Taint;

use super::mime::{self, MimeError, Part};
use super::user_data::{SHELL_SCRIPT_CONTENT_TYPE, node_labels_flag, taints_flag};
use crate::cluster_info::ClusterInfo;
use carpool::catalog::allocatable::INSTANCE_STORE_RAID0;
use carpool::model::kubelet::KubeletConfiguration;

/// The cluster DNS address kube-dns gets in the service CIDR: its tenth address, as EKS
/// assigns it (`10.100.0.0/16` → `10.100.0.10`). `None` for a CIDR that is not IPv4.
pub fn cluster_dns(service_cidr: &str) -> Option<Ipv4Addr> {
    let base: Ipv4Addr = service_cidr.split('/').next()?.parse().ok()?;
    Some(Ipv4Addr::from(u32::from(base).wrapping_add(10)))
}

/// A value in single quotes for the shell (a `'` inside becomes `'\''`).
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// A value in double quotes, as Go's `%q` writes the map flags (`"` and `\` escaped).
fn go_quoted(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `--name="k<sep>v,k<sep>v"` for a map the class sets (Karpenter's `joinParameterArgs`);
/// `None` for an empty one.
fn map_flag<V: Display>(name: &str, map: &BTreeMap<String, V>, separator: &str) -> Option<String> {
    if map.is_empty() {
        return None;
    }
    let entries: Vec<String> = map.iter().map(|(k, v)| format!("{k}{separator}{v}")).collect();
    Some(format!("{name}={}", go_quoted(&entries.join(","))))
}

/// The kubelet flags of the class's kubelet settings, in Karpenter's order
/// (`Options.kubeletExtraArgs` after the labels and taints).
pub fn kubelet_flags(kubelet: &KubeletConfiguration) -> Vec<String> {
    let k = kubelet;
    let mut flags = Vec::new();
    if let Some(n) = k.max_pods {
        flags.push(format!("--max-pods={n}"));
    }
    if let Some(n) = k.pods_per_core {
        flags.push(format!("--pods-per-core={n}"));
    }
    flags.extend(map_flag("--system-reserved", &k.system_reserved, "="));
    flags.extend(map_flag("--kube-reserved", &k.kube_reserved, "="));
    flags.extend(map_flag("--eviction-hard", &k.eviction_hard, "<"));
    flags.extend(map_flag("--eviction-soft", &k.eviction_soft, "<"));
    flags.extend(map_flag(
        "--eviction-soft-grace-period",
        &k.eviction_soft_grace_period,
        "=",
    ));
    if let Some(n) = k.eviction_max_pod_grace_period {
        flags.push(format!("--eviction-max-pod-grace-period={n}"));
    }
    if let Some(n) = k.image_gc_high_threshold_percent {
        flags.push(format!("--image-gc-high-threshold={n}"));
    }
    if let Some(n) = k.image_gc_low_threshold_percent {
        flags.push(format!("--image-gc-low-threshold={n}"));
    }
    if let Some(b) = k.cpu_cfs_quota {
        flags.push(format!("--cpu-cfs-quota={b}"));
    }
    flags
}

/// The bootstrap script for a node of `cluster` with these labels and taints, the class's
/// kubelet settings and its `instanceStorePolicy` (see the module doc for what each
/// becomes).
pub fn script(
    cluster: &ClusterInfo,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    kubelet: Option<&KubeletConfiguration>,
    instance_store_policy: Option<&str>,
) -> String {
    let mut args = vec![
        quoted(&cluster.name),
        format!("--apiserver-endpoint {}", quoted(&cluster.endpoint)),
        format!("--b64-cluster-ca {}", quoted(&cluster.ca_base64)),
    ];
    let class_dns = kubelet.and_then(|k| k.cluster_dns.first());
    if let Some(dns) = class_dns {
        // `EKS.isIPv6`: the first address, if not IPv4, makes the node IPv6.
        if dns.parse::<Ipv4Addr>().is_err() {
            args.push("--ip-family ipv6".into());
        }
        args.push(format!("--dns-cluster-ip {}", quoted(dns)));
    } else if let Some(dns) = cluster_dns(&cluster.service_cidr) {
        args.push(format!("--dns-cluster-ip {}", quoted(&dns.to_string())));
    }
    if kubelet.is_some_and(|k| k.max_pods.is_some()) {
        args.push("--use-max-pods false".into());
    }
    let mut extra = Vec::new();
    if !labels.is_empty() {
        extra.push(node_labels_flag(labels));
    }
    if !taints.is_empty() {
        extra.push(taints_flag(taints));
    }
    extra.extend(kubelet.map(kubelet_flags).unwrap_or_default());
    if !extra.is_empty() {
        args.push(format!("--kubelet-extra-args {}", quoted(&extra.join(" "))));
    }
    if instance_store_policy == Some(INSTANCE_STORE_RAID0) {
        args.push("--local-disks raid0".into());
    }
    format!(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n/etc/eks/bootstrap.sh {}\n",
        args.join(" \\\n  ")
    )
}

/// The whole user data (not yet base64): the class's `user_data` parts, if any, then the
/// bootstrap script.
pub fn user_data(
    cluster: &ClusterInfo,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    kubelet: Option<&KubeletConfiguration>,
    instance_store_policy: Option<&str>,
    user_data: Option<&str>,
) -> Result<String, MimeError> {
    let mut parts = Vec::new();
    if let Some(own) = user_data.filter(|u| !u.trim().is_empty()) {
        if mime::is_mime(own) {
            parts.extend(mime::parts(own)?);
        } else {
            parts.push(Part::New {
                content_type: SHELL_SCRIPT_CONTENT_TYPE.into(),
                body: own.to_string(),
            });
        }
    }
    parts.push(Part::New {
        content_type: SHELL_SCRIPT_CONTENT_TYPE.into(),
        body: script(cluster, labels, taints, kubelet, instance_store_policy),
    });
    Ok(mime::document(&parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> ClusterInfo {
        ClusterInfo::new("demo", "https://demo.example", "Q0E=", "172.20.0.0/16")
    }

    #[test]
    fn the_script_joins_the_cluster_with_its_dns_address_labels_and_taints() {
        // Karpenter's eksbootstrap.go: bootstrap.sh '<cluster>' --apiserver-endpoint
        // --b64-cluster-ca, --dns-cluster-ip from the kube-dns service IP, and
        // --kubelet-extra-args with --node-labels and --register-with-taints.
        let labels = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "web".to_string())]);
        let taints = [Taint {
            key: "dedicated".into(),
            value: Some("web".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }];
        let s = script(&cluster(), &labels, &taints, None, None);
        assert!(s.starts_with("#!/bin/bash -xe\n"), "{s}");
        assert!(s.contains("/etc/eks/bootstrap.sh 'demo'"), "{s}");
        assert!(s.contains("--apiserver-endpoint 'https://demo.example'"), "{s}");
        assert!(s.contains("--b64-cluster-ca 'Q0E='"), "{s}");
        assert!(s.contains("--dns-cluster-ip '172.20.0.10'"), "{s}");
        assert!(
            s.contains("--kubelet-extra-args '--node-labels=karpenter.sh/nodepool=web --register-with-taints=dedicated=web:NoSchedule'"),
            "{s}"
        );
    }

    #[test]
    fn the_classes_own_script_runs_before_the_bootstrap() {
        let doc = user_data(
            &cluster(),
            &BTreeMap::new(),
            &[],
            None,
            None,
            Some("#!/bin/bash\necho hello\n"),
        )
        .unwrap();
        let hello = doc.find("echo hello").unwrap();
        let bootstrap = doc.find("/etc/eks/bootstrap.sh").unwrap();
        assert!(hello < bootstrap, "{doc}");
        assert!(mime::is_mime(&doc));
    }

    fn every_kubelet_field() -> KubeletConfiguration {
        let q = |s: &str| s.parse::<carpool::model::Quantity>().unwrap();
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        KubeletConfiguration {
            cluster_dns: vec!["10.0.0.10".into(), "10.0.0.11".into()],
            max_pods: Some(58),
            pods_per_core: Some(20),
            system_reserved: BTreeMap::from([("cpu".into(), q("100m")), ("memory".into(), q("200Mi"))]),
            kube_reserved: BTreeMap::from([("cpu".into(), q("250m")), ("memory".into(), q("1Gi"))]),
            eviction_hard: map(&[("memory.available", "200Mi"), ("nodefs.available", "15%")]),
            eviction_soft: map(&[("memory.available", "500Mi")]),
            eviction_soft_grace_period: map(&[("memory.available", "1m30s")]),
            eviction_max_pod_grace_period: Some(60),
            image_gc_high_threshold_percent: Some(80),
            image_gc_low_threshold_percent: Some(60),
            cpu_cfs_quota: Some(false),
            other: Default::default(),
        }
    }

    // Karpenter's `Options.kubeletExtraArgs` (bootstrap/bootstrap.go): labels, taints, then
    // `--max-pods=%d`, `--pods-per-core=%d`, `joinParameterArgs` for `--system-reserved`,
    // `--kube-reserved` (`=`), `--eviction-hard`, `--eviction-soft` (`<`) and
    // `--eviction-soft-grace-period` (`=`), each `%q`-quoted, then
    // `--eviction-max-pod-grace-period=%d`, `--image-gc-high-threshold=%d`,
    // `--image-gc-low-threshold=%d`, `--cpu-cfs-quota=%t`.
    #[test]
    fn the_class_kubelet_settings_become_kubelet_flags_in_karpenters_order_and_format() {
        assert_eq!(
            kubelet_flags(&every_kubelet_field()),
            vec![
                "--max-pods=58",
                "--pods-per-core=20",
                r#"--system-reserved="cpu=100m,memory=200Mi""#,
                r#"--kube-reserved="cpu=250m,memory=1Gi""#,
                r#"--eviction-hard="memory.available<200Mi,nodefs.available<15%""#,
                r#"--eviction-soft="memory.available<500Mi""#,
                r#"--eviction-soft-grace-period="memory.available=1m30s""#,
                "--eviction-max-pod-grace-period=60",
                "--image-gc-high-threshold=80",
                "--image-gc-low-threshold=60",
                "--cpu-cfs-quota=false",
            ]
        );
        assert!(kubelet_flags(&KubeletConfiguration::default()).is_empty());
    }

    // `EKS.eksBootstrapScript` (bootstrap/eksbootstrap.go): `--dns-cluster-ip` with
    // `ClusterDNS[0]`, `--use-max-pods false` when a max pods flag is written, then
    // `--kubelet-extra-args`, then `--local-disks raid0` for `InstanceStorePolicy: RAID0`.
    #[test]
    fn the_script_passes_the_class_dns_max_pods_kubelet_flags_and_raid0_in_karpenters_order() {
        let labels = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "web".to_string())]);
        let s = script(&cluster(), &labels, &[], Some(&every_kubelet_field()), Some("RAID0"));
        let expected = concat!(
            "/etc/eks/bootstrap.sh 'demo' \\\n",
            "  --apiserver-endpoint 'https://demo.example' \\\n",
            "  --b64-cluster-ca 'Q0E=' \\\n",
            "  --dns-cluster-ip '10.0.0.10' \\\n",
            "  --use-max-pods false \\\n",
            "  --kubelet-extra-args '--node-labels=karpenter.sh/nodepool=web --max-pods=58 --pods-per-core=20 ",
            r#"--system-reserved="cpu=100m,memory=200Mi" --kube-reserved="cpu=250m,memory=1Gi" "#,
            r#"--eviction-hard="memory.available<200Mi,nodefs.available<15%" --eviction-soft="memory.available<500Mi" "#,
            r#"--eviction-soft-grace-period="memory.available=1m30s" --eviction-max-pod-grace-period=60 "#,
            "--image-gc-high-threshold=80 --image-gc-low-threshold=60 --cpu-cfs-quota=false' \\\n",
            "  --local-disks raid0\n",
        );
        assert!(s.ends_with(expected), "{s}");
    }

    #[test]
    fn without_max_pods_bootstrap_sh_keeps_its_own_and_without_cluster_dns_the_service_cidr_says() {
        let k = KubeletConfiguration {
            pods_per_core: Some(4),
            ..KubeletConfiguration::default()
        };
        let s = script(&cluster(), &BTreeMap::new(), &[], Some(&k), None);
        assert!(!s.contains("--use-max-pods"), "{s}");
        assert!(!s.contains("--max-pods"), "{s}");
        assert!(!s.contains("--local-disks"), "{s}");
        assert!(s.contains("--dns-cluster-ip '172.20.0.10'"), "{s}");
        assert!(s.contains("--kubelet-extra-args '--pods-per-core=4'"), "{s}");
        // `EKS.isIPv6`: an IPv6 first address makes the node IPv6.
        let v6 = KubeletConfiguration {
            cluster_dns: vec!["fd00::a".into()],
            ..KubeletConfiguration::default()
        };
        let s = script(&cluster(), &BTreeMap::new(), &[], Some(&v6), None);
        assert!(s.contains("--ip-family ipv6 \\\n  --dns-cluster-ip 'fd00::a'"), "{s}");
    }

    #[test]
    fn a_quote_in_a_value_cannot_break_out_of_the_shell_word() {
        assert_eq!(quoted("a'b"), r"'a'\''b'");
        assert_eq!(cluster_dns("10.100.0.0/16"), Some(Ipv4Addr::new(10, 100, 0, 10)));
        assert_eq!(cluster_dns("fd00::/108"), None);
        assert_eq!(go_quoted(r#"a"b\c"#), r#""a\"b\\c""#);
    }
}
