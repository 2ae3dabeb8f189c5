//! One planning path: what the provisioner's batch plans, and what `carpool plan` prints
//! for a cluster dump, are made by the same steps (DESIGN.md: the CLI prints the plans the
//! Lambdas execute).
//!
//! 1. [`prepare_pools`]: only the NodePools the deployment's selector picks are Carpool's;
//!    a NodePool whose EC2NodeClass is missing is skipped with its reason;
//! 2. [`narrow_pools`]: each NodePool is narrowed to the zones its class's subnets are in
//!    and the instance types its AMIs boot (the provisioner asks the cloud, only about the
//!    classes the NodePools left refer to, [`classes_in_use`]; a class it cannot resolve
//!    takes its NodePools out, [`drop_unresolved`]; a dump reads the class's `status`,
//!    [`from_status`]);
//! 3. [`plan_batch`]: the scheduling simulation and packer, then the fit to
//!    kube-scheduler's own placement in the order the batch's nodes reach it ([`FitTo`]).
//!
//! The provisioner adds what only a live cluster has: the capacity of launches in flight,
//! room reserved for replacements, backed-off NodePools and offerings marked unavailable.

use std::collections::{BTreeMap, BTreeSet};

use crate::catalog::RegionCatalog;
use crate::decide::kube_scheduler::Order;
use crate::decide::provisioning::ami_requirements::{images_by_class_from_status, narrow_to_images};
use crate::decide::provisioning::nodepools;
use crate::decide::provisioning::plan::ProvisioningPlan;
use crate::decide::provisioning::provisioning_plan;
use crate::decide::provisioning::scheduler_fit::{Fitting, HANDED_ORDERS, WHOLE_ORDERS, fit};
use crate::decide::provisioning::selector::Selector;
use crate::decide::provisioning::subnet_zones::{narrow_to_subnet_zones, zones_by_class_from_status};
use crate::decide::provisioning::templates::Skipped;
use crate::model::{EC2NodeClass, InstanceType, NodePool, ResolvedImage};
use crate::snapshot::Snapshot;

/// How a plan is fitted to kube-scheduler's own placement of its pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FitTo {
    /// Not fitted (`CARPOOL_FIT_TO_SCHEDULER=false`).
    Off,
    /// The nodes of a batch reach the scheduler as one launch wave, handed to their pods
    /// biggest first (the default: waves on).
    #[default]
    HandedWave,
    /// The nodes reach the scheduler one by one, in no order the plan knows (waves off,
    /// `CARPOOL_WAVE_GRACE_SECONDS=0`).
    Whole,
}

impl FitTo {
    /// The fit of a provisioner configured with `fit_to_scheduler` and waves on or off.
    pub fn of(fit_to_scheduler: bool, waves: bool) -> Self {
        match (fit_to_scheduler, waves) {
            (false, _) => FitTo::Off,
            (true, true) => FitTo::HandedWave,
            (true, false) => FitTo::Whole,
        }
    }

    fn orders(self) -> Option<&'static [Order]> {
        match self {
            FitTo::Off => None,
            FitTo::HandedWave => Some(&HANDED_ORDERS),
            FitTo::Whole => Some(&WHOLE_ORDERS),
        }
    }
}

/// Keeps the NodePools `selector` picks and drops those whose EC2NodeClass is missing
/// (each with its reason, in the snapshot's `skipped`); returns the names of the NodePools
/// left to another autoscaler.
pub fn prepare_pools(snapshot: &mut Snapshot, selector: &Selector) -> Vec<String> {
    let unmanaged = nodepools::keep_managed(snapshot, selector);
    nodepools::drop_without_node_class(snapshot);
    unmanaged
}

/// The EC2NodeClasses the snapshot's NodePools refer to: the only ones a run resolves
/// (another autoscaler's classes, Karpenter's during a migration say, are never asked
/// about, so none of their errors can stop Carpool).
pub fn classes_in_use(snapshot: &Snapshot) -> Vec<&EC2NodeClass> {
    let used: BTreeSet<&str> = snapshot
        .nodepools
        .iter()
        .map(|p| p.spec.template.spec.node_class_ref.name.as_str())
        .collect();
    snapshot
        .nodeclasses
        .iter()
        .filter(|c| used.contains(c.name()))
        .collect()
}

/// Drops the NodePools whose class could not be resolved (`failed`: the class's name and
/// the error), each skipped with its reason; returns them. Every other NodePool stays.
pub fn drop_unresolved(snapshot: &mut Snapshot, failed: &BTreeMap<String, String>) -> Vec<NodePool> {
    if failed.is_empty() {
        return Vec::new();
    }
    let (kept, dropped): (Vec<NodePool>, Vec<NodePool>) = std::mem::take(&mut snapshot.nodepools)
        .into_iter()
        .partition(|p| !failed.contains_key(&p.spec.template.spec.node_class_ref.name));
    snapshot.nodepools = kept;
    for p in &dropped {
        let class = &p.spec.template.spec.node_class_ref.name;
        let error = failed.get(class).map_or("", String::as_str);
        snapshot.skipped.push((
            format!("NodePool/{}", p.name()),
            format!("its EC2NodeClass {class} could not be resolved: {error}"),
        ));
    }
    dropped
}

/// Narrows each NodePool to the zones of its class's subnets and the types its class's
/// AMIs boot, among `types`. A class absent from a map leaves its pools as they are on
/// that count; a class with no image launches nothing.
pub fn narrow_pools(
    snapshot: &mut Snapshot,
    zones_by_class: &BTreeMap<String, Vec<String>>,
    images_by_class: &BTreeMap<String, Vec<ResolvedImage>>,
    types: &[&InstanceType],
) {
    narrow_to_subnet_zones(&mut snapshot.nodepools, zones_by_class);
    narrow_to_images(&mut snapshot.nodepools, images_by_class, types);
}

/// The zones and images each class's `status` records, for a dump with no cloud to ask.
pub fn from_status(snapshot: &Snapshot) -> (BTreeMap<String, Vec<String>>, BTreeMap<String, Vec<ResolvedImage>>) {
    (
        zones_by_class_from_status(&snapshot.nodeclasses),
        images_by_class_from_status(&snapshot.nodeclasses),
    )
}

/// Plans new nodes for `view`'s pending pods and fits the plan to kube-scheduler's
/// placement as `fit_to` says; the fitting's account when it ran.
pub fn plan_batch(view: &Snapshot, region: &RegionCatalog<'_>, fit_to: FitTo) -> (ProvisioningPlan, Option<Fitting>) {
    let plan = provisioning_plan(view, region);
    match fit_to.orders() {
        None => (plan, None),
        Some(orders) => {
            let (plan, fitting) = fit(view, region, plan, orders);
            (plan, Some(fitting))
        }
    }
}

/// The plan the provisioner's batch makes for a cluster dump with no launch in flight:
/// the NodePools `selector` picks, each narrowed to its class's subnet zones and AMIs as
/// the class's `status` records them, planned and fitted as `fit_to` says. `carpool plan`
/// prints it. Returns the plan and the snapshot it was made on (its NodePools narrowed).
///
/// As the batch does, a dump whose NodePools are all left out (not picked, or their
/// EC2NodeClass missing) launches nothing: every pending pod is unschedulable with
/// `no_valid_nodepool`, and the skipped objects say why. A dump with no NodePool at all is
/// planned with the default NodePool (`templates::DEFAULT_NODEPOOL`), so that a bare list
/// of pods can be sized; the provisioner never meets that case, as it reads NodePools from
/// the cluster.
pub fn plan_dump(
    mut snapshot: Snapshot,
    region: &RegionCatalog<'_>,
    selector: &Selector,
    fit_to: FitTo,
) -> (ProvisioningPlan, Snapshot) {
    let had_nodepools = !snapshot.nodepools.is_empty();
    prepare_pools(&mut snapshot, selector);
    if had_nodepools && let Some(unschedulable) = nodepools::without_nodepool(&snapshot) {
        let skipped = snapshot
            .skipped
            .iter()
            .map(|(object, reason)| Skipped {
                object: object.clone(),
                reason: reason.clone(),
            })
            .collect();
        let plan = ProvisioningPlan {
            unschedulable,
            skipped,
            ..ProvisioningPlan::default()
        };
        return (plan, snapshot);
    }
    let (zones, images) = from_status(&snapshot);
    narrow_pools(&mut snapshot, &zones, &images, region.types());
    let (plan, _) = plan_batch(&snapshot, region, fit_to);
    (plan, snapshot)
}
