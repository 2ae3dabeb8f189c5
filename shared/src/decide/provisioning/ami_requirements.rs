//! A NodePool can launch only instance types that one of its EC2NodeClass's AMIs boots:
//! Karpenter gives each resolved AMI requirements (its architecture, and for GPU and
//! Neuron variants the accelerator) and offers a class only the types some AMI satisfies.
//! Carpool does the same before planning, by narrowing each pool's requirements: the
//! architectures no image boots are left out (`kubernetes.io/arch In [...]`, so a pod
//! that needs one is unschedulable with a requirements conflict on that key), and the
//! remaining types no image boots (a GPU type under a class with only standard images)
//! are left out by name. A pool whose images boot every type is left as it is.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::requirements::{NodeSelectorRequirement, Operator};
use crate::model::well_known as wk;
use crate::model::{Arch, EC2NodeClass, InstanceType, NodePool};
use crate::model::{ImageVariant, ResolvedImage};

/// The images Karpenter resolved for a class, as its `status.amis` records them (a
/// cluster dump of a Karpenter cluster carries them): each AMI's `id` and
/// `requirements`, the architecture (`kubernetes.io/arch In`) and the variant
/// (`karpenter.k8s.aws/instance-gpu-count` or `-accelerator-count` `Exists`: NVIDIA or
/// Neuron; both `DoesNotExist`: standard), as Karpenter's `EC2NodeClassStatus.AMIs`
/// holds them (`pkg/apis/v1/ec2nodeclass_status.go`, filled by
/// `pkg/controllers/nodeclass/ami.go`). Deprecated AMIs are left out. `None` when the
/// class has no such status: its images are unknown, and constrain nothing.
pub fn images_from_status(class: &EC2NodeClass) -> Option<Vec<ResolvedImage>> {
    let amis = class.status.as_ref()?.get("amis")?.as_array()?;
    let images = amis
        .iter()
        .filter(|a| a.get("deprecated").and_then(serde_json::Value::as_bool) != Some(true))
        .filter_map(|a| {
            let id = a.get("id")?.as_str()?.to_string();
            let requirements = a
                .get("requirements")
                .and_then(|r| r.as_array())
                .cloned()
                .unwrap_or_default();
            let requirement = |key: &str| {
                requirements
                    .iter()
                    .find(|r| r.get("key").and_then(|k| k.as_str()) == Some(key))
                    .map(|r| {
                        let op = r
                            .get("operator")
                            .and_then(|o| o.as_str())
                            .unwrap_or_default()
                            .to_string();
                        let values: Vec<String> = r
                            .get("values")
                            .and_then(|v| v.as_array())
                            .into_iter()
                            .flatten()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect();
                        (op, values)
                    })
            };
            let arch = requirement(wk::ARCH)
                .filter(|(op, _)| op == "In")
                .and_then(|(_, values)| match values.first().map(String::as_str) {
                    Some("amd64") => Some(Arch::Amd64),
                    Some("arm64") => Some(Arch::Arm64),
                    _ => None,
                });
            let gpu = requirement("karpenter.k8s.aws/instance-gpu-count").map(|(op, _)| op);
            let neuron = requirement("karpenter.k8s.aws/instance-accelerator-count").map(|(op, _)| op);
            let variants = match (gpu.as_deref(), neuron.as_deref()) {
                (Some("Exists"), _) => vec![ImageVariant::Nvidia],
                (_, Some("Exists")) => vec![ImageVariant::Neuron],
                (Some("DoesNotExist"), _) | (_, Some("DoesNotExist")) => vec![ImageVariant::Standard],
                _ => Vec::new(),
            };
            Some(ResolvedImage { id, arch, variants })
        })
        .collect();
    Some(images)
}

/// The images of each class of `classes` whose status records them
/// ([`images_from_status`]), by class name.
pub fn images_by_class_from_status(classes: &[EC2NodeClass]) -> BTreeMap<String, Vec<ResolvedImage>> {
    classes
        .iter()
        .filter_map(|c| Some((c.name().to_string(), images_from_status(c)?)))
        .collect()
}

/// The requirements that keep a pool to the types `images` boot, among `types`: none when
/// they boot every one.
pub fn image_requirements(images: &[ResolvedImage], types: &[&InstanceType]) -> Vec<NodeSelectorRequirement> {
    let boots = |it: &InstanceType| images.iter().any(|i| i.boots(it));
    if types.iter().all(|it| boots(it)) {
        return Vec::new();
    }
    let all_archs: BTreeSet<&str> = types.iter().map(|it| it.arch.label()).collect();
    let archs: BTreeSet<&str> = types.iter().filter(|it| boots(it)).map(|it| it.arch.label()).collect();
    let mut out = Vec::new();
    if archs.is_empty() {
        // No image boots any type: nothing can be planned for the class.
        out.push(NodeSelectorRequirement {
            key: wk::ARCH.to_string(),
            operator: Operator::DoesNotExist,
            values: Vec::new(),
            min_values: None,
        });
        return out;
    }
    if archs != all_archs {
        out.push(NodeSelectorRequirement {
            key: wk::ARCH.to_string(),
            operator: Operator::In,
            values: archs.iter().map(|a| a.to_string()).collect(),
            min_values: None,
        });
    }
    let unbootable: BTreeSet<String> = types
        .iter()
        .filter(|it| archs.contains(it.arch.label()) && !boots(it))
        .map(|it| it.name.clone())
        .collect();
    if !unbootable.is_empty() {
        out.push(NodeSelectorRequirement {
            key: wk::INSTANCE_TYPE.to_string(),
            operator: Operator::NotIn,
            values: unbootable.into_iter().collect(),
            min_values: None,
        });
    }
    out
}

/// The pools with their requirements narrowed to the types their class's images boot,
/// among `types` (the region's); a pool whose class is not in `images_by_class` is left
/// as it is.
pub fn narrow_to_images(
    pools: &mut [NodePool],
    images_by_class: &BTreeMap<String, Vec<ResolvedImage>>,
    types: &[&InstanceType],
) {
    let mut by_class: BTreeMap<&str, Vec<NodeSelectorRequirement>> = BTreeMap::new();
    for (class, images) in images_by_class {
        by_class.insert(class, image_requirements(images, types));
    }
    for pool in pools {
        let class = pool.spec.template.spec.node_class_ref.name.as_str();
        if let Some(requirements) = by_class.get(class) {
            pool.spec
                .template
                .spec
                .requirements
                .extend(requirements.iter().cloned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn types() -> Vec<&'static InstanceType> {
        let catalog = Catalog::embedded().unwrap();
        ["m5.large", "m7g.large", "g5.xlarge", "g5g.xlarge", "inf2.xlarge"]
            .iter()
            .map(|n| catalog.get(n).unwrap())
            .collect()
    }

    #[test]
    fn images_that_boot_every_type_add_nothing() {
        let all = [ImageVariant::Standard, ImageVariant::Nvidia, ImageVariant::Neuron];
        let images = vec![
            ResolvedImage::new("ami-x", Arch::Amd64, &all),
            ResolvedImage::new("ami-a", Arch::Arm64, &all),
        ];
        assert!(image_requirements(&images, &types()).is_empty());
        assert!(image_requirements(&[ResolvedImage::unconstrained("ami-1")], &types()).is_empty());
    }

    #[test]
    fn x86_standard_images_keep_out_arm64_and_accelerated_types() {
        let images = vec![ResolvedImage::new("ami-x", Arch::Amd64, &[ImageVariant::Standard])];
        let got = image_requirements(&images, &types());
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!((got[0].key.as_str(), got[0].operator), (wk::ARCH, Operator::In));
        assert_eq!(got[0].values, vec!["amd64".to_string()]);
        assert_eq!(
            (got[1].key.as_str(), got[1].operator),
            (wk::INSTANCE_TYPE, Operator::NotIn)
        );
        assert_eq!(got[1].values, vec!["g5.xlarge".to_string(), "inf2.xlarge".to_string()]);
    }

    #[test]
    fn no_image_that_boots_anything_plans_nothing() {
        let images = vec![ResolvedImage::new("ami-x", Arch::Arm64, &[ImageVariant::Neuron])];
        let got = image_requirements(&images, &types());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].operator, Operator::DoesNotExist);
    }

    #[test]
    fn a_dumps_karpenter_status_amis_constrain_the_plan_to_the_architectures_they_boot() {
        // Karpenter's EC2NodeClass status, as `kubectl get ec2nodeclass -o json` prints it
        // (pkg/apis/v1/ec2nodeclass_status.go: AMI{ID, Name, Requirements, Deprecated}).
        let class: EC2NodeClass = crate::model::manifest::from_value(&serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {"role": "R", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
            "status": {"amis": [
                {"id": "ami-x86", "name": "al2023-x86", "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"},
                    {"key": "karpenter.k8s.aws/instance-accelerator-count", "operator": "DoesNotExist"}]},
                {"id": "ami-nvidia", "name": "al2023-nvidia", "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Exists"}]},
                {"id": "ami-old-arm", "deprecated": true, "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}
            ]}
        }))
        .unwrap();
        let images = images_from_status(&class).unwrap();
        assert_eq!(
            images,
            vec![
                ResolvedImage::new("ami-x86", Arch::Amd64, &[ImageVariant::Standard]),
                ResolvedImage::new("ami-nvidia", Arch::Amd64, &[ImageVariant::Nvidia]),
            ],
            "the deprecated arm64 AMI is left out"
        );
        assert!(images_from_status(&EC2NodeClass::named("bare")).is_none());
    }
}
