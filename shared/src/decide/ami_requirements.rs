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
use crate::model::{InstanceType, NodePool};
use crate::ports::ResolvedImage;

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
    use crate::model::Arch;
    use crate::ports::ImageVariant;

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
}
