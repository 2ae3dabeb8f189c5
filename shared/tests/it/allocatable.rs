//! The catalog's allocatable resources against Karpenter's published AL2023 figures
//! (`website/content/en/preview/reference/instance-types.md`, extracted into
//! `fixtures/karpenter-allocatable-al2023.json`).
//!
//! Tolerance: zero. CPU, memory, ephemeral storage and pods must equal the published
//! figures exactly, for every type that has them. The arm64 types match through the fixed
//! 59 MiB reservation documented in `catalog::allocatable`.

use std::collections::BTreeMap;

use carpool::catalog::Catalog;
use carpool::catalog::allocatable::{NodeSettings, ebs_volume_limit, extra_ebs_volumes, with_settings};
use carpool::model::ec2nodeclass::{BlockDevice, BlockDeviceMapping};
use carpool::model::resources::{EFA, POD_ENI};
use serde::Deserialize;

#[derive(Deserialize)]
struct Published {
    cpu_millicores: i64,
    memory_mib: i64,
    ephemeral_storage_gib: i64,
    pods: i64,
    pod_eni: Option<i64>,
    efa: Option<i64>,
}

#[test]
fn allocatable_equals_karpenters_published_figures_for_every_type() {
    let published: BTreeMap<String, Published> =
        serde_json::from_str(include_str!("../fixtures/karpenter-allocatable-al2023.json")).unwrap();
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
        // Karpenter's efas(): vpc.amazonaws.com/efa is MaximumEfaInterfaces.
        assert_eq!(a.get(EFA), want.efa.unwrap_or(0), "{name} efa");
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

#[test]
fn instance_store_raid0_makes_the_instance_store_the_ephemeral_storage() {
    // Karpenter: pkg/providers/instancetype/types.go ephemeralStorage: RAID0 and
    // InstanceStorageInfo.TotalSizeInGB set: that many GB ("75G", decimal), else the root volume.
    let catalog = Catalog::embedded().unwrap();
    let raid0 = NodeSettings {
        instance_store_raid0: true,
        ..NodeSettings::default()
    };
    let m5d = with_settings(catalog.get("m5d.large").unwrap(), &raid0);
    assert_eq!(m5d.capacity.ephemeral_storage, 75_000_000_000);
    // kube-reserved 1 GiB and the 10% nodefs eviction threshold come off it.
    assert_eq!(
        m5d.allocatable.ephemeral_storage,
        75_000_000_000 - (1 << 30) - 7_500_000_000
    );
    let m5 = with_settings(catalog.get("m5.large").unwrap(), &raid0);
    assert_eq!(
        m5.capacity.ephemeral_storage,
        20 << 30,
        "no instance store: the root volume"
    );
    let plain = catalog.get("m5d.large").unwrap();
    assert_eq!(
        plain.capacity.ephemeral_storage,
        20 << 30,
        "without RAID0: the root volume"
    );
}

#[test]
fn a_new_nodes_ebs_volume_limit_is_what_the_ebs_csi_driver_reports() {
    // aws-ebs-csi-driver: (*NodeService).getVolumesLimit and limits.GetVolumeLimits: the
    // type's attachments (27 shared when unknown, 39 for Xen) less the root volume and the
    // other EBS mappings (IMDS `ebsN`), less the ENIs past the first on a shared type.
    let catalog = Catalog::embedded().unwrap();
    let none = NodeSettings::default();
    let limit = |t: &str, s: &NodeSettings| ebs_volume_limit(catalog.get(t).unwrap(), s);
    assert_eq!(limit("m5.large", &none), 26);
    assert_eq!(limit("m7i.large", &none), 31, "dedicated: 32");
    assert_eq!(limit("m7i.48xlarge", &none), 127);
    assert_eq!(limit("i3.large", &none), 38, "Xen: 39");
    let mappings = [
        BlockDeviceMapping {
            device_name: Some("/dev/xvda".into()),
            ebs: Some(BlockDevice::default()),
            root_volume: false,
        },
        BlockDeviceMapping {
            device_name: Some("/dev/xvdb".into()),
            ebs: Some(BlockDevice::default()),
            root_volume: false,
        },
    ];
    let one_more = NodeSettings {
        extra_ebs_volumes: extra_ebs_volumes(&mappings),
        ..NodeSettings::default()
    };
    assert_eq!(one_more.extra_ebs_volumes, 1, "/dev/xvda is the root");
    assert_eq!(limit("m5.large", &one_more), 25);
}
