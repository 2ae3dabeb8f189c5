//! What a node of an instance type can hold, computed as Karpenter computes it for EKS
//! AL2023 nodes (`pkg/providers/instancetype/types.go`).
//!
//! - **capacity**: vCPUs × 1000 millicores; memory as EC2 reports it less the VM overhead
//!   (`ceil(MiB × 7.5%)`, Karpenter's `vmMemoryOverheadPercent`); the root volume (20 GiB
//!   by default) as ephemeral storage, or with `instanceStorePolicy: RAID0` the instance
//!   store (`TotalSizeInGB` × 10⁹ bytes, Karpenter's `ephemeralStorage`) on a type that has
//!   one; max pods; GPUs, Neuron devices, branch ENIs and EFA interfaces
//!   (`vpc.amazonaws.com/efa`, Karpenter's `efas`).
//! - **max pods**: the kubelet's `maxPods` if set, else the VPC CNI's ENI limit
//!   (ENIs × (IPv4 per ENI − 1) + 2); then capped by `podsPerCore × vCPUs` if set.
//! - **kube-reserved**: CPU 6% of the first core, 1% of the second, 0.5% of the third and
//!   fourth, 0.25% of the rest; memory 11 MiB per pod + 255 MiB; 1 GiB of ephemeral
//!   storage. `kubeReserved` in the EC2NodeClass replaces a resource's default.
//! - **system-reserved**: only what `systemReserved` sets.
//! - **eviction**: `memory.available` 100 MiB and `nodefs.available` 10% by default; the
//!   larger of `evictionHard` and `evictionSoft` where set.
//! - **arm64**: Karpenter's published AL2023 figures for every arm64 type are exactly
//!   [`ARM64_EXTRA_RESERVED_MIB`] lower than this formula gives, for every size (so it is
//!   a fixed reservation, not a share). The sources at hand do not say why; Carpool
//!   subtracts it so that it never promises a pod more memory than Karpenter would.
//!
//! `allocatable = capacity − kube-reserved − system-reserved − eviction threshold`.
//!
//! **EBS volumes** a node can attach ([`ebs_volume_limit`]) are what the EBS CSI driver
//! reports in the node's CSINode (`getVolumesLimit`): the type's attachments less the root
//! volume and the class's other EBS mappings, less the ENIs past the first on a type whose
//! ENIs share the slots; at boot, when the driver counts, a node has its primary ENI only.
//! Karpenter v1.15 sets no limit on nodes it has not launched yet (its `VolumeUsage` gets
//! its limits from CSINodes alone); kube-scheduler will enforce the CSINode's, so Carpool
//! plans with it.

use crate::model::ec2nodeclass::BlockDeviceMapping;
use crate::model::kubelet::{KubeletConfiguration, Threshold};
use crate::model::resources::{self as res, Resources};
use crate::model::{Arch, InstanceType};

/// Karpenter's default `vmMemoryOverheadPercent`.
pub const VM_MEMORY_OVERHEAD: f64 = 0.075;
/// The AL2023 root volume when the EC2NodeClass sets none.
pub const DEFAULT_ROOT_VOLUME_BYTES: i64 = 20 << 30;
/// The kubelet's default `memory.available` hard eviction threshold.
pub const DEFAULT_MEMORY_EVICTION_BYTES: i64 = 100 << 20;
/// The kubelet's default `nodefs.available` hard eviction threshold, percent.
pub const DEFAULT_NODEFS_EVICTION_PERCENT: f64 = 10.0;
/// See the module doc.
pub const ARM64_EXTRA_RESERVED_MIB: i64 = 59;
/// The EBS CSI driver's name: the key of its attach limit in a CSINode.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";
/// The attachments the EBS CSI driver assumes for a type it does not know (shared).
pub const DEFAULT_EBS_ATTACHMENTS: u32 = 27;
/// The `instanceStorePolicy` that makes the instance store the node's ephemeral storage.
pub const INSTANCE_STORE_RAID0: &str = "RAID0";

const MIB: i64 = 1 << 20;

/// The node settings of an EC2NodeClass that change a node's resources.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSettings {
    /// `spec.kubelet`.
    pub kubelet: KubeletConfiguration,
    /// The root volume size in bytes, if the class sets one.
    pub root_volume_bytes: Option<i64>,
    /// `instanceStorePolicy: RAID0`: the instance store is the ephemeral storage.
    pub instance_store_raid0: bool,
    /// EBS volumes the class maps besides the root volume.
    pub extra_ebs_volumes: u32,
    /// The class boots Bottlerocket, whose kubelet has no `podsPerCore` and whose
    /// kube-reserved memory follows its max pods; AL2 and AL2023 reserve memory for the
    /// ENI-limited pod count whatever `maxPods` says (Karpenter's AMI family feature flags
    /// `PodsPerCoreEnabled` and `UsesENILimitedMemoryOverhead`, read by `NewInstanceType` in
    /// aws/karpenter-provider-aws `pkg/providers/instancetype/types.go`).
    pub bottlerocket: bool,
}

/// The EBS volumes of a class's block device mappings other than the root volume (the
/// mapping marked `rootVolume`, else the AL2/AL2023 root device `/dev/xvda`), which the EBS
/// CSI driver counts against its attach limit (IMDS lists them as `ebsN`).
pub fn extra_ebs_volumes(mappings: &[BlockDeviceMapping]) -> u32 {
    let root = mappings.iter().position(|m| m.root_volume).or_else(|| {
        mappings
            .iter()
            .position(|m| m.device_name.as_deref() == Some("/dev/xvda"))
    });
    let extra = mappings
        .iter()
        .enumerate()
        .filter(|(i, m)| Some(*i) != root && m.ebs.is_some())
        .count();
    u32::try_from(extra).unwrap_or(u32::MAX)
}

/// The volumes of [`EBS_CSI_DRIVER`] a new node of this type can attach, as the driver
/// reports it (see the module doc); never below 1, as the driver's own floor.
pub fn ebs_volume_limit(it: &InstanceType, settings: &NodeSettings) -> u32 {
    // `getVolumesLimit`: attachments − (ebsN mappings + 1 for the root), then, on a type
    // whose ENIs share the slots, − (attached ENIs − 1), which is 0 at boot.
    it.ebs_max_attachments
        .saturating_sub(settings.extra_ebs_volumes.saturating_add(1))
        .max(1)
}

/// The ephemeral storage of a node, in bytes: the instance store under RAID0 on a type that
/// has one, else the root volume (Karpenter's `ephemeralStorage`).
pub fn ephemeral_storage_bytes(it: &InstanceType, settings: &NodeSettings) -> i64 {
    if settings.instance_store_raid0 && it.local_storage_gb > 0 {
        // `resources.Quantity("<TotalSizeInGB>G")`: decimal gigabytes.
        return i64::try_from(it.local_storage_gb)
            .unwrap_or(i64::MAX / 1_000_000_000)
            .saturating_mul(1_000_000_000);
    }
    settings.root_volume_bytes.unwrap_or(DEFAULT_ROOT_VOLUME_BYTES)
}

/// Max pods: the kubelet's `maxPods`, else the ENI limit; capped by `podsPerCore`.
pub fn max_pods(eni_max_pods: u32, vcpu: u32, kubelet: &KubeletConfiguration) -> i64 {
    let mut pods = kubelet.max_pods.map_or(i64::from(eni_max_pods), i64::from);
    if let Some(per_core) = kubelet.pods_per_core.filter(|p| *p > 0) {
        pods = pods.min(i64::from(per_core) * i64::from(vcpu));
    }
    pods
}

/// The EKS kube-reserved CPU for a number of millicores.
pub fn kube_reserved_cpu_millis(cpu_millis: i64) -> i64 {
    const STEPS: [(i64, i64, f64); 4] = [
        (0, 1000, 0.06),
        (1000, 2000, 0.01),
        (2000, 4000, 0.005),
        (4000, i64::MAX, 0.0025),
    ];
    let reserved: f64 = STEPS
        .iter()
        .filter(|(lo, _, _)| cpu_millis > *lo)
        .map(|(lo, hi, share)| (cpu_millis.min(*hi) - lo) as f64 * share)
        .sum();
    reserved as i64
}

/// Capacity as the node will report it.
pub fn capacity(it: &InstanceType, settings: &NodeSettings) -> Resources {
    let mem_mib = it.memory_mib as i64;
    let overhead_mib = (mem_mib as f64 * VM_MEMORY_OVERHEAD).ceil() as i64;
    let mut c = Resources {
        cpu_millis: i64::from(it.vcpu) * 1000,
        memory: (mem_mib - overhead_mib) * MIB,
        ephemeral_storage: ephemeral_storage_bytes(it, settings),
        pods: if settings.bottlerocket {
            let without_per_core = KubeletConfiguration {
                pods_per_core: None,
                ..settings.kubelet.clone()
            };
            max_pods(it.eni_max_pods, it.vcpu, &without_per_core)
        } else {
            max_pods(it.eni_max_pods, it.vcpu, &settings.kubelet)
        },
        ..Resources::default()
    };
    if it.gpu_count > 0 {
        let name = match it.gpu_manufacturer.as_deref() {
            Some("amd") => Some(res::AMD_GPU),
            Some("habana") => Some("habana.ai/gaudi"),
            Some("nvidia") => Some(res::NVIDIA_GPU),
            _ => None,
        };
        if let Some(name) = name {
            c.set(name, i64::from(it.gpu_count));
        }
    }
    if it.neuron_devices > 0 {
        c.set(res::AWS_NEURON, i64::from(it.neuron_devices));
        c.set(res::AWS_NEURON_CORE, i64::from(it.neuron_cores));
    }
    if it.branch_enis > 0 {
        c.set(res::POD_ENI, i64::from(it.branch_enis));
    }
    if it.efa > 0 {
        c.set(res::EFA, i64::from(it.efa));
    }
    // A NodeOverlay's extended resources, added or replacing (Karpenter's
    // `ApplyCapacityOverlay`).
    for (name, amount) in &it.overlay_capacity {
        c.set(name, *amount);
    }
    c
}

/// The hugepages a capacity holds, in bytes: reserved from memory, so not allocatable as
/// memory (Karpenter's `InstanceType.precompute`).
fn hugepages(capacity: &Resources) -> i64 {
    capacity
        .names()
        .filter(|n| n.starts_with("hugepages-"))
        .map(|n| capacity.get(n))
        .sum()
}

fn threshold(k: &KubeletConfiguration, signal: &str, default: Threshold, capacity: i64) -> i64 {
    let hard = k.eviction_hard(signal).unwrap_or(default).amount(capacity);
    let soft = k
        .eviction_soft
        .get(signal)
        .and_then(|v| Threshold::parse(v).ok())
        .map_or(0, |t| t.amount(capacity));
    hard.max(soft)
}

/// Allocatable: capacity less kube-reserved, system-reserved and eviction thresholds.
pub fn allocatable(it: &InstanceType, capacity: &Resources, settings: &NodeSettings) -> Resources {
    let k = &settings.kubelet;
    let reserved = |map: &std::collections::BTreeMap<String, crate::model::Quantity>, name: &str| {
        map.get(name).map(|q| {
            if name == res::CPU {
                q.millis_ceil()
            } else {
                q.units_ceil()
            }
        })
    };
    let kube_cpu =
        reserved(&k.kube_reserved, res::CPU).unwrap_or_else(|| kube_reserved_cpu_millis(capacity.cpu_millis));
    let overhead_pods = if settings.bottlerocket {
        capacity.pods
    } else {
        i64::from(it.eni_max_pods)
    };
    let kube_mem = reserved(&k.kube_reserved, res::MEMORY).unwrap_or((11 * overhead_pods + 255) * MIB);
    let kube_eph = reserved(&k.kube_reserved, res::EPHEMERAL_STORAGE).unwrap_or(1 << 30);
    let sys = |name| reserved(&k.system_reserved, name).unwrap_or(0);
    let evict_mem = threshold(
        k,
        "memory.available",
        Threshold::Absolute(DEFAULT_MEMORY_EVICTION_BYTES),
        capacity.memory,
    );
    let evict_eph = threshold(
        k,
        "nodefs.available",
        Threshold::Percent(DEFAULT_NODEFS_EVICTION_PERCENT),
        capacity.ephemeral_storage,
    );
    let arm_extra = if it.arch == Arch::Arm64 {
        ARM64_EXTRA_RESERVED_MIB * MIB
    } else {
        0
    };

    let mut a = capacity.clone();
    a.cpu_millis -= kube_cpu + sys(res::CPU);
    a.memory -= kube_mem + sys(res::MEMORY) + evict_mem + arm_extra + hugepages(capacity);
    a.ephemeral_storage -= kube_eph + sys(res::EPHEMERAL_STORAGE) + evict_eph;
    a.cpu_millis = a.cpu_millis.max(0);
    a.memory = a.memory.max(0);
    a.ephemeral_storage = a.ephemeral_storage.max(0);
    a
}

/// Recomputes an instance type's capacity and allocatable for an EC2NodeClass's settings.
pub fn with_settings(it: &InstanceType, settings: &NodeSettings) -> InstanceType {
    let mut out = it.clone();
    out.capacity = capacity(it, settings);
    out.allocatable = allocatable(it, &out.capacity, settings);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_reserved_cpu_follows_the_eks_steps() {
        assert_eq!(kube_reserved_cpu_millis(1000), 60);
        assert_eq!(kube_reserved_cpu_millis(2000), 70);
        assert_eq!(kube_reserved_cpu_millis(4000), 80);
        assert_eq!(kube_reserved_cpu_millis(8000), 90);
        assert_eq!(kube_reserved_cpu_millis(96_000), 310);
    }

    #[test]
    fn kubelet_max_pods_and_pods_per_core_cap_the_eni_limit() {
        let none = KubeletConfiguration::default();
        assert_eq!(max_pods(29, 2, &none), 29);
        let k = KubeletConfiguration {
            max_pods: Some(110),
            ..Default::default()
        };
        assert_eq!(max_pods(737, 64, &k), 110);
        let k = KubeletConfiguration {
            pods_per_core: Some(4),
            ..Default::default()
        };
        assert_eq!(max_pods(29, 2, &k), 8);
    }

    /// Karpenter's `NewInstanceType` reserves kube memory for the ENI-limited pods on
    /// AL2/AL2023 (`UsesENILimitedMemoryOverhead`), for the max pods on Bottlerocket, and
    /// caps pods by `podsPerCore` except on Bottlerocket (`PodsPerCoreEnabled: false`).
    #[test]
    fn kube_reserved_memory_and_pods_per_core_follow_the_family() {
        let m5 = crate::catalog::Catalog::embedded()
            .unwrap()
            .get("m5.large")
            .unwrap()
            .clone();
        let kubelet = KubeletConfiguration {
            max_pods: Some(110),
            ..Default::default()
        };
        let al2023 = NodeSettings {
            kubelet: kubelet.clone(),
            ..NodeSettings::default()
        };
        let bottlerocket = NodeSettings {
            bottlerocket: true,
            ..al2023.clone()
        };
        let a = with_settings(&m5, &al2023);
        let b = with_settings(&m5, &bottlerocket);
        assert_eq!((a.capacity.pods, b.capacity.pods), (110, 110));
        // 11 MiB for each pod past the ENI limit (29 on m5.large) more on Bottlerocket.
        assert_eq!(a.allocatable.memory - b.allocatable.memory, 11 * (110 - 29) * MIB);

        let per_core = KubeletConfiguration {
            pods_per_core: Some(4),
            ..Default::default()
        };
        let al2023 = NodeSettings {
            kubelet: per_core,
            ..NodeSettings::default()
        };
        let bottlerocket = NodeSettings {
            bottlerocket: true,
            ..al2023.clone()
        };
        assert_eq!(with_settings(&m5, &al2023).capacity.pods, 8);
        assert_eq!(with_settings(&m5, &bottlerocket).capacity.pods, 29);
    }
}
