//! Issue 28, "spec.kubelet reaches every family" and "instanceStorePolicy: RAID0", on the
//! local stack (moto): an EC2NodeClass's kubelet section and `instanceStorePolicy: RAID0`
//! reach the user data of every family's nodes, whichever way the class selects its AMI
//! (an `alias`, or `amiFamily` with an `id` term), as Karpenter's AWS provider writes
//! them (v1.15.0, `pkg/providers/amifamily/bootstrap`):
//!
//! - AL2023: nodeadm's NodeConfig `spec.kubelet.config` and
//!   `spec.instance.localStorage.strategy` (`Nodeadm.getNodeConfigYAML`,
//!   `generateInlineKubeletConfiguration`);
//! - AL2: `/etc/eks/bootstrap.sh` `--dns-cluster-ip`, `--use-max-pods false`,
//!   `--kubelet-extra-args` and `--local-disks raid0` (`EKS.eksBootstrapScript`,
//!   `Options.kubeletExtraArgs`);
//! - Bottlerocket: `settings.kubernetes.*` and the bootstrap command
//!   `000-mount-instance-storage` (`Bottlerocket.Script`).
//!
//! Each launch's user data is read back from EC2 and parsed into a
//! `KubeletConfiguration` as the node's tools would read it; the planner's allocatable for
//! the launched type, computed from the class, must equal the one computed from what the
//! node boots with.
//!
//! Bottlerocket has no pods-per-core setting, and Karpenter refuses a Bottlerocket class
//! that sets `podsPerCore` (`validateKubeletFieldsSupported`), so the Bottlerocket classes
//! here leave it out.

use std::collections::BTreeMap;

use anyhow::{Context, Result, ensure};
use carpool::catalog::Catalog;
use carpool::catalog::allocatable::{self, NodeSettings};
use carpool::decide::provisioning::templates::node_settings;
use carpool::fixtures::EC2NodeClassBuilder;
use carpool::model::kubelet::KubeletConfiguration;
use carpool::model::{CapacityType, EC2NodeClass, Quantity};
use carpool::ports::{Cloud, LaunchRequest};
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::ec2::bottlerocket::{BIND_DIRS, MOUNT_INSTANCE_STORAGE};
use carpool_adapters::ec2::{Ec2Clients, Ec2Cloud};
use carpool_tests::user_data::{bootstrap, node_config_kubelet, node_config_local_storage};
use carpool_tests::{Stack, shared, unique};
use serde_json::json;
use toml_edit::{DocumentMut, Item};

const ENDPOINT: &str = "https://apiserver.example:6443";
const CA_BASE64: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";
const SERVICE_CIDR: &str = "172.20.0.0/16";
const KUBERNETES_VERSION: &str = "1.31";
/// An x86-64 type with an instance store (75 GB of NVMe), so that RAID0 matters.
const INSTANCE_TYPE: &str = "m5d.large";

/// The families, with their `amiFamily` and alias.
const FAMILIES: [(&str, &str); 3] = [
    ("AL2023", "al2023@latest"),
    ("AL2", "al2@latest"),
    ("Bottlerocket", "bottlerocket@latest"),
];

/// A cloud of a cluster on Kubernetes [`KUBERNETES_VERSION`] reading the public parameters
/// under `root`.
async fn cloud(stack: &Stack, root: &str) -> Result<Ec2Cloud> {
    let config = stack.aws_config().await?;
    Ok(Ec2Cloud::new(
        Ec2Clients::new(&config),
        ClusterInfo::new(unique("kubelet"), ENDPOINT, CA_BASE64, SERVICE_CIDR)
            .with_kubernetes_version(KUBERNETES_VERSION),
        stack.get("CARPOOL_AMI_SSM_PARAMETER")?,
    )
    .with_public_ssm_root(root))
}

/// An x86-64 image moto really has.
async fn x86_image(stack: &Stack) -> Result<String> {
    let ec2 = stack.ec2().await?;
    let images = ec2
        .describe_images()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("architecture")
                .values("x86_64")
                .build(),
        )
        .send()
        .await?;
    Ok(images
        .images()
        .iter()
        .find_map(|i| i.image_id())
        .context("moto lists no x86_64 image")?
        .to_string())
}

/// Seeds the x86-64 `latest` parameter of each family's alias under `root` (moto refuses
/// parameters under `/aws/`), as `ami::alias_queries` reads them.
async fn seed_aliases(stack: &Stack, root: &str, image: &str) -> Result<()> {
    let ssm = aws_sdk_ssm::Client::new(&stack.aws_config().await?);
    let k8s = KUBERNETES_VERSION;
    for name in [
        format!("{root}/eks/optimized-ami/{k8s}/amazon-linux-2023/x86_64/standard/recommended/image_id"),
        format!("{root}/eks/optimized-ami/{k8s}/amazon-linux-2/recommended/image_id"),
        format!("{root}/bottlerocket/aws-k8s-{k8s}/x86_64/latest/image_id"),
    ] {
        ssm.put_parameter()
            .name(&name)
            .value(image)
            .r#type(aws_sdk_ssm::types::ParameterType::String)
            .overwrite(true)
            .send()
            .await
            .with_context(|| format!("seeding {name}"))?;
    }
    Ok(())
}

/// The class's kubelet section: every field the planner counts, and the rest the model
/// has. `podsPerCore` 20 caps a 2-vCPU type at 40 pods, below `maxPods` 58, so that it
/// shows in the allocatable; Bottlerocket has no such setting (module doc).
fn kubelet_section(family: &str) -> serde_json::Value {
    let mut k = json!({
        "maxPods": 58,
        "podsPerCore": 20,
        "clusterDNS": ["172.20.0.53"],
        "kubeReserved": {"cpu": "250m", "memory": "1Gi", "ephemeral-storage": "2Gi"},
        "systemReserved": {"cpu": "100m", "memory": "200Mi"},
        "evictionHard": {"memory.available": "300Mi", "nodefs.available": "15%"},
        "evictionSoft": {"memory.available": "500Mi"},
        "evictionSoftGracePeriod": {"memory.available": "1m30s"},
        "evictionMaxPodGracePeriod": 60,
        "imageGCHighThresholdPercent": 80,
        "imageGCLowThresholdPercent": 60,
        "cpuCFSQuota": false,
    });
    if family == "Bottlerocket" {
        k.as_object_mut().map(|o| o.remove("podsPerCore"));
    }
    k
}

/// One launch: the class, the type EC2 launched, and the instance's decoded user data.
struct Launched {
    family: &'static str,
    form: &'static str,
    class: EC2NodeClass,
    instance_type: String,
    text: String,
}

/// Launches one [`INSTANCE_TYPE`] node per family and AMI selector form (`alias`; `id`
/// with `amiFamily`), each class with [`kubelet_section`] and `instanceStorePolicy:
/// RAID0`, and reads back its user data (the instances are terminated).
async fn launch_each_family_and_form() -> Result<Vec<Launched>> {
    let stack = Stack::load()?;
    let root = format!("/{}", unique("public"));
    let image = x86_image(&stack).await?;
    seed_aliases(&stack, &root, &image).await?;
    let cloud = cloud(&stack, &root).await?;
    let zone = format!("{}b", stack.region()?);
    let mut out = Vec::new();
    for (family, alias) in FAMILIES {
        for form in ["alias", "id"] {
            let builder = EC2NodeClassBuilder::new(&format!("kubelet-{}-{form}", family.to_lowercase()))
                .subnet_discovery("carpool-local")
                .security_group_discovery("*")
                .set("kubelet", kubelet_section(family))
                .set("instanceStorePolicy", json!("RAID0"));
            let builder = match form {
                "alias" => builder.ami_alias(alias),
                _ => builder
                    .set("amiSelectorTerms", json!([{"id": image}]))
                    .set("amiFamily", json!(family)),
            };
            let class: EC2NodeClass = builder.typed()?;
            let request = LaunchRequest {
                launch_id: unique("launch"),
                deployment: "carpool-test".into(),
                nodepool: "general".into(),
                node_class: class.clone(),
                instance_types: vec![INSTANCE_TYPE.to_string()],
                zone: zone.clone(),
                capacity_type: CapacityType::OnDemand,
                labels: BTreeMap::from([("karpenter.sh/nodepool".to_string(), "general".to_string())]),
                taints: vec![],
                startup_taints: vec![],
            };
            let instance = cloud
                .launch(&request)
                .await
                .with_context(|| format!("{family} by {form}"))?;
            let text = carpool_tests::user_data::read(cloud.ec2(), &instance.id)
                .await?
                .with_context(|| format!("{family} by {form}: the instance has no user data"))?;
            cloud.terminate(&instance.id).await?;
            out.push(Launched {
                family,
                form,
                class,
                instance_type: instance.instance_type,
                text,
            });
        }
    }
    Ok(out)
}

/// A TOML table of strings as a map.
fn strings(item: Option<&Item>) -> Result<BTreeMap<String, String>> {
    let Some(table) = item.and_then(Item::as_table_like) else {
        return Ok(BTreeMap::new());
    };
    table
        .iter()
        .map(|(k, v)| {
            let v = v.as_str().with_context(|| format!("{k} is not a string"))?;
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

fn int(item: Option<&Item>) -> Result<Option<i32>> {
    item.map(|i| {
        i.as_integer()
            .and_then(|n| i32::try_from(n).ok())
            .with_context(|| format!("{i} is not an i32"))
    })
    .transpose()
}

/// An integer Bottlerocket takes as a string (the image GC thresholds).
fn int_string(item: Option<&Item>) -> Result<Option<i32>> {
    item.map(|i| {
        i.as_str()
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("{i} is not a number in a string"))
    })
    .transpose()
}

/// The kubelet settings of Bottlerocket's `settings.kubernetes`, under the names
/// `bottlerocketsettings.go` gives them.
fn bottlerocket_kubelet(doc: &DocumentMut) -> Result<KubeletConfiguration> {
    let k = doc
        .get("settings")
        .and_then(|s| s.get("kubernetes"))
        .context("no settings.kubernetes")?;
    let quantities = |key: &str| -> Result<BTreeMap<String, Quantity>> {
        strings(k.get(key))?
            .into_iter()
            .map(|(name, v)| Ok((name, v.parse::<Quantity>().map_err(|e| anyhow::anyhow!("{v}: {e}"))?)))
            .collect()
    };
    Ok(KubeletConfiguration {
        cluster_dns: k
            .get("cluster-dns-ip")
            .and_then(Item::as_str)
            .map(str::to_string)
            .into_iter()
            .collect(),
        max_pods: int(k.get("max-pods"))?,
        pods_per_core: None,
        system_reserved: quantities("system-reserved")?,
        kube_reserved: quantities("kube-reserved")?,
        eviction_hard: strings(k.get("eviction-hard"))?,
        eviction_soft: strings(k.get("eviction-soft"))?,
        eviction_soft_grace_period: strings(k.get("eviction-soft-grace-period"))?,
        eviction_max_pod_grace_period: int(k.get("eviction-max-pod-grace-period"))?,
        image_gc_high_threshold_percent: int_string(k.get("image-gc-high-threshold-percent"))?,
        image_gc_low_threshold_percent: int_string(k.get("image-gc-low-threshold-percent"))?,
        cpu_cfs_quota: k.get("cpu-cfs-quota-enforced").and_then(Item::as_bool),
        other: Default::default(),
    })
}

/// The commands of Bottlerocket's `000-mount-instance-storage`, if any.
fn bottlerocket_mount(doc: &DocumentMut) -> Vec<Vec<String>> {
    doc.get("settings")
        .and_then(|s| s.get("bootstrap-commands"))
        .and_then(|c| c.get(MOUNT_INSTANCE_STORAGE))
        .and_then(|c| c.get("commands"))
        .and_then(Item::as_array)
        .map(|commands| {
            commands
                .iter()
                .filter_map(|c| c.as_array())
                .map(|c| c.iter().filter_map(|w| w.as_str().map(str::to_string)).collect())
                .collect()
        })
        .unwrap_or_default()
}

/// What a node boots with, read back from its user data: its kubelet settings, and
/// whether its instance store becomes its ephemeral storage.
fn booted(launched: &Launched) -> Result<(KubeletConfiguration, bool)> {
    let text = &launched.text;
    match launched.family {
        "AL2023" => Ok((
            node_config_kubelet(text)?,
            node_config_local_storage(text).as_deref() == Some("RAID0"),
        )),
        "AL2" => {
            let b = bootstrap(text)?;
            Ok((
                b.kubelet()?,
                b.options.get("--local-disks").map(String::as_str) == Some("raid0"),
            ))
        }
        _ => {
            let doc: DocumentMut = text.parse().with_context(|| format!("not TOML: {text}"))?;
            let mount = bottlerocket_mount(&doc);
            let raid0 = mount.first().map(|c| c.join(" ")).as_deref() == Some("apiclient ephemeral-storage init")
                && mount
                    .get(1)
                    .is_some_and(|c| c.join(" ").starts_with("apiclient ephemeral-storage bind"));
            Ok((bottlerocket_kubelet(&doc)?, raid0))
        }
    }
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_class_kubelet_section_and_raid0_reach_every_familys_user_data() -> Result<()> {
    let _stack = shared().await;
    for l in launch_each_family_and_form().await? {
        let what = format!("{} by {}", l.family, l.form);
        let class_kubelet = l
            .class
            .spec
            .kubelet
            .clone()
            .context("the class has a kubelet section")?;
        let (kubelet, raid0) = booted(&l).with_context(|| format!("{what}: {}", l.text))?;
        // Every field the class sets, as the class sets it, and nothing else.
        ensure!(
            kubelet == class_kubelet,
            "{what}: the node boots with\n{kubelet:#?}\nthe class says\n{class_kubelet:#?}\n{}",
            l.text
        );
        ensure!(raid0, "{what}: no RAID0 instance store in\n{}", l.text);
        // The formats each family's reader takes, as Karpenter writes them.
        match l.family {
            "AL2023" => ensure!(
                l.text.contains("maxPods: 58") && l.text.contains("strategy: RAID0"),
                "{what}: {}",
                l.text
            ),
            "AL2" => ensure!(
                l.text.contains("--use-max-pods false")
                    && l.text.contains("--dns-cluster-ip '172.20.0.53'")
                    && l.text
                        .contains(r#"--eviction-hard="memory.available<300Mi,nodefs.available<15%""#)
                    && l.text
                        .contains(r#"--kube-reserved="cpu=250m,ephemeral-storage=2Gi,memory=1Gi""#)
                    && l.text.contains("--local-disks raid0"),
                "{what}: {}",
                l.text
            ),
            _ => {
                let doc: DocumentMut = l.text.parse()?;
                let bind = bottlerocket_mount(&doc).get(1).cloned().unwrap_or_default();
                // `version.SupportsDefaultBind`: `@latest` binds Bottlerocket's default
                // directories; an id term names no version, so the directories are named.
                let dirs = bind.iter().any(|w| w == "--dirs");
                match l.form {
                    "alias" => ensure!(!dirs, "{what}: {bind:?}"),
                    _ => ensure!(
                        dirs && BIND_DIRS.iter().all(|d| bind.iter().any(|w| w == d)),
                        "{what}: {bind:?}"
                    ),
                }
                ensure!(!l.text.contains("pods-per-core"), "{what}: {}", l.text);
            }
        }
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn the_settings_the_planner_used_for_allocatable_are_the_ones_in_the_nodes_user_data() -> Result<()> {
    let _stack = shared().await;
    let catalog = Catalog::embedded()?;
    for l in launch_each_family_and_form().await? {
        let what = format!("{} by {} on {}", l.family, l.form, l.instance_type);
        let it = catalog
            .get(&l.instance_type)
            .with_context(|| format!("{what}: a type the catalog does not know"))?;
        // What the planner used: the class's settings, as the provisioning templates read them.
        let planned = node_settings(Some(&l.class));
        let (kubelet, raid0) = booted(&l).with_context(|| format!("{what}: {}", l.text))?;
        let on_node = NodeSettings {
            kubelet,
            instance_store_raid0: raid0,
            ..planned.clone()
        };
        let plan = allocatable::with_settings(it, &planned);
        let node = allocatable::with_settings(it, &on_node);
        ensure!(
            plan.capacity == node.capacity && plan.allocatable == node.allocatable,
            "{what}: planned {:?} / {:?}, the node's user data gives {:?} / {:?}",
            plan.capacity,
            plan.allocatable,
            node.capacity,
            node.allocatable
        );
        // The settings are not the defaults: max pods is the class's (capped by podsPerCore
        // where the family has it), the ephemeral storage the instance store's.
        let pods = if l.family == "Bottlerocket" { 58 } else { 40 };
        ensure!(plan.capacity.pods == pods, "{what}: {:?}", plan.capacity);
        ensure!(
            plan.capacity.ephemeral_storage == 75_000_000_000,
            "{what}: {:?}",
            plan.capacity
        );
        let defaults = allocatable::with_settings(it, &NodeSettings::default());
        ensure!(
            defaults.allocatable != plan.allocatable,
            "{what}: the class changes nothing"
        );
    }
    Ok(())
}
