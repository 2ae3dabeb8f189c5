//! What nodeadm on the instance would read: the kubelet's labels and taints in the
//! NodeConfig of the user data, which is either a NodeConfig document or a MIME
//! multipart document holding one or more (`Content-Type: application/node.eks.aws`).
//! The harness registers Nodes with them, as the kubelet would.
//!
//! The kubelet settings a node boots with, read back from its user data as the node's
//! tools read them: nodeadm's merged `spec.kubelet.config` and
//! `spec.instance.localStorage` ([`node_config_kubelet`], [`node_config_local_storage`]),
//! and AL2's `/etc/eks/bootstrap.sh` arguments and `--kubelet-extra-args`
//! ([`bootstrap`], [`Bootstrap::kubelet`]). (Bottlerocket's TOML is read where a TOML
//! reader is at hand, in the adapters' tests.)

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use aws_sdk_ec2::types::InstanceAttributeName;
use base64::Engine as _;
use carpool::model::Quantity;
use carpool::model::kubelet::KubeletConfiguration;
use k8s_openapi::api::core::v1::Taint;

/// The kubelet settings nodeadm passes on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeletFlags {
    /// `--node-labels`.
    pub labels: BTreeMap<String, String>,
    /// `--register-with-taints`.
    pub taints: Vec<Taint>,
}

/// The NodeConfig documents in user data: the whole text, or each MIME part that
/// holds one.
pub fn node_configs(text: &str) -> Vec<serde_json::Value> {
    let boundary = text.lines().take_while(|l| !l.trim().is_empty()).find_map(|l| {
        let lower = l.to_ascii_lowercase();
        let at = lower.find("boundary=")?;
        Some(l[at + "boundary=".len()..].trim().trim_matches('"').to_string())
    });
    let documents: Vec<&str> = match &boundary {
        Some(b) => {
            let delimiter = format!("--{b}");
            text.split(delimiter.as_str())
                .skip(1)
                .filter(|part| !part.starts_with("--"))
                .filter_map(|part| {
                    let part = part.trim_start_matches(['\r', '\n']);
                    let (headers, body) = part.split_once("\n\n").or_else(|| part.split_once("\r\n\r\n"))?;
                    headers
                        .to_ascii_lowercase()
                        .contains("application/node.eks.aws")
                        .then_some(body)
                })
                .collect()
        }
        None => vec![text],
    };
    documents
        .into_iter()
        .filter_map(|d| serde_yaml_ng::from_str::<serde_json::Value>(d).ok())
        .filter(|v| v["kind"] == "NodeConfig")
        .collect()
}

fn parse_taint(text: &str) -> Option<Taint> {
    let (kv, effect) = text.rsplit_once(':')?;
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (kv, None),
    };
    Some(Taint {
        key: key.to_string(),
        value,
        effect: effect.to_string(),
        time_added: None,
    })
}

/// The labels and taints of the kubelet flags in the user data's NodeConfigs.
pub fn kubelet_flags(text: &str) -> KubeletFlags {
    let mut out = KubeletFlags::default();
    for config in node_configs(text) {
        for flag in config["spec"]["kubelet"]["flags"].as_array().into_iter().flatten() {
            let Some(flag) = flag.as_str() else { continue };
            if let Some(list) = flag.strip_prefix("--node-labels=") {
                for kv in list.split(',').filter(|s| !s.is_empty()) {
                    if let Some((k, v)) = kv.split_once('=') {
                        out.labels.insert(k.to_string(), v.to_string());
                    }
                }
            } else if let Some(list) = flag.strip_prefix("--register-with-taints=") {
                out.taints.extend(list.split(',').filter_map(parse_taint));
            }
        }
    }
    out
}

/// `patch` merged into `base` as nodeadm merges NodeConfigs: objects key by key, anything
/// else replaced.
fn merge(base: &mut serde_json::Value, patch: &serde_json::Value) {
    match (base.as_object_mut(), patch.as_object()) {
        (Some(b), Some(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        _ => *base = patch.clone(),
    }
}

/// The kubelet settings of the user data's NodeConfigs (`spec.kubelet.config`, later
/// documents winning), as the model reads them; fields it does not know are left out.
pub fn node_config_kubelet(text: &str) -> Result<KubeletConfiguration> {
    let mut config = serde_json::json!({});
    for doc in node_configs(text) {
        if let Some(c) = doc["spec"]["kubelet"].get("config") {
            merge(&mut config, c);
        }
    }
    serde_json::from_value(config).context("spec.kubelet.config is not a KubeletConfiguration")
}

/// `spec.instance.localStorage.strategy` of the user data's NodeConfigs (the last that
/// sets it).
pub fn node_config_local_storage(text: &str) -> Option<String> {
    node_configs(text)
        .iter()
        .filter_map(|d| {
            d["spec"]["instance"]["localStorage"]["strategy"]
                .as_str()
                .map(str::to_string)
        })
        .next_back()
}

/// The words of a shell command line as the shell (or systemd, for the kubelet's extra
/// arguments) splits them: `'…'` literal, `"…"` with `\"` and `\\`, a backslash-newline
/// joins lines.
pub fn shell_words(line: &str) -> Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => bail!("unterminated ' in {line:?}"),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => w.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => bail!("unterminated \" in {line:?}"),
                        },
                        Some(c) => w.push(c),
                        None => bail!("unterminated \" in {line:?}"),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(c) => word.get_or_insert_with(String::new).push(c),
            },
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// The `/etc/eks/bootstrap.sh` call of an AL2 node's user data.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bootstrap {
    /// The cluster's name (the one positional argument).
    pub cluster: String,
    /// The options and their values (`--dns-cluster-ip` → `10.0.0.10`), the last one of a
    /// name winning.
    pub options: BTreeMap<String, String>,
}

/// The `/etc/eks/bootstrap.sh` call in the user data (a MIME part or the whole text).
pub fn bootstrap(text: &str) -> Result<Bootstrap> {
    let at = text
        .find("/etc/eks/bootstrap.sh")
        .context("no /etc/eks/bootstrap.sh call")?;
    // The call runs to the first line that does not end in a backslash.
    let mut end = at;
    for line in text[at..].split_inclusive('\n') {
        end += line.len();
        if !line.trim_end_matches(['\n', '\r']).ends_with('\\') {
            break;
        }
    }
    let words = shell_words(&text[at..end])?;
    let mut out = Bootstrap::default();
    let mut rest = words.into_iter().skip(1);
    while let Some(w) = rest.next() {
        if w.starts_with("--") {
            let value = rest.next().with_context(|| format!("{w} has no value"))?;
            out.options.insert(w, value);
        } else if out.cluster.is_empty() {
            out.cluster = w;
        } else {
            bail!("a second positional argument {w:?}");
        }
    }
    Ok(out)
}

/// `k<sep>v,k<sep>v` as a map.
fn pairs(list: &str, separator: char) -> Result<BTreeMap<String, String>> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            kv.split_once(separator)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("{kv:?} has no {separator:?}"))
        })
        .collect()
}

fn quantities(list: &str) -> Result<BTreeMap<String, Quantity>> {
    pairs(list, '=')?
        .into_iter()
        .map(|(k, v)| Ok((k, v.parse::<Quantity>().map_err(|e| anyhow::anyhow!("{v:?}: {e}"))?)))
        .collect()
}

impl Bootstrap {
    /// The kubelet flags of `--kubelet-extra-args`, split as systemd splits them.
    pub fn kubelet_flags(&self) -> Result<Vec<String>> {
        shell_words(self.options.get("--kubelet-extra-args").map_or("", String::as_str))
    }

    /// The kubelet settings the node gets: its extra flags, and `--dns-cluster-ip` as the
    /// one cluster DNS address. Fails on a flag it does not know other than the labels
    /// and taints, and on `--max-pods` without `--use-max-pods false` (bootstrap.sh
    /// would write its own max pods too).
    pub fn kubelet(&self) -> Result<KubeletConfiguration> {
        let mut k = KubeletConfiguration {
            cluster_dns: self.options.get("--dns-cluster-ip").cloned().into_iter().collect(),
            ..KubeletConfiguration::default()
        };
        for flag in self.kubelet_flags()? {
            let (name, value) = flag.split_once('=').with_context(|| format!("{flag:?} has no value"))?;
            let int = || value.parse::<i32>().with_context(|| format!("{flag:?}"));
            match name {
                "--node-labels" | "--register-with-taints" => {}
                "--max-pods" => k.max_pods = Some(int()?),
                "--pods-per-core" => k.pods_per_core = Some(int()?),
                "--system-reserved" => k.system_reserved = quantities(value)?,
                "--kube-reserved" => k.kube_reserved = quantities(value)?,
                "--eviction-hard" => k.eviction_hard = pairs(value, '<')?,
                "--eviction-soft" => k.eviction_soft = pairs(value, '<')?,
                "--eviction-soft-grace-period" => k.eviction_soft_grace_period = pairs(value, '=')?,
                "--eviction-max-pod-grace-period" => k.eviction_max_pod_grace_period = Some(int()?),
                "--image-gc-high-threshold" => k.image_gc_high_threshold_percent = Some(int()?),
                "--image-gc-low-threshold" => k.image_gc_low_threshold_percent = Some(int()?),
                "--cpu-cfs-quota" => k.cpu_cfs_quota = Some(value.parse().with_context(|| format!("{flag:?}"))?),
                _ => bail!("a kubelet flag the reader does not know: {flag:?}"),
            }
        }
        if k.max_pods.is_some() && self.options.get("--use-max-pods").map(String::as_str) != Some("false") {
            bail!("--max-pods without --use-max-pods false: {:?}", self.options);
        }
        Ok(k)
    }
}

/// The instance's user data, decoded; `None` when it has none.
pub async fn read(ec2: &aws_sdk_ec2::Client, instance_id: &str) -> Result<Option<String>> {
    let out = ec2
        .describe_instance_attribute()
        .instance_id(instance_id)
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .with_context(|| format!("DescribeInstanceAttribute userData of {instance_id}"))?;
    let Some(encoded) = out.user_data().and_then(|v| v.value()).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .with_context(|| format!("user data of {instance_id} is not base64"))?;
    // The launch template holds base64 user data; EC2 encodes it once more for this call.
    let bytes = match base64::engine::general_purpose::STANDARD.decode(&bytes) {
        Ok(inner) if std::str::from_utf8(&inner).is_ok() => inner,
        _ => bytes,
    };
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODECONFIG: &str = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: c\n  kubelet:\n    flags:\n    - --node-labels=karpenter.sh/nodepool=general,team=a\n    - --register-with-taints=dedicated=batch:NoSchedule,gpu:NoExecute\n";

    #[test]
    fn a_plain_nodeconfig_gives_its_labels_and_taints() {
        let flags = kubelet_flags(NODECONFIG);
        assert_eq!(flags.labels["karpenter.sh/nodepool"], "general");
        assert_eq!(flags.labels["team"], "a");
        assert_eq!(flags.taints.len(), 2);
        assert_eq!(flags.taints[0].value.as_deref(), Some("batch"));
        assert_eq!(flags.taints[1].key, "gpu");
        assert_eq!(flags.taints[1].effect, "NoExecute");
    }

    #[test]
    fn the_node_configs_kubelet_config_merges_later_documents_over_earlier_ones() {
        let first = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 58\n      kubeReserved:\n        cpu: 250m\n  instance:\n    localStorage:\n      strategy: RAID0\n";
        let second = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      kubeReserved:\n        memory: 1Gi\n      registerWithTaints: []\n";
        let mime = format!(
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: application/node.eks.aws\n\n{first}\n--//\nContent-Type: application/node.eks.aws\n\n{second}\n--//--\n"
        );
        let k = node_config_kubelet(&mime).unwrap();
        assert_eq!(k.max_pods, Some(58));
        assert_eq!(k.kube_reserved["cpu"].to_string(), "250m");
        assert_eq!(k.kube_reserved["memory"].to_string(), "1Gi");
        assert_eq!(node_config_local_storage(&mime).as_deref(), Some("RAID0"));
        assert_eq!(node_config_local_storage(NODECONFIG), None);
    }

    #[test]
    fn the_bootstrap_call_gives_its_options_and_kubelet_settings() {
        let script = concat!(
            "#!/bin/bash -xe\n",
            "/etc/eks/bootstrap.sh 'demo' \\\n",
            "  --apiserver-endpoint 'https://x' \\\n",
            "  --dns-cluster-ip '10.0.0.10' \\\n",
            "  --use-max-pods false \\\n",
            "  --kubelet-extra-args '--node-labels=a=b --max-pods=58 --kube-reserved=\"cpu=250m,memory=1Gi\" ",
            "--eviction-hard=\"memory.available<200Mi,nodefs.available<15%\" --eviction-soft-grace-period=\"memory.available=1m30s\" ",
            "--image-gc-high-threshold=80 --cpu-cfs-quota=false' \\\n",
            "  --local-disks raid0\n",
            "echo done\n",
        );
        let b = bootstrap(script).unwrap();
        assert_eq!(b.cluster, "demo");
        assert_eq!(b.options["--local-disks"], "raid0");
        assert_eq!(b.options["--apiserver-endpoint"], "https://x");
        let k = b.kubelet().unwrap();
        assert_eq!(k.cluster_dns, vec!["10.0.0.10".to_string()]);
        assert_eq!(k.max_pods, Some(58));
        assert_eq!(k.kube_reserved["memory"].to_string(), "1Gi");
        assert_eq!(k.eviction_hard["nodefs.available"], "15%");
        assert_eq!(k.eviction_soft_grace_period["memory.available"], "1m30s");
        assert_eq!(k.image_gc_high_threshold_percent, Some(80));
        assert_eq!(k.cpu_cfs_quota, Some(false));
        let no_use = script.replace("--use-max-pods false \\\n  ", "");
        assert!(bootstrap(&no_use).unwrap().kubelet().is_err());
        assert_eq!(
            shell_words(r#"a 'b c' "d\"e" f\ g"#).unwrap(),
            vec!["a", "b c", "d\"e", "f g"]
        );
    }

    #[test]
    fn a_mime_document_gives_the_flags_of_its_nodeconfig_parts() {
        let mime = format!(
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho hi\n\n--//\nContent-Type: application/node.eks.aws\n\n{NODECONFIG}\n--//--\n"
        );
        let flags = kubelet_flags(&mime);
        assert_eq!(flags.labels["team"], "a");
        assert_eq!(flags.taints.len(), 2);
    }
}
