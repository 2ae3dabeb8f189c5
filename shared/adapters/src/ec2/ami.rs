//! The AMIs of an EC2NodeClass, resolved as Karpenter resolves them
//! (`pkg/providers/amifamily` in aws/karpenter-provider-aws), each with the architecture
//! and variants it boots:
//!
//! - an `alias` (`al2023@latest`, `al2023@v20240807`, `bottlerocket@latest`,
//!   `bottlerocket@v1.20.3`, `al2@…`) through AWS's public SSM parameters, for the
//!   cluster's own Kubernetes version: one image per architecture, plus the NVIDIA and
//!   Neuron variants where the family publishes them ([`alias_queries`] names the paths);
//!   a `windows*` alias makes the class invalid. The root of the public parameters is
//!   configurable (`/aws/service` in AWS; tests seed copies elsewhere, as nothing can be
//!   created under `/aws/`);
//! - `tags`, `name` and `owner` terms through DescribeImages: the newest available image
//!   of each architecture that matches, deprecated images left out;
//! - `id` and `ssmParameter` terms as they are, their architecture unknown (an image
//!   that constrains no instance type).
//!
//! With an alias and no known Kubernetes version (an endpoint override stands in for
//! DescribeCluster), the configured default parameter stands in, as before.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{ArchitectureValues, Filter};
use carpool::catalog::Catalog;
use carpool::model::{Arch, EC2NodeClass};
use carpool::ports::{CloudError, ImageVariant, NodeClassReason, ResolvedImage};

use super::errors::map_sdk_err;
use super::resolve::term_filters;

/// GetParameters takes at most this many names per call.
const GET_PARAMETERS_MAX: usize = 10;

/// The AMI family an alias names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AliasFamily {
    /// `al2023`: EKS-optimized Amazon Linux 2023.
    Al2023,
    /// `al2`: EKS-optimized Amazon Linux 2 (published up to Kubernetes 1.32).
    Al2,
    /// `bottlerocket`.
    Bottlerocket,
}

/// An `amiSelectorTerms[].alias`: family and version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alias {
    /// The family.
    pub family: AliasFamily,
    /// `latest`, or a version (`v20240807`, `v1.20.3`, `1.20.3`).
    pub version: String,
}

impl Alias {
    /// Whether it follows the family's latest release.
    pub fn is_latest(&self) -> bool {
        self.version == "latest"
    }
}

/// The alias of `family@version`; a Windows family is [`NodeClassReason::WindowsAlias`],
/// anything else unknown [`NodeClassReason::NoImage`] (validation refuses both before).
pub fn parse_alias(alias: &str) -> Result<Alias, NodeClassReason> {
    let (family, version) = alias.split_once('@').unwrap_or((alias, ""));
    let family = match family {
        "al2023" => AliasFamily::Al2023,
        "al2" => AliasFamily::Al2,
        "bottlerocket" => AliasFamily::Bottlerocket,
        f if f.starts_with("windows") => {
            return Err(NodeClassReason::WindowsAlias {
                alias: alias.to_string(),
            });
        }
        _ => {
            return Err(NodeClassReason::NoImage {
                detail: format!("unknown alias {alias:?}"),
            });
        }
    };
    if version.is_empty() {
        return Err(NodeClassReason::NoImage {
            detail: format!("alias {alias:?} has no version"),
        });
    }
    Ok(Alias {
        family,
        version: version.to_string(),
    })
}

/// One public parameter an alias reads, and what the image it names boots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// The parameter's path.
    pub path: String,
    /// The image's architecture.
    pub arch: Arch,
    /// Its variants.
    pub variants: Vec<ImageVariant>,
}

fn query(path: String, arch: Arch, variants: &[ImageVariant]) -> Query {
    Query {
        path,
        arch,
        variants: variants.to_vec(),
    }
}

/// The public parameters of an alias for Kubernetes `k8s` (`1.31`), under `root`
/// (`/aws/service` in AWS), as Karpenter's `DescribeImageQuery` of each family reads them.
pub fn alias_queries(root: &str, alias: &Alias, k8s: &str) -> Vec<Query> {
    use ImageVariant::{Neuron, Nvidia, Standard};
    let root = root.trim_end_matches('/');
    let v = &alias.version;
    match alias.family {
        // al2023.go: `/aws/service/eks/optimized-ami/%s/amazon-linux-2023/%s/%s/%s/image_id`
        // (version, arch, variant, `recommended` or
        // `amazon-eks-node-al2023-<arch>-<variant>-<version>-<ami version>`); x86_64 has
        // standard, nvidia and neuron images, arm64 standard and nvidia.
        AliasFamily::Al2023 => [
            ("x86_64", Arch::Amd64, vec![Standard, Nvidia, Neuron]),
            ("arm64", Arch::Arm64, vec![Standard, Nvidia]),
        ]
        .into_iter()
        .flat_map(|(arch_name, arch, variants)| {
            variants.into_iter().map(move |variant| {
                let variant_name = match variant {
                    Standard => "standard",
                    Nvidia => "nvidia",
                    Neuron => "neuron",
                };
                let name = if alias.is_latest() {
                    "recommended".to_string()
                } else {
                    format!("amazon-eks-node-al2023-{arch_name}-{variant_name}-{k8s}-{v}")
                };
                query(
                    format!(
                        "{root}/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch_name}/{variant_name}/{name}/image_id"
                    ),
                    arch,
                    &[variant],
                )
            })
        })
        .collect(),
        // al2.go: `amazon-linux-2` (x86_64), `amazon-linux-2-arm64`, and `amazon-linux-2-gpu`
        // (x86_64, NVIDIA and Neuron), each `recommended` or `amazon-eks[-arm64|-gpu]-node-<version>-<ami version>`.
        AliasFamily::Al2 => {
            let name = |prefix: &str| {
                if alias.is_latest() {
                    "recommended".to_string()
                } else {
                    format!("{prefix}-{k8s}-{v}")
                }
            };
            vec![
                query(
                    format!(
                        "{root}/eks/optimized-ami/{k8s}/amazon-linux-2/{}/image_id",
                        name("amazon-eks-node")
                    ),
                    Arch::Amd64,
                    &[Standard],
                ),
                query(
                    format!(
                        "{root}/eks/optimized-ami/{k8s}/amazon-linux-2-arm64/{}/image_id",
                        name("amazon-eks-arm64-node")
                    ),
                    Arch::Arm64,
                    &[Standard],
                ),
                query(
                    format!(
                        "{root}/eks/optimized-ami/{k8s}/amazon-linux-2-gpu/{}/image_id",
                        name("amazon-eks-gpu-node")
                    ),
                    Arch::Amd64,
                    &[Neuron, Nvidia],
                ),
            ]
        }
        // bottlerocket.go: `/aws/service/bottlerocket/aws-k8s-%s[-nvidia]/%s/%s/image_id`
        // (version, arch, the AMI version without its leading `v`, or `latest`); the
        // x86_64 standard image also boots Neuron types.
        AliasFamily::Bottlerocket => {
            let v = v.trim_start_matches('v');
            vec![
                query(
                    format!("{root}/bottlerocket/aws-k8s-{k8s}/x86_64/{v}/image_id"),
                    Arch::Amd64,
                    &[Standard, Neuron],
                ),
                query(
                    format!("{root}/bottlerocket/aws-k8s-{k8s}/arm64/{v}/image_id"),
                    Arch::Arm64,
                    &[Standard],
                ),
                query(
                    format!("{root}/bottlerocket/aws-k8s-{k8s}-nvidia/x86_64/{v}/image_id"),
                    Arch::Amd64,
                    &[Nvidia],
                ),
                query(
                    format!("{root}/bottlerocket/aws-k8s-{k8s}-nvidia/arm64/{v}/image_id"),
                    Arch::Arm64,
                    &[Nvidia],
                ),
            ]
        }
    }
}

/// The images the queries' parameters name (those that exist), one per image id with the
/// variants of every query naming it, in the queries' order.
pub fn images_of(queries: &[Query], values: &BTreeMap<String, String>) -> Vec<ResolvedImage> {
    let mut images: Vec<ResolvedImage> = Vec::new();
    for q in queries {
        let Some(id) = values.get(&q.path) else {
            continue;
        };
        match images.iter_mut().find(|i| i.id == *id && i.arch == Some(q.arch)) {
            Some(image) => {
                for v in &q.variants {
                    if !image.variants.contains(v) {
                        image.variants.push(*v);
                    }
                }
            }
            None => images.push(ResolvedImage::new(id.clone(), q.arch, &q.variants)),
        }
    }
    images
}

fn node_class_error(node_class: &EC2NodeClass, reason: NodeClassReason) -> CloudError {
    CloudError::NodeClass {
        node_class: node_class.name().to_string(),
        reason,
        source: None,
    }
}

/// The values of the parameters that exist among `names`, by name (GetParameters, ten
/// names a call; names that do not exist are left out).
async fn parameter_values(ssm: &aws_sdk_ssm::Client, names: &[String]) -> Result<BTreeMap<String, String>, CloudError> {
    let mut values = BTreeMap::new();
    for chunk in names.chunks(GET_PARAMETERS_MAX) {
        let out = ssm
            .get_parameters()
            .set_names(Some(chunk.to_vec()))
            .send()
            .await
            .map_err(|e| map_sdk_err("GetParameters", e))?;
        for p in out.parameters() {
            if let (Some(name), Some(value)) = (p.name(), p.value()) {
                values.insert(name.to_string(), value.to_string());
            }
        }
    }
    Ok(values)
}

/// The value of one parameter, as the `ssmParameter` term and the default read it.
async fn parameter_value(
    ssm: &aws_sdk_ssm::Client,
    node_class: &EC2NodeClass,
    parameter: &str,
) -> Result<String, CloudError> {
    let out = match ssm.get_parameter().name(parameter).send().await {
        Ok(out) => out,
        // A typo, or a parameter of another Region or account: the class's own problem.
        Err(e)
            if e.as_service_error()
                .is_some_and(aws_sdk_ssm::operation::get_parameter::GetParameterError::is_parameter_not_found) =>
        {
            return Err(node_class_error(
                node_class,
                NodeClassReason::SsmParameterNotFound {
                    parameter: parameter.to_string(),
                },
            ));
        }
        Err(e) => return Err(map_sdk_err(parameter, e)),
    };
    out.parameter()
        .and_then(|p| p.value())
        .map(str::to_string)
        .ok_or_else(|| {
            node_class_error(
                node_class,
                NodeClassReason::EmptySsmParameter {
                    parameter: parameter.to_string(),
                },
            )
        })
}

/// Where a class's AMIs are looked up.
#[derive(Clone, Debug)]
pub struct AmiSources<'a> {
    /// SSM, for aliases and parameters.
    pub ssm: &'a aws_sdk_ssm::Client,
    /// EC2, for DescribeImages.
    pub ec2: &'a aws_sdk_ec2::Client,
    /// The root of AWS's public parameters (`/aws/service`).
    pub public_root: &'a str,
    /// The cluster's Kubernetes version, when known.
    pub kubernetes_version: Option<&'a str>,
    /// The parameter that stands in for an alias when the version is unknown.
    pub default_parameter: &'a str,
}

/// The newest available, not deprecated, image of each architecture that one term
/// (tags, name, owner) selects.
async fn described(
    ec2: &aws_sdk_ec2::Client,
    term: &carpool::model::ec2nodeclass::AmiSelectorTerm,
) -> Result<Vec<ResolvedImage>, CloudError> {
    let mut filters = term_filters(&term.tags, &[("name", term.name.as_ref())]);
    filters.push(Filter::builder().name("state").values("available").build());
    let owners: Vec<String> = match (&term.owner, &term.name) {
        (Some(owner), _) => vec![owner.clone()],
        // Karpenter's default owners for a name alone: this account and Amazon.
        (None, Some(_)) => vec!["self".to_string(), "amazon".to_string()],
        (None, None) => Vec::new(),
    };
    let now = aws_sdk_ec2::primitives::DateTime::from(std::time::SystemTime::now());
    let mut pages = ec2
        .describe_images()
        .set_filters(Some(filters))
        .set_owners((!owners.is_empty()).then_some(owners))
        .into_paginator()
        .send();
    // Newest per architecture: (creation date, id).
    let mut newest: BTreeMap<Arch, (String, String)> = BTreeMap::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| map_sdk_err("DescribeImages", e))?;
        for image in page.images() {
            let deprecated = image
                .deprecation_time()
                .and_then(|t| {
                    aws_sdk_ec2::primitives::DateTime::from_str(t, aws_sdk_ec2::primitives::DateTimeFormat::DateTime)
                        .ok()
                })
                .is_some_and(|t| t <= now);
            let arch = match image.architecture() {
                Some(ArchitectureValues::X8664) => Arch::Amd64,
                Some(ArchitectureValues::Arm64) => Arch::Arm64,
                _ => continue,
            };
            let (Some(id), false) = (image.image_id(), deprecated) else {
                continue;
            };
            let created = image.creation_date().unwrap_or_default().to_string();
            if newest.get(&arch).is_none_or(|(seen, _)| created > *seen) {
                newest.insert(arch, (created, id.to_string()));
            }
        }
    }
    Ok(newest
        .into_iter()
        .map(|(arch, (_, id))| ResolvedImage::new(id, arch, &[]))
        .collect())
}

/// The image of an `id` term, with its architecture read by DescribeImages, so that it
/// constrains the plan as an alias does (Karpenter resolves `id` terms through
/// DescribeImages too). An id EC2 does not know is the class's error; an answer without an
/// architecture leaves the image unconstrained.
async fn by_id(ec2: &aws_sdk_ec2::Client, node_class: &EC2NodeClass, id: &str) -> Result<ResolvedImage, CloudError> {
    let out = match ec2.describe_images().image_ids(id).send().await {
        Ok(out) => out,
        Err(e)
            if e.as_service_error()
                .and_then(aws_sdk_ec2::error::ProvideErrorMetadata::code)
                .is_some_and(|c| c.starts_with("InvalidAMIID")) =>
        {
            return Err(node_class_error(
                node_class,
                NodeClassReason::NoImage {
                    detail: format!("EC2 knows no image {id}"),
                },
            ));
        }
        Err(e) => return Err(map_sdk_err("DescribeImages", e)),
    };
    let arch = out
        .images()
        .iter()
        .find(|i| i.image_id() == Some(id))
        .and_then(|i| match i.architecture() {
            Some(ArchitectureValues::X8664) => Some(Arch::Amd64),
            Some(ArchitectureValues::Arm64) => Some(Arch::Arm64),
            _ => None,
        });
    Ok(match arch {
        Some(arch) => ResolvedImage::new(id.to_string(), arch, &[]),
        None => ResolvedImage::unconstrained(id.to_string()),
    })
}

/// The AMIs of a class, each with what it boots; never empty.
pub async fn images(sources: &AmiSources<'_>, node_class: &EC2NodeClass) -> Result<Vec<ResolvedImage>, CloudError> {
    let terms = &node_class.spec.ami_selector_terms;
    if let Some(alias) = terms.iter().find_map(|t| t.alias.as_deref()) {
        let parsed = parse_alias(alias).map_err(|r| node_class_error(node_class, r))?;
        let Some(version) = sources.kubernetes_version else {
            let id = parameter_value(sources.ssm, node_class, sources.default_parameter).await?;
            return Ok(vec![ResolvedImage::unconstrained(id)]);
        };
        let queries = alias_queries(sources.public_root, &parsed, version);
        let names: Vec<String> = queries.iter().map(|q| q.path.clone()).collect();
        let values = parameter_values(sources.ssm, &names).await?;
        let found = images_of(&queries, &values);
        if found.is_empty() {
            return Err(node_class_error(
                node_class,
                NodeClassReason::NoImage {
                    detail: format!(
                        "alias {alias} has no image for Kubernetes {version} under {}",
                        sources.public_root
                    ),
                },
            ));
        }
        return Ok(found);
    }
    let mut found = Vec::new();
    for term in terms {
        if let Some(id) = &term.id {
            found.push(by_id(sources.ec2, node_class, id).await?);
        } else if let Some(parameter) = &term.ssm_parameter {
            found.push(ResolvedImage::unconstrained(
                parameter_value(sources.ssm, node_class, parameter).await?,
            ));
        } else if !term.tags.is_empty() || term.name.is_some() || term.owner.is_some() {
            found.extend(described(sources.ec2, term).await?);
        }
    }
    if found.is_empty() {
        if terms.is_empty() {
            let id = parameter_value(sources.ssm, node_class, sources.default_parameter).await?;
            return Ok(vec![ResolvedImage::unconstrained(id)]);
        }
        return Err(node_class_error(
            node_class,
            NodeClassReason::NoImage {
                detail: "no available image matches its amiSelectorTerms".into(),
            },
        ));
    }
    Ok(found)
}

/// The image a request launches with, and the request's types that image boots, in the
/// request's order: the image that boots the first (preferred) type, else the first
/// image. A type the catalog does not know is kept (nothing says it cannot boot).
pub fn pick(images: &[ResolvedImage], instance_types: &[String]) -> Option<(ResolvedImage, Vec<String>)> {
    let catalog = Catalog::embedded().ok();
    let facts = |t: &str| catalog.and_then(|c| c.get(t));
    let image = instance_types
        .iter()
        .find_map(|t| {
            let it = facts(t)?;
            images.iter().find(|i| i.boots(it))
        })
        .or_else(|| images.first())?;
    let types = instance_types
        .iter()
        .filter(|t| facts(t).is_none_or(|it| image.boots(it)))
        .cloned()
        .collect();
    Some((image.clone(), types))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(alias: &str, k8s: &str) -> Vec<String> {
        alias_queries("/aws/service", &parse_alias(alias).unwrap(), k8s)
            .into_iter()
            .map(|q| q.path)
            .collect()
    }

    #[test]
    fn aliases_parse_into_family_and_version_and_windows_is_refused() {
        assert_eq!(
            parse_alias("al2023@latest").unwrap(),
            Alias {
                family: AliasFamily::Al2023,
                version: "latest".into()
            }
        );
        assert_eq!(
            parse_alias("bottlerocket@v1.20.3").unwrap().family,
            AliasFamily::Bottlerocket
        );
        assert_eq!(parse_alias("al2@v20240807").unwrap().family, AliasFamily::Al2);
        assert!(matches!(
            parse_alias("windows2022@latest"),
            Err(NodeClassReason::WindowsAlias { .. })
        ));
        assert!(matches!(parse_alias("al2023"), Err(NodeClassReason::NoImage { .. })));
        assert!(matches!(
            parse_alias("ubuntu@latest"),
            Err(NodeClassReason::NoImage { .. })
        ));
    }

    #[test]
    fn al2023_latest_reads_karpenters_recommended_parameters() {
        assert_eq!(
            paths("al2023@latest", "1.31"),
            [
                "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/neuron/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/nvidia/recommended/image_id",
            ]
        );
    }

    #[test]
    fn a_pinned_al2023_reads_the_named_release() {
        assert_eq!(
            paths("al2023@v20240807", "1.30")[3],
            "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/standard/\
             amazon-eks-node-al2023-arm64-standard-1.30-v20240807/image_id"
        );
    }

    #[test]
    fn bottlerocket_drops_the_v_and_reads_the_nvidia_flavour() {
        assert_eq!(
            paths("bottlerocket@v1.20.3", "1.31"),
            [
                "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.20.3/image_id",
                "/aws/service/bottlerocket/aws-k8s-1.31/arm64/1.20.3/image_id",
                "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/1.20.3/image_id",
                "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/arm64/1.20.3/image_id",
            ]
        );
        assert_eq!(
            paths("bottlerocket@latest", "1.31")[0],
            "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id"
        );
    }

    #[test]
    fn al2_reads_its_three_flavours() {
        assert_eq!(
            paths("al2@latest", "1.29"),
            [
                "/aws/service/eks/optimized-ami/1.29/amazon-linux-2/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-arm64/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-gpu/recommended/image_id",
            ]
        );
        assert_eq!(
            paths("al2@v20240807", "1.29")[1],
            "/aws/service/eks/optimized-ami/1.29/amazon-linux-2-arm64/amazon-eks-arm64-node-1.29-v20240807/image_id"
        );
    }

    #[test]
    fn the_root_is_configurable() {
        let q = alias_queries("/carpool-test/public/", &parse_alias("al2023@latest").unwrap(), "1.31");
        assert!(q[0].path.starts_with("/carpool-test/public/eks/optimized-ami/1.31/"));
    }

    #[test]
    fn missing_parameters_are_left_out_and_one_image_gathers_its_variants() {
        let queries = alias_queries("/r", &parse_alias("bottlerocket@latest").unwrap(), "1.31");
        let values = BTreeMap::from([
            (queries[0].path.clone(), "ami-x86".to_string()),
            (queries[1].path.clone(), "ami-arm".to_string()),
        ]);
        let got = images_of(&queries, &values);
        assert_eq!(
            got,
            vec![
                ResolvedImage::new("ami-x86", Arch::Amd64, &[ImageVariant::Standard, ImageVariant::Neuron]),
                ResolvedImage::new("ami-arm", Arch::Arm64, &[ImageVariant::Standard]),
            ]
        );
    }

    #[test]
    fn a_request_gets_the_image_of_its_first_type_and_the_types_that_image_boots() {
        let images = vec![
            ResolvedImage::new("ami-x86", Arch::Amd64, &[ImageVariant::Standard]),
            ResolvedImage::new("ami-arm", Arch::Arm64, &[ImageVariant::Standard]),
        ];
        let types: Vec<String> = ["m7g.large", "m5.large", "c7g.large", "x9.unknown"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (image, kept) = pick(&images, &types).unwrap();
        assert_eq!(image.id, "ami-arm");
        assert_eq!(kept, ["m7g.large", "c7g.large", "x9.unknown"]);
        let (image, kept) = pick(&images, &types[1..2]).unwrap();
        assert_eq!((image.id.as_str(), kept.len()), ("ami-x86", 1));
        assert!(pick(&[], &types).is_none());
    }
}
