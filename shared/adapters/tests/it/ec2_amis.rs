//! Issue 11, "AMIs, resolved as Karpenter resolves them", on the local stack (moto): an
//! `alias: al2023@latest` class resolves through the public SSM parameters for the
//! cluster's Kubernetes version, one image per architecture, and every launch's AMI is
//! the one of its instance types' architecture. moto has no `/aws/service/...`
//! parameters and refuses to create any under `/aws/`, so the test seeds copies under
//! its own root and points the cloud at it (`CARPOOL_PUBLIC_SSM_ROOT` in a deployment).

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail, ensure};
use aws_sdk_ec2::types::{ArchitectureValues, Filter, Tag};
use carpool::catalog::Catalog;
use carpool::fixtures::EC2NodeClassBuilder;
use carpool::model::{Arch, CapacityType, EC2NodeClass};
use carpool::ports::{Cloud, CloudError, ImageVariant, LaunchRequest, NodeClassReason};
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::ec2::{Ec2Clients, Ec2Cloud};
use carpool_tests::{Stack, shared, unique};
use serde_json::json;

const ENDPOINT: &str = "https://apiserver.example:6443";
const CA_BASE64: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==";
const SERVICE_CIDR: &str = "172.20.0.0/16";
const KUBERNETES_VERSION: &str = "1.31";

fn class(alias: &str) -> Result<EC2NodeClass> {
    Ok(EC2NodeClassBuilder::new("default")
        .subnet_discovery("carpool-local")
        .security_group_discovery("*")
        .ami_alias(alias)
        .typed()?)
}

/// A cloud of a cluster on Kubernetes [`KUBERNETES_VERSION`], reading the public
/// parameters under `root`.
async fn cloud(stack: &Stack, root: &str) -> Result<Ec2Cloud> {
    let config = stack.aws_config().await?;
    Ok(Ec2Cloud::new(
        Ec2Clients::new(&config),
        ClusterInfo::new(unique("amis"), ENDPOINT, CA_BASE64, SERVICE_CIDR).with_kubernetes_version(KUBERNETES_VERSION),
        stack.get("CARPOOL_AMI_SSM_PARAMETER")?,
    )
    .with_public_ssm_root(root))
}

/// Two distinct AMIs moto knows, the seeded one standing for x86-64 and another (an
/// arm64 one where moto has it) for arm64: which is which matters only through the
/// parameters they are seeded under.
async fn two_images(stack: &Stack) -> Result<(String, String)> {
    let ec2 = stack.ec2().await?;
    let x86 = stack.ami_id()?.to_string();
    // An arm64 image other than the x86 one, else any other image moto has.
    let other = |images: &[aws_sdk_ec2::types::Image]| {
        images
            .iter()
            .filter_map(|i| i.image_id())
            .find(|id| *id != x86)
            .map(str::to_string)
    };
    let arm64 = ec2
        .describe_images()
        .filters(Filter::builder().name("architecture").values("arm64").build())
        .send()
        .await?;
    let arm = match other(arm64.images()) {
        Some(id) => id,
        None => other(ec2.describe_images().send().await?.images()).context("moto knows only one AMI")?,
    };
    Ok((x86, arm))
}

/// Seeds AL2023's recommended standard parameters for both architectures under `root`.
async fn seed_al2023(stack: &Stack, root: &str, x86: &str, arm: &str) -> Result<()> {
    let ssm = aws_sdk_ssm::Client::new(&stack.aws_config().await?);
    for (arch, id) in [("x86_64", x86), ("arm64", arm)] {
        let name = format!(
            "{root}/eks/optimized-ami/{KUBERNETES_VERSION}/amazon-linux-2023/{arch}/standard/recommended/image_id"
        );
        ssm.put_parameter()
            .name(&name)
            .value(id)
            .r#type(aws_sdk_ssm::types::ParameterType::String)
            .overwrite(true)
            .send()
            .await
            .with_context(|| format!("seeding {name}"))?;
    }
    Ok(())
}

fn request(node_class: &EC2NodeClass, zone: &str, instance_types: &[&str]) -> LaunchRequest {
    LaunchRequest {
        launch_id: unique("launch"),
        deployment: "carpool-test".into(),
        nodepool: "general".into(),
        node_class: node_class.clone(),
        instance_types: instance_types.iter().map(|t| t.to_string()).collect(),
        zone: zone.into(),
        capacity_type: CapacityType::OnDemand,
        labels: BTreeMap::from([("karpenter.sh/nodepool".to_string(), "general".to_string())]),
        taints: vec![],
        startup_taints: vec![],
    }
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn al2023_latest_launches_each_architecture_with_its_own_ami() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let root = format!("/{}", unique("public"));
    let (x86, arm) = two_images(&stack).await?;
    seed_al2023(&stack, &root, &x86, &arm).await?;
    let cloud = cloud(&stack, &root).await?;
    let node_class = class("al2023@latest")?;

    // The images: one per architecture, standard (no GPU or Neuron parameter seeded).
    let mut images = cloud.images(&node_class).await?;
    images.sort_by_key(|i| i.arch);
    let got: Vec<_> = images
        .iter()
        .map(|i| (i.id.as_str(), i.arch, i.variants.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (x86.as_str(), Some(Arch::Amd64), vec![ImageVariant::Standard]),
            (arm.as_str(), Some(Arch::Arm64), vec![ImageVariant::Standard]),
        ]
    );

    // Graviton only, x86 only, and a request whose alternatives span both (the planner's
    // cheapest first): every instance boots the AMI of its type's architecture.
    let zone = format!("{}b", stack.region()?);
    let catalog = Catalog::embedded()?;
    let ec2 = cloud.ec2().clone();
    let mut launched = Vec::new();
    for types in [
        &["m7g.large", "c7g.large"][..],
        &["m5.large", "c5.large"][..],
        &["m6g.large", "m5.large"][..],
        &["m5.large", "m6g.large"][..],
    ] {
        let instance = cloud.launch(&request(&node_class, &zone, types)).await?;
        ensure!(
            types.contains(&instance.instance_type.as_str()),
            "{types:?}: {instance:?}"
        );
        let described = ec2.describe_instances().instance_ids(&instance.id).send().await?;
        let image = described
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find_map(|i| i.image_id())
            .context("the instance has no image")?
            .to_string();
        let arch = catalog
            .get(&instance.instance_type)
            .context("a type the catalog does not know")?
            .arch;
        let expected = match arch {
            Arch::Amd64 => &x86,
            Arch::Arm64 => &arm,
        };
        assert_eq!(&image, expected, "{} ({arch:?}) for {types:?}", instance.instance_type);
        // The preferred (first) type's architecture wins a mixed request.
        assert_eq!(
            Some(arch),
            catalog.get(types[0]).map(|t| t.arch),
            "{types:?}: {}",
            instance.instance_type
        );
        launched.push(instance.id);
    }
    for id in &launched {
        cloud.terminate(id).await?;
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn an_alias_without_parameters_for_the_version_and_a_windows_alias_are_class_errors() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let root = format!("/{}", unique("empty"));
    let cloud = cloud(&stack, &root).await?;
    match cloud.images(&class("al2023@latest")?).await {
        Err(CloudError::NodeClass {
            reason: NodeClassReason::NoImage { .. },
            ..
        }) => {}
        other => bail!("expected NoImage, got {other:?}"),
    }
    // Validation refuses a Windows alias with amiFamily unset; build it typed anyway.
    let mut windows = class("al2023@latest")?;
    windows.spec.ami_selector_terms[0].alias = Some("windows2022@latest".into());
    match cloud.images(&windows).await {
        Err(CloudError::NodeClass {
            reason: NodeClassReason::WindowsAlias { .. },
            ..
        }) => {}
        other => bail!("expected WindowsAlias, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_tags_term_resolves_through_describe_images_with_the_images_architecture() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let ec2 = stack.ec2().await?;
    let tag = unique("ami");
    // An image moto really has (the stack's seeded AMI id is only an SSM parameter's value).
    let x86 = ec2
        .describe_images()
        .filters(Filter::builder().name("architecture").values("x86_64").build())
        .send()
        .await?
        .images()
        .iter()
        .find_map(|i| i.image_id())
        .context("moto lists no x86_64 image")?
        .to_string();
    ec2.create_tags()
        .resources(&x86)
        .tags(Tag::builder().key("carpool-test").value(&tag).build())
        .send()
        .await?;
    let described = ec2.describe_images().image_ids(&x86).send().await?;
    let arch = match described.images().first().and_then(|i| i.architecture()) {
        Some(ArchitectureValues::Arm64) => Arch::Arm64,
        _ => Arch::Amd64,
    };
    let node_class: EC2NodeClass = EC2NodeClassBuilder::new("tagged")
        .subnet_discovery("carpool-local")
        .security_group_discovery("*")
        .set("amiFamily", json!("AL2023"))
        .set("amiSelectorTerms", json!([{"tags": {"carpool-test": tag}}]))
        .typed()?;
    let cloud = cloud(&stack, "/unused").await?;
    let images = cloud.images(&node_class).await?;
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0].id, x86);
    assert_eq!(images[0].arch, Some(arch));
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_bottlerocket_node_gets_its_toml_settings_merged_with_the_class_user_data() -> Result<()> {
    // Karpenter's `Bottlerocket.Script` (bootstrap/bottlerocket.go): the class's settings
    // stay; the cluster's, the NodePool's labels and taints are the autoscaler's.
    let _stack = shared().await;
    let stack = Stack::load()?;
    let root = format!("/{}", unique("public"));
    let (x86, _) = two_images(&stack).await?;
    let name = format!("{root}/bottlerocket/aws-k8s-{KUBERNETES_VERSION}/x86_64/latest/image_id");
    aws_sdk_ssm::Client::new(&stack.aws_config().await?)
        .put_parameter()
        .name(&name)
        .value(&x86)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .send()
        .await
        .with_context(|| format!("seeding {name}"))?;
    let cloud = cloud(&stack, &root).await?;
    let node_class: EC2NodeClass = EC2NodeClassBuilder::new("bottlerocket")
        .subnet_discovery("carpool-local")
        .security_group_discovery("*")
        .ami_alias("bottlerocket@latest")
        .set(
            "userData",
            json!("[settings.host-containers.admin]\nenabled = true\n\n[settings.kubernetes.node-labels]\nteam = \"web\"\n"),
        )
        .typed()?;
    let zone = format!("{}b", stack.region()?);
    let instance = cloud.launch(&request(&node_class, &zone, &["m5.large"])).await?;
    let text = carpool_tests::user_data::read(cloud.ec2(), &instance.id)
        .await?
        .context("the instance has no user data")?;
    cloud.terminate(&instance.id).await?;
    let doc: toml_edit::DocumentMut = text.parse().with_context(|| format!("not TOML: {text}"))?;
    let k8s = &doc["settings"]["kubernetes"];
    ensure!(k8s["api-server"].as_str() == Some(ENDPOINT), "{text}");
    ensure!(k8s["cluster-certificate"].as_str() == Some(CA_BASE64), "{text}");
    ensure!(
        k8s["cluster-name"].as_str().is_some_and(|n| n.starts_with("amis")),
        "{text}"
    );
    ensure!(k8s["node-labels"]["team"].as_str() == Some("web"), "{text}");
    ensure!(
        k8s["node-labels"]["karpenter.sh/nodepool"].as_str() == Some("general"),
        "{text}"
    );
    ensure!(
        doc["settings"]["host-containers"]["admin"]["enabled"].as_bool() == Some(true),
        "{text}"
    );
    Ok(())
}

/// Issue 26, item 2: an `ssmParameter` term that names a parameter SSM does not have (a
/// typo, another Region's) is the class's own problem, typed as such, so the provisioner
/// backs off its NodePools alone (`shared/tests/it/class_failure.rs` shows the rest).
/// moto answers `ParameterNotFound` as SSM does.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn an_ssm_parameter_that_does_not_exist_is_the_classs_own_error() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let cloud = cloud(&stack, &format!("/{}", unique("root"))).await?;
    let missing = format!("/{}/al2023/image_id", unique("typo"));
    let mut node_class = class("al2023@latest")?;
    node_class.spec.ami_selector_terms[0].alias = None;
    node_class.spec.ami_selector_terms[0].ssm_parameter = Some(missing.clone());
    match cloud.images(&node_class).await {
        Err(CloudError::NodeClass {
            node_class: name,
            reason: NodeClassReason::SsmParameterNotFound { parameter },
            ..
        }) => {
            ensure!(name == "default" && parameter == missing, "{name} {parameter}");
        }
        other => bail!("expected SsmParameterNotFound, got {other:?}"),
    }
    Ok(())
}

/// Issue 28: the family says the user-data format whatever the selector form, as
/// Karpenter's AWS provider picks each family's bootstrap (`pkg/providers/amifamily`):
/// a class selecting its AMI by `id` with `amiFamily: Bottlerocket` boots with TOML
/// settings, `AL2` with `bootstrap.sh`, `AL2023` with nodeadm's MIME document, and
/// `Custom` with the class's `userData` verbatim. Before, every form but an alias got
/// AL2023's MIME document, and such nodes never joined.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn each_family_selected_by_id_boots_with_its_own_user_data_format() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let root = format!("/{}", unique("public"));
    let (x86, _) = two_images(&stack).await?;
    let cloud = cloud(&stack, &root).await?;
    let zone = format!("{}b", stack.region()?);
    let custom = "#!/bin/bash\n/opt/my-own-bootstrap --cluster demo\n";
    for family in ["AL2023", "AL2", "Bottlerocket", "Custom"] {
        let mut class = EC2NodeClassBuilder::new(&format!("by-id-{}", family.to_lowercase()))
            .subnet_discovery("carpool-local")
            .security_group_discovery("*")
            .set("amiSelectorTerms", json!([{"id": x86}]))
            .set("amiFamily", json!(family));
        if family == "Custom" {
            class = class.set("userData", json!(custom));
        }
        let node_class: EC2NodeClass = class.typed()?;
        let instance = cloud.launch(&request(&node_class, &zone, &["m5.large"])).await?;
        let text = carpool_tests::user_data::read(cloud.ec2(), &instance.id)
            .await?
            .context("the instance has no user data")?;
        cloud.terminate(&instance.id).await?;
        match family {
            "AL2023" => ensure!(
                text.contains("multipart/mixed") && text.contains("application/node.eks.aws"),
                "{family}: {text}"
            ),
            "AL2" => ensure!(text.contains("/etc/eks/bootstrap.sh"), "{family}: {text}"),
            "Bottlerocket" => {
                let doc: toml_edit::DocumentMut =
                    text.parse().with_context(|| format!("{family}: not TOML: {text}"))?;
                ensure!(
                    doc["settings"]["kubernetes"]["api-server"].as_str() == Some(ENDPOINT),
                    "{text}"
                );
            }
            _ => ensure!(text == custom, "Custom passes userData verbatim: {text}"),
        }
    }
    Ok(())
}
