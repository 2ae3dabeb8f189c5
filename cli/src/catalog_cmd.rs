//! `carpool catalog`: the cheapest instance types for a set of requirements.

use anyhow::Result;
use carpool::catalog::Catalog;
use carpool::catalog::query::{self, Match, Query};
use carpool::model::{CapacityType, NodeSelectorRequirement, Quantity, Requirements};
use clap::Args;
use serde::Serialize;

use crate::output::{say, say_raw};
use crate::table;
use crate::usage::UsageError;

/// Arguments of `carpool catalog`.
#[derive(Args, Debug)]
pub struct CatalogArgs {
    /// The AWS region.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// A label requirement, as 'KEY OPERATOR [V1,V2...] [minValues=N]'; repeat to AND them.
    #[arg(long = "require", value_name = "REQUIREMENT")]
    requirements: Vec<NodeSelectorRequirement>,
    /// Only offerings of this capacity type (spot or on-demand); default: the cheaper one.
    #[arg(long, value_name = "TYPE")]
    capacity_type: Option<CapacityType>,
    /// Least allocatable CPU, as a Kubernetes quantity (4, 3500m).
    #[arg(long, value_name = "QUANTITY")]
    cpu: Option<Quantity>,
    /// Least allocatable memory, as a Kubernetes quantity (16Gi, 512M).
    #[arg(long, value_name = "QUANTITY")]
    memory: Option<Quantity>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// Rows to print; 0 prints all.
    #[arg(long, default_value_t = 20)]
    limit: usize,
}

/// One row of `--json` output.
#[derive(Serialize)]
struct Row<'a> {
    name: &'a str,
    family: &'a str,
    vcpu: u32,
    memory_mib: u64,
    arch: &'static str,
    gpu_count: u32,
    max_pods: i64,
    allocatable_cpu_millicores: i64,
    allocatable_memory_mib: i64,
    price_per_hour: f64,
    capacity_type: CapacityType,
    zones: &'a [String],
}

impl<'a> From<&'a Match<'a>> for Row<'a> {
    fn from(m: &'a Match<'a>) -> Self {
        let it = m.instance_type;
        Row {
            name: &it.name,
            family: &it.family,
            vcpu: it.vcpu,
            memory_mib: it.memory_mib,
            arch: it.arch.label(),
            gpu_count: it.gpu_count,
            max_pods: it.allocatable.pods,
            allocatable_cpu_millicores: it.allocatable.cpu_millis,
            allocatable_memory_mib: it.allocatable.memory >> 20,
            price_per_hour: m.price_per_hour,
            capacity_type: m.capacity_type,
            zones: &m.zones,
        }
    }
}

fn quantity_arg(q: Option<Quantity>, flag: &str, millis: bool) -> Result<i64, UsageError> {
    let Some(q) = q else { return Ok(0) };
    if q.is_negative() {
        return Err(UsageError(format!(
            "{flag} {q} is negative; give a minimum such as {flag} 4"
        )));
    }
    Ok(if millis { q.millis_ceil() } else { q.units_ceil() })
}

/// Runs `carpool catalog`.
pub fn run(args: &CatalogArgs) -> Result<()> {
    let catalog = Catalog::embedded()?;
    let region = catalog
        .region(&args.region)
        .map_err(|e| UsageError(format!("--region: {e}")))?;
    let requirements = Requirements::from_wire(&args.requirements)
        .map_err(|(i, e)| UsageError(format!("--require {:?}: {e}", args.requirements[i].key)))?;
    let q = Query {
        requirements,
        capacity_type: args.capacity_type,
        min_cpu_millis: quantity_arg(args.cpu, "--cpu", true)?,
        min_memory_bytes: quantity_arg(args.memory, "--memory", false)?,
    };
    let mut matches = query::cheapest(&region, &q);
    if args.limit > 0 {
        matches.truncate(args.limit);
    }
    if region.prices().is_estimated() {
        eprintln!(
            "note: no price table for {}; prices shown are us-east-1's (see README, Prices)",
            args.region
        );
    }
    if args.json {
        let rows: Vec<Row> = matches.iter().map(Row::from).collect();
        say!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if matches.is_empty() {
        say!("No instance type in {} meets these requirements.", args.region);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = matches
        .iter()
        .map(|m| {
            let it = m.instance_type;
            vec![
                it.name.clone(),
                m.capacity_type.to_string(),
                format!("${:.4}", m.price_per_hour),
                it.vcpu.to_string(),
                format!("{}Mi", it.memory_mib),
                format!("{}m", it.allocatable.cpu_millis),
                format!("{}Mi", it.allocatable.memory >> 20),
                it.allocatable.pods.to_string(),
                m.zones.join(","),
            ]
        })
        .collect();
    say_raw!(
        "{}",
        table::render(
            &[
                "TYPE",
                "CAPACITY",
                "PRICE/H",
                "VCPU",
                "MEMORY",
                "ALLOC CPU",
                "ALLOC MEM",
                "PODS",
                "ZONES"
            ],
            &rows
        )
    );
    Ok(())
}
