//! An EC2 instance type: its facts, the labels it gives a node, and its resources.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::resources::Resources;
use super::well_known as wk;

/// A CPU architecture, named as `kubernetes.io/arch` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// x86_64.
    Amd64,
    /// 64-bit ARM (Graviton).
    Arm64,
}

impl Arch {
    /// The `kubernetes.io/arch` value.
    pub fn label(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }
}

/// An instance type with the facts Carpool schedules on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstanceType {
    /// The API name, e.g. `m7g.xlarge`.
    pub name: String,
    /// The family, e.g. `m7g`.
    pub family: String,
    /// The category letters, e.g. `m`.
    pub category: String,
    /// The generation, e.g. 7 (none for `mac-m*`).
    pub generation: Option<u32>,
    /// The size, e.g. `xlarge`.
    pub size: String,
    /// vCPUs.
    pub vcpu: u32,
    /// Memory as EC2 reports it, in MiB.
    pub memory_mib: u64,
    /// CPU architecture.
    pub arch: Arch,
    /// `intel`, `amd` or `aws`.
    pub cpu_manufacturer: Option<String>,
    /// GPUs.
    pub gpu_count: u32,
    /// GPU vendor slug, e.g. `nvidia`.
    pub gpu_manufacturer: Option<String>,
    /// GPU model slug, e.g. `h100`.
    pub gpu_name: Option<String>,
    /// Memory per GPU, MiB.
    pub gpu_memory_mib: u64,
    /// Inferentia/Trainium devices.
    pub neuron_devices: u32,
    /// Neuron cores across devices.
    pub neuron_cores: u32,
    /// ENIs on the default network card.
    pub max_enis: u32,
    /// IPv4 addresses per ENI.
    pub ipv4_per_eni: u32,
    /// Max pods by the VPC CNI rule: ENIs × (IPs per ENI − 1) + 2.
    pub eni_max_pods: u32,
    /// Branch ENIs for pod security groups (0 when trunking is not supported).
    pub branch_enis: u32,
    /// Baseline network bandwidth, Mbps.
    pub network_bandwidth_mbps: Option<u64>,
    /// Whether spot capacity exists for the type.
    pub spot: bool,
    /// `nitro` or `xen`; none for bare metal.
    pub hypervisor: Option<String>,
    /// Whether it is a bare-metal type.
    pub bare_metal: bool,
    /// Local NVMe storage, GB.
    pub local_nvme_gb: u64,
    /// All instance store (NVMe, SSD or HDD), GB as EC2 reports it (`TotalSizeInGB`).
    #[serde(default)]
    pub local_storage_gb: u64,
    /// EFA interfaces (`MaximumEfaInterfaces`).
    #[serde(default)]
    pub efa: u32,
    /// EBS volumes the type can attach, as the EBS CSI driver counts them (its limits
    /// table: `MaximumEbsAttachments`, 39 for Xen types, 27 when unknown).
    #[serde(default)]
    pub ebs_max_attachments: u32,
    /// Whether ENIs share the EBS attachment slots (`AttachmentLimitType: shared`).
    #[serde(default)]
    pub ebs_attachments_shared: bool,
    /// What the node reports as capacity.
    pub capacity: Resources,
    /// What pods can request: capacity less reservations and eviction thresholds.
    pub allocatable: Resources,
    /// Facts only labels need (see `shared/data/ec2/SOURCES.md`).
    #[serde(default)]
    pub label_facts: LabelFacts,
    /// Extended resources a NodeOverlay adds to the type's capacity (and allocatable),
    /// by resource name: see [`crate::catalog::overlay`]. Empty in the catalog.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overlay_capacity: BTreeMap<String, i64>,
}

/// Facts of an instance type that only its well-known labels use, as Karpenter's AWS
/// provider derives them from DescribeInstanceTypes (`pkg/providers/instancetype/types.go`,
/// `computeRequirements`); `None` where the data has no record of the type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelFacts {
    /// `EbsOptimizedInfo.MaximumBandwidthInMbps`, for types EBS-optimized by default.
    pub ebs_bandwidth_mbps: Option<u64>,
    /// `ProcessorInfo.SustainedClockSpeedInGhz` × 1000, rounded.
    pub cpu_sustained_clock_mhz: Option<u64>,
    /// `NetworkInfo.EncryptionInTransitSupported`.
    pub encryption_in_transit: Option<bool>,
    /// The one inference accelerator or Neuron device model, kebab-case (`inferentia2`).
    pub accelerator_name: Option<String>,
    /// Its maker, kebab-case (`aws`).
    pub accelerator_manufacturer: Option<String>,
    /// How many.
    pub accelerator_count: Option<u32>,
}

impl InstanceType {
    /// The labels a node of this type carries, before zone and capacity type
    /// (see [`super::offering::Offering::labels`]).
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut l = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            l.insert(k.to_string(), v);
        };
        put(wk::INSTANCE_TYPE, self.name.clone());
        put(wk::ARCH, self.arch.label().to_string());
        put(wk::OS, "linux".to_string());
        put(wk::INSTANCE_FAMILY, self.family.clone());
        put(wk::INSTANCE_CATEGORY, self.category.clone());
        if let Some(g) = self.generation {
            put(wk::INSTANCE_GENERATION, g.to_string());
        }
        put(wk::INSTANCE_SIZE, self.size.clone());
        put(wk::INSTANCE_CPU, self.vcpu.to_string());
        if let Some(m) = &self.cpu_manufacturer {
            put(wk::INSTANCE_CPU_MANUFACTURER, m.clone());
        }
        put(wk::INSTANCE_MEMORY, self.memory_mib.to_string());
        if self.gpu_count > 0 {
            put(wk::INSTANCE_GPU_COUNT, self.gpu_count.to_string());
            if let Some(m) = &self.gpu_manufacturer {
                put(wk::INSTANCE_GPU_MANUFACTURER, m.clone());
            }
            if let Some(n) = &self.gpu_name {
                put(wk::INSTANCE_GPU_NAME, n.clone());
            }
            put(wk::INSTANCE_GPU_MEMORY, self.gpu_memory_mib.to_string());
        }
        if self.local_nvme_gb > 0 {
            put(wk::INSTANCE_LOCAL_NVME, self.local_nvme_gb.to_string());
        }
        put(wk::INSTANCE_HYPERVISOR, self.hypervisor.clone().unwrap_or_default());
        if let Some(bw) = self.network_bandwidth_mbps {
            put(wk::INSTANCE_NETWORK_BANDWIDTH, bw.to_string());
        }
        put(wk::INSTANCE_CAPABILITY_FLEX, self.family.contains("-flex").to_string());
        let f = &self.label_facts;
        if let Some(bw) = f.ebs_bandwidth_mbps {
            put(wk::INSTANCE_EBS_BANDWIDTH, bw.to_string());
        }
        if let Some(mhz) = f.cpu_sustained_clock_mhz {
            put(wk::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ, mhz.to_string());
        }
        if let Some(e) = f.encryption_in_transit {
            put(wk::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED, e.to_string());
        }
        if let (Some(name), Some(maker), Some(count)) =
            (&f.accelerator_name, &f.accelerator_manufacturer, f.accelerator_count)
        {
            put(wk::INSTANCE_ACCELERATOR_NAME, name.clone());
            put(wk::INSTANCE_ACCELERATOR_MANUFACTURER, maker.clone());
            put(wk::INSTANCE_ACCELERATOR_COUNT, count.to_string());
        }
        l
    }
}
