//! The user data of an Amazon Linux 2 node (an `al2` alias, for the Kubernetes versions
//! that still publish AL2 AMIs): a shell script that runs the AMI's
//! `/etc/eks/bootstrap.sh` with the cluster's name, endpoint, CA and DNS address, and the
//! kubelet's labels and taints, as Karpenter's AL2 bootstrap writes it
//! (`pkg/providers/amifamily/bootstrap/eksbootstrap.go`, `EKS.Script`). The class's own
//! `userData` parts come first and Carpool's script last, in one MIME multipart document,
//! as Karpenter merges them for AL2 (`EKS.mergeCustomUserData`): the user's setup runs
//! before the node joins.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Taint;

use super::mime::{self, MimeError, Part};
use super::user_data::{SHELL_SCRIPT_CONTENT_TYPE, node_labels_flag, taints_flag};
use crate::cluster_info::ClusterInfo;

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

/// The bootstrap script for a node of `cluster` with these labels and taints.
pub fn script(cluster: &ClusterInfo, labels: &BTreeMap<String, String>, taints: &[Taint]) -> String {
    let mut args = vec![
        quoted(&cluster.name),
        format!("--apiserver-endpoint {}", quoted(&cluster.endpoint)),
        format!("--b64-cluster-ca {}", quoted(&cluster.ca_base64)),
    ];
    if let Some(dns) = cluster_dns(&cluster.service_cidr) {
        args.push(format!("--dns-cluster-ip {}", quoted(&dns.to_string())));
    }
    let mut kubelet = Vec::new();
    if !labels.is_empty() {
        kubelet.push(node_labels_flag(labels));
    }
    if !taints.is_empty() {
        kubelet.push(taints_flag(taints));
    }
    if !kubelet.is_empty() {
        args.push(format!("--kubelet-extra-args {}", quoted(&kubelet.join(" "))));
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
        body: script(cluster, labels, taints),
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
        let s = script(&cluster(), &labels, &taints);
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
        let doc = user_data(&cluster(), &BTreeMap::new(), &[], Some("#!/bin/bash\necho hello\n")).unwrap();
        let hello = doc.find("echo hello").unwrap();
        let bootstrap = doc.find("/etc/eks/bootstrap.sh").unwrap();
        assert!(hello < bootstrap, "{doc}");
        assert!(mime::is_mime(&doc));
    }

    #[test]
    fn a_quote_in_a_value_cannot_break_out_of_the_shell_word() {
        assert_eq!(quoted("a'b"), r"'a'\''b'");
        assert_eq!(cluster_dns("10.100.0.0/16"), Some(Ipv4Addr::new(10, 100, 0, 10)));
        assert_eq!(cluster_dns("fd00::/108"), None);
    }
}
