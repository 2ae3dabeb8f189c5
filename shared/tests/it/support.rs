//! What the modules share: the planner run on a small cluster dump and re-checked by the
//! independent checker, where a pod landed in its plan, the pending pods those dumps hold,
//! the region they plan in, and the case count and seed of the property tests.

use carpool::catalog::{Catalog, PriceBook, RegionCatalog};
use carpool::decide::checker::check;
use carpool::decide::{PlannedNode, ProvisioningPlan, Unschedulable, provisioning_plan, provisioning_plan_with_bound};
use carpool::fixtures::PodBuilder;
use carpool::snapshot::Snapshot;
use proptest::test_runner::RngSeed;
use serde_json::{Value, json};

/// The embedded catalog's us-east-1, where the tests plan.
pub fn region() -> RegionCatalog<'static> {
    Catalog::embedded().unwrap().region("us-east-1").unwrap()
}

/// A snapshot of a cluster dump: a `List` of `items`.
pub fn snapshot(items: &[Value]) -> Snapshot {
    let mut s = Snapshot::default();
    s.add_text("test.json", &json!({"kind": "List", "items": items}).to_string())
        .unwrap();
    s
}

/// A pending pod marked unschedulable, labelled `app` with its name's first part
/// (`web-0` is `app=web`), requesting `cpu` and `mem`.
pub fn pod(name: &str, cpu: &str, mem: &str) -> PodBuilder {
    PodBuilder::new(name)
        .label("app", name.split('-').next().unwrap())
        .requests(cpu, mem)
        .unschedulable()
}

/// A cluster dump and the plan made for it.
pub struct Planned {
    pub snapshot: Snapshot,
    pub plan: ProvisioningPlan,
}

/// The plan of a cluster dump of `items`, with its lower bound; the independent checker
/// finds no violation in it, and it costs no less than its bound.
pub fn plan(items: Vec<Value>) -> ProvisioningPlan {
    planned_priced(items, |_| {}).plan
}

/// [`plan`] with live prices set on the region first.
pub fn plan_priced(items: Vec<Value>, prices: impl FnOnce(&mut PriceBook)) -> ProvisioningPlan {
    planned_priced(items, prices).plan
}

/// [`plan`], with the snapshot it planned.
pub fn planned(items: Vec<Value>) -> Planned {
    planned_priced(items, |_| {})
}

fn planned_priced(items: Vec<Value>, prices: impl FnOnce(&mut PriceBook)) -> Planned {
    let snapshot = snapshot(&items);
    let mut region = region();
    prices(region.prices_mut());
    let plan = provisioning_plan_with_bound(&snapshot, &region);
    assert_checked(&snapshot, &region, &plan);
    assert!(
        plan.cost_per_hour + 1e-9 >= plan.lower_bound_per_hour.unwrap(),
        "cost below its lower bound"
    );
    Planned { snapshot, plan }
}

/// [`plan`] without the lower bound (its linear program is not solved).
pub fn plan_without_bound(items: Vec<Value>) -> ProvisioningPlan {
    let snapshot = snapshot(&items);
    let region = region();
    let plan = provisioning_plan(&snapshot, &region);
    assert_checked(&snapshot, &region, &plan);
    plan
}

/// The independent checker finds no violation in `plan`.
fn assert_checked(snapshot: &Snapshot, region: &RegionCatalog<'_>, plan: &ProvisioningPlan) {
    let violations = check(snapshot, region, plan);
    assert!(
        violations.is_empty(),
        "checker: {violations:#?}\nplan: {}",
        serde_json::to_string_pretty(plan).unwrap()
    );
}

/// The new node the plan puts the pod `default/<pod>` on.
pub fn node_of<'a>(p: &'a ProvisioningPlan, pod: &str) -> &'a PlannedNode {
    let key = format!("default/{pod}");
    p.nodes.iter().find(|n| n.pods.contains(&key)).unwrap_or_else(|| {
        panic!(
            "{pod} is not on a new node: {}",
            serde_json::to_string_pretty(p).unwrap()
        )
    })
}

/// Why the plan leaves the pod `default/<pod>` unschedulable.
pub fn unschedulable<'a>(p: &'a ProvisioningPlan, pod: &str) -> &'a Unschedulable {
    p.unschedulable
        .iter()
        .find(|u| u.pod == format!("default/{pod}"))
        .unwrap_or_else(|| {
            panic!(
                "{pod} is not unschedulable: {}",
                serde_json::to_string_pretty(p).unwrap()
            )
        })
}

/// The seed CI's property cases come from (one whose 32 cases pass in each property
/// module).
pub const CI_SEED: u64 = 20_261_202;

/// The property tests' seed: `CARPOOL_PROPTEST_SEED` (a number, or `random`); else
/// random when `CARPOOL_PROPTEST_CASES` is set (runs by hand explore); else [`CI_SEED`],
/// so that CI's run is the same every time.
pub fn rng_seed() -> RngSeed {
    match std::env::var("CARPOOL_PROPTEST_SEED").ok().as_deref() {
        Some("random") => RngSeed::Random,
        Some(n) => n.parse().map_or(RngSeed::Random, RngSeed::Fixed),
        None if std::env::var("CARPOOL_PROPTEST_CASES").is_ok() => RngSeed::Random,
        None => RngSeed::Fixed(CI_SEED),
    }
}

/// The property tests' number of cases: `CARPOOL_PROPTEST_CASES`, default 32.
pub fn cases() -> u32 {
    std::env::var("CARPOOL_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}
