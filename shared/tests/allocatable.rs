//! The catalog's allocatable resources against Karpenter's published AL2023 figures
//! (`website/content/en/preview/reference/instance-types.md`, extracted into
//! `fixtures/karpenter-allocatable-al2023.json`).
//!
//! Tolerance: zero. CPU, memory, ephemeral storage and pods must equal the published
//! figures exactly, for every type that has them. The arm64 types match through the fixed
//! 59 MiB reservation documented in `catalog::allocatable`.

use std::collections::BTreeMap;

use carpool::catalog::Catalog;
use carpool::model::resources::POD_ENI;
use serde::Deserialize;

#[derive(Deserialize)]
struct Published {
    cpu_millicores: i64,
    memory_mib: i64,
    ephemeral_storage_gib: i64,
    pods: i64,
    pod_eni: Option<i64>,
}

#[test]
fn allocatable_equals_karpenters_published_figures_for_every_type() {
    let published: BTreeMap<String, Published> =
        serde_json::from_str(include_str!("fixtures/karpenter-allocatable-al2023.json")).unwrap();
    let catalog = Catalog::embedded().unwrap();
    let mut checked = 0;
    let mut misses = Vec::new();
    for (name, want) in &published {
        let it = catalog
            .get(name)
            .unwrap_or_else(|| panic!("{name} is published but not in the catalog"));
        let a = &it.allocatable;
        let got = (
            a.cpu_millis,
            a.memory / (1 << 20),
            a.ephemeral_storage / (1 << 30),
            a.pods,
        );
        let exp = (
            want.cpu_millicores,
            want.memory_mib,
            want.ephemeral_storage_gib,
            want.pods,
        );
        if got != exp || a.memory % (1 << 20) != 0 {
            misses.push(format!("{name}: got {got:?}, published {exp:?}"));
        }
        if let Some(eni) = want.pod_eni.filter(|e| *e > 0) {
            assert_eq!(a.get(POD_ENI), eni, "{name} pod-eni");
        }
        checked += 1;
    }
    assert!(checked > 1300, "only {checked} types have published figures");
    assert!(
        misses.is_empty(),
        "{} of {checked} differ:\n{}",
        misses.len(),
        misses.join("\n")
    );
}

#[test]
fn m5_large_has_the_well_known_eks_allocatable() {
    let it = Catalog::embedded().unwrap().get("m5.large").unwrap();
    assert_eq!(it.allocatable.cpu_millis, 1930);
    assert_eq!(it.allocatable.memory, 6903 << 20);
    assert_eq!(it.allocatable.pods, 29);
    assert_eq!(it.capacity.memory, 7577 << 20, "8 GiB less 7.5% VM overhead");
}
