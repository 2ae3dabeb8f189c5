//! The instance-type data compiled into the binary (see `shared/data/ec2/SOURCES.md`).

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::CatalogError;
use super::allocatable::{self, NodeSettings};
use crate::model::instance_type::LabelFacts;
use crate::model::{Arch, InstanceType, Resources};

const INSTANCE_TYPES: &str = include_str!("../../data/ec2/instance-types.json");
const OFFERINGS: &str = include_str!("../../data/ec2/offerings.json");
const ON_DEMAND_PRICES: &str = include_str!("../../data/ec2/on-demand-prices.json");
const LABEL_FACTS: &str = include_str!("../../data/ec2/instance-labels.json");

/// The column order `extract_labels.py` writes; checked when loading.
const LABEL_COLUMNS: [&str; 7] = [
    "name",
    "ebs_bandwidth_mbps",
    "cpu_sustained_clock_mhz",
    "encryption_in_transit",
    "accelerator_name",
    "accelerator_manufacturer",
    "accelerator_count",
];

#[derive(Deserialize)]
struct LabelTable {
    columns: Vec<String>,
    rows: Vec<LabelRow>,
}

/// One row of `instance-labels.json`, in [`LABEL_COLUMNS`] order.
#[derive(Deserialize)]
struct LabelRow(
    String,
    Option<u64>,
    Option<u64>,
    Option<bool>,
    Option<String>,
    Option<String>,
    Option<u32>,
);

fn label_facts() -> Result<HashMap<String, LabelFacts>, CatalogError> {
    let table: LabelTable = serde_json::from_str(LABEL_FACTS).map_err(|e| CatalogError::Embedded(e.to_string()))?;
    if table.columns != LABEL_COLUMNS {
        return Err(CatalogError::Embedded(format!(
            "instance-labels.json columns {:?} differ from the expected {LABEL_COLUMNS:?}; rerun extract_labels.py",
            table.columns
        )));
    }
    Ok(table
        .rows
        .into_iter()
        .map(|LabelRow(name, ebs, clock, eit, acc_name, acc_maker, acc_count)| {
            let facts = LabelFacts {
                ebs_bandwidth_mbps: ebs,
                cpu_sustained_clock_mhz: clock,
                encryption_in_transit: eit,
                accelerator_name: acc_name,
                accelerator_manufacturer: acc_maker,
                accelerator_count: acc_count,
            };
            (name, facts)
        })
        .collect())
}

const EXTRAS: &str = include_str!("../../data/ec2/instance-type-extras.json");

/// The column order of `instance-type-extras.json`.
const EXTRA_COLUMNS: [&str; 5] = [
    "name",
    "local_storage_gb",
    "efa",
    "ebs_max_attachments",
    "ebs_attachment_limit_type",
];

#[derive(Deserialize)]
struct ExtraTable {
    columns: Vec<String>,
    rows: Vec<ExtraRow>,
}

/// One row of `instance-type-extras.json`: instance store GB, EFA interfaces, EBS
/// attachments and their limit type.
#[derive(Deserialize)]
struct ExtraRow(String, u64, u32, u32, String);

fn apply_extras(types: &mut [InstanceType]) -> Result<(), CatalogError> {
    let table: ExtraTable = serde_json::from_str(EXTRAS).map_err(|e| CatalogError::Embedded(e.to_string()))?;
    if table.columns != EXTRA_COLUMNS {
        return Err(CatalogError::Embedded(format!(
            "instance-type-extras.json columns {:?} differ from the expected {EXTRA_COLUMNS:?}; rerun extract.py",
            table.columns
        )));
    }
    let rows: HashMap<String, ExtraRow> = table.rows.into_iter().map(|r| (r.0.clone(), r)).collect();
    for it in types {
        if let Some(ExtraRow(_, storage, efa, ebs, limit_type)) = rows.get(&it.name) {
            it.local_storage_gb = *storage;
            it.efa = *efa;
            it.ebs_max_attachments = *ebs;
            it.ebs_attachments_shared = limit_type == "shared";
            *it = allocatable::with_settings(it, &NodeSettings::default());
        }
    }
    Ok(())
}

/// The column order `extract.py` writes; checked when loading.
const COLUMNS: [&str; 24] = [
    "name",
    "family",
    "category",
    "generation",
    "size",
    "vcpu",
    "memory_mib",
    "arch",
    "cpu_manufacturer",
    "gpu_count",
    "gpu_manufacturer",
    "gpu_name",
    "gpu_memory_mib_per_gpu",
    "neuron_device_count",
    "neuron_core_count",
    "default_card_max_enis",
    "ipv4_per_eni",
    "max_pods",
    "branch_interfaces",
    "network_bandwidth_mbps",
    "supported_usage_classes",
    "hypervisor",
    "bare_metal",
    "local_nvme_gb",
];

#[derive(Deserialize)]
struct Table {
    columns: Vec<String>,
    rows: Vec<Row>,
}

/// One row, in [`COLUMNS`] order.
#[derive(Deserialize)]
struct Row(
    String,
    String,
    String,
    Option<u32>,
    String,
    Option<u32>,
    Option<u64>,
    Option<String>,
    Option<String>,
    Option<u32>,
    Option<String>,
    Option<String>,
    Option<u64>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u32>,
    Option<u64>,
    Option<Vec<String>>,
    Option<String>,
    Option<bool>,
    Option<u64>,
);

/// Everything the embedded files hold.
pub(super) struct Embedded {
    /// Types with enough facts to schedule on.
    pub types: Vec<InstanceType>,
    /// Rows without vCPU, memory, arch or pod limits, by name.
    pub incomplete: Vec<String>,
    /// Per region, the names of the types offered there.
    pub offered: BTreeMap<String, Vec<String>>,
    /// Per region, on-demand USD per hour by type.
    pub on_demand: BTreeMap<String, HashMap<String, f64>>,
}

fn to_instance_type(r: Row) -> Result<InstanceType, String> {
    let Row(
        name,
        family,
        category,
        generation,
        size,
        vcpu,
        memory_mib,
        arch,
        cpu_manufacturer,
        gpu_count,
        gpu_manufacturer,
        gpu_name,
        gpu_memory_mib,
        neuron_devices,
        neuron_cores,
        max_enis,
        ipv4_per_eni,
        max_pods,
        branch,
        bandwidth,
        usage,
        hypervisor,
        bare_metal,
        nvme,
    ) = r;
    let (Some(vcpu), Some(memory_mib), Some(arch), Some(max_pods)) = (vcpu, memory_mib, arch, max_pods) else {
        return Err(name);
    };
    let arch = match arch.as_str() {
        "x86_64" => Arch::Amd64,
        "arm64" => Arch::Arm64,
        _ => return Err(name),
    };
    let mut it = InstanceType {
        name,
        family,
        category,
        generation,
        size,
        vcpu,
        memory_mib,
        arch,
        cpu_manufacturer,
        gpu_count: gpu_count.unwrap_or(0),
        gpu_manufacturer,
        gpu_name,
        gpu_memory_mib: gpu_memory_mib.unwrap_or(0),
        neuron_devices: neuron_devices.unwrap_or(0),
        neuron_cores: neuron_cores.unwrap_or(0),
        max_enis: max_enis.unwrap_or(0),
        ipv4_per_eni: ipv4_per_eni.unwrap_or(0),
        eni_max_pods: max_pods,
        branch_enis: branch.unwrap_or(0),
        network_bandwidth_mbps: bandwidth,
        // Unknown usage classes: assume on-demand only, never a spot offering that may not exist.
        spot: usage.is_some_and(|u| u.iter().any(|c| c == "spot")),
        hypervisor: hypervisor.filter(|h| !h.is_empty()),
        bare_metal: bare_metal.unwrap_or(false),
        local_nvme_gb: nvme.unwrap_or(0),
        local_storage_gb: 0,
        efa: 0,
        ebs_max_attachments: allocatable::DEFAULT_EBS_ATTACHMENTS,
        ebs_attachments_shared: true,
        capacity: Resources::default(),
        allocatable: Resources::default(),
        label_facts: LabelFacts::default(),
        overlay_capacity: Default::default(),
    };
    it = allocatable::with_settings(&it, &NodeSettings::default());
    Ok(it)
}

pub(super) fn load() -> Result<Embedded, CatalogError> {
    let table: Table = serde_json::from_str(INSTANCE_TYPES).map_err(|e| CatalogError::Embedded(e.to_string()))?;
    if table.columns != COLUMNS {
        return Err(CatalogError::Embedded(format!(
            "instance-types.json columns {:?} differ from the expected {COLUMNS:?}; rerun extract.py",
            table.columns
        )));
    }
    let names: Vec<String> = table.rows.iter().map(|r| r.0.clone()).collect();
    let mut types = Vec::with_capacity(table.rows.len());
    let mut incomplete = Vec::new();
    let mut facts = label_facts()?;
    for row in table.rows {
        match to_instance_type(row) {
            Ok(mut it) => {
                it.label_facts = facts.remove(&it.name).unwrap_or_default();
                types.push(it);
            }
            Err(name) => incomplete.push(name),
        }
    }
    apply_extras(&mut types)?;
    let indices: BTreeMap<String, Vec<usize>> =
        serde_json::from_str(OFFERINGS).map_err(|e| CatalogError::Embedded(e.to_string()))?;
    let offered = indices
        .into_iter()
        .map(|(region, idx)| (region, idx.into_iter().filter_map(|i| names.get(i).cloned()).collect()))
        .collect();
    let on_demand: BTreeMap<String, HashMap<String, f64>> =
        serde_json::from_str(ON_DEMAND_PRICES).map_err(|e| CatalogError::Embedded(e.to_string()))?;
    Ok(Embedded {
        types,
        incomplete,
        offered,
        on_demand,
    })
}
