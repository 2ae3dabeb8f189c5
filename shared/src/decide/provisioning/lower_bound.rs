//! A lower bound on the hourly cost of any valid plan that places the same pods on new
//! nodes, from two LP relaxations solved with good_lp's pure-Rust `microlp` backend:
//!
//! - **Aggregate.** Cover the total requests (CPU, memory, pod slots, extended
//!   resources), less the free room of existing nodes, with fractional nodes of any type
//!   any NodePool offers, each at its cheapest offering and its most generous net
//!   allocatable. Any plan is a feasible point, so its optimum is a lower bound.
//! - **Per class** (small cases: at most [`CLASS_LP_MAX_PAIRS`] class × type pairs).
//!   Each pod class may only use the types its requirements allow and that hold one of its
//!   pods: variables `x_t` (fractional nodes of type t) and `z_ct` (pods of class c on
//!   type t), with `Σ_t z_ct = n_c`, `Σ_c z_ct · req_c ≤ net_t · x_t` for every resource,
//!   and `z_ct ≤ min(⌊net_t / req_c⌋, cap_c) · x_t` (whole pods per node, and the class's
//!   per-node cap from hostname anti-affinity, spreads and host ports). Tighter, and still
//!   a relaxation of any plan.
//!
//! The bound reported is the larger of the two. Topology constraints, which can only raise
//! the cost, are not modelled, so the bound stays valid.

use std::collections::{BTreeMap, BTreeSet};

use good_lp::{Expression, Solution, SolverModel, Variable, constraint, microlp, variable, variables};

use crate::decide::provisioning::pod::PodInfo;
use crate::decide::provisioning::templates::Template;
use crate::model::well_known as wk;
use crate::model::{Requirements, Resources};

/// Largest class × type problem solved exactly.
pub const CLASS_LP_MAX_PAIRS: usize = 3000;

/// Scale of each resource in the LP, so that coefficients stay near 1.
fn scale(name: &str) -> f64 {
    match name {
        "cpu" => 1e-3,
        "memory" | "ephemeral-storage" => 1.0 / f64::from(1u32 << 30),
        _ => 1.0,
    }
}

fn resource_names(pods: &[&PodInfo]) -> Vec<String> {
    let mut names: BTreeSet<String> = ["cpu", "memory", "pods"].into_iter().map(String::from).collect();
    for p in pods {
        names.extend(p.requests.extended.keys().cloned());
    }
    names.into_iter().collect()
}

struct TypeSupply {
    price: f64,
    net: Resources,
    /// Label sets of its offerings (node labels, zone and capacity type included).
    offer_labels: Vec<BTreeMap<String, String>>,
}

fn supplies(templates: &[Template]) -> Vec<TypeSupply> {
    let mut by_name: BTreeMap<String, TypeSupply> = BTreeMap::new();
    for t in templates {
        for o in &t.types {
            let labels: Vec<BTreeMap<String, String>> = o
                .offers
                .iter()
                .map(|off| {
                    let mut l = o.labels.clone();
                    l.insert(wk::ZONE.into(), off.zone.clone());
                    l.insert(wk::CAPACITY_TYPE.into(), off.capacity_type.label().into());
                    l
                })
                .collect();
            let e = by_name
                .entry(o.instance_type.name.clone())
                .or_insert_with(|| TypeSupply {
                    price: f64::INFINITY,
                    net: o.net.clone(),
                    offer_labels: Vec::new(),
                });
            // The cheapest offer of all, a reservation's included: a bound below any plan.
            e.price = e.price.min(o.offers.first().map_or(f64::INFINITY, |x| x.price));
            e.net = e.net.max(&o.net);
            e.offer_labels.extend(labels);
        }
    }
    by_name.into_values().filter(|s| s.price.is_finite()).collect()
}

fn aggregate(types: &[TypeSupply], demand: &Resources, names: &[String]) -> Option<f64> {
    let mut vars = variables!();
    let x: Vec<Variable> = types.iter().map(|_| vars.add(variable().min(0.0))).collect();
    let objective: Expression = x.iter().zip(types).map(|(v, t)| t.price * *v).sum();
    let mut model = vars.minimise(objective.clone()).using(microlp);
    for name in names {
        let need = demand.get(name) as f64 * scale(name);
        if need <= 0.0 {
            continue;
        }
        let supply: Expression = x
            .iter()
            .zip(types)
            .map(|(v, t)| (t.net.get(name) as f64 * scale(name)) * *v)
            .sum();
        model = model.with(constraint!(supply >= need));
    }
    model.solve().ok().map(|s| s.eval(&objective))
}

fn per_class(types: &[TypeSupply], pods: &[&PodInfo], free: &Resources, names: &[String]) -> Option<f64> {
    // Classes: pods with the same requests, branches and per-node cap.
    let mut classes: Vec<(Resources, &Vec<Requirements>, f64, u32)> = Vec::new();
    for p in pods {
        let cap = p.per_node_cap();
        match classes
            .iter_mut()
            .find(|(r, b, _, c)| *r == p.requests && **b == p.branches && *c == cap)
        {
            Some(c) => c.2 += 1.0,
            None => classes.push((p.requests.clone(), &p.branches, 1.0, cap)),
        }
    }
    // A class may use a type whose labels it accepts and that holds at least one of its pods.
    let compat: Vec<Vec<usize>> = classes
        .iter()
        .map(|(req, branches, _, _)| {
            (0..types.len())
                .filter(|&t| req.fits_in(&types[t].net).is_ok())
                .filter(|&t| {
                    types[t]
                        .offer_labels
                        .iter()
                        .any(|l| branches.iter().any(|b| b.matches_labels(l).is_ok()))
                })
                .collect()
        })
        .collect();
    if compat.iter().map(Vec::len).sum::<usize>() > CLASS_LP_MAX_PAIRS {
        return None;
    }
    let mut vars = variables!();
    let x: Vec<Variable> = types.iter().map(|_| vars.add(variable().min(0.0))).collect();
    // z[c] holds (type index or None for existing free room, variable).
    let z: Vec<Vec<(Option<usize>, Variable)>> = compat
        .iter()
        .map(|ts| {
            let mut v: Vec<(Option<usize>, Variable)> =
                ts.iter().map(|&t| (Some(t), vars.add(variable().min(0.0)))).collect();
            v.push((None, vars.add(variable().min(0.0))));
            v
        })
        .collect();
    let objective: Expression = x.iter().zip(types).map(|(v, t)| t.price * *v).sum();
    let mut model = vars.minimise(objective.clone()).using(microlp);
    for (c, (req, _, n, cap)) in classes.iter().enumerate() {
        let placed: Expression = z[c].iter().map(|(_, v)| *v).sum();
        model = model.with(constraint!(placed == *n));
        // Whole pods: a node of type t holds at most floor(net / request) of them, and at
        // most the class's per-node cap.
        for (t, v) in z[c].iter().filter_map(|(t, v)| t.map(|t| (t, *v))) {
            let per_node = whole_pods(req, &types[t].net).min(f64::from(*cap));
            model = model.with(constraint!(v <= per_node * x[t]));
        }
    }
    for name in names {
        let s = scale(name);
        for (t, ty) in types.iter().enumerate() {
            let load: Expression = z
                .iter()
                .enumerate()
                .flat_map(|(c, zs)| {
                    zs.iter()
                        .filter(move |(tt, _)| *tt == Some(t))
                        .map(move |(_, v)| (c, *v))
                })
                .map(|(c, v)| (classes[c].0.get(name) as f64 * s) * v)
                .sum();
            let cap = (ty.net.get(name) as f64 * s) * x[t];
            model = model.with(constraint!(load <= cap));
        }
        let existing: Expression = z
            .iter()
            .enumerate()
            .filter_map(|(c, zs)| zs.last().map(|(_, v)| (classes[c].0.get(name) as f64 * s) * *v))
            .sum();
        model = model.with(constraint!(existing <= free.get(name) as f64 * s));
    }
    model.solve().ok().map(|sol| sol.eval(&objective))
}

/// How many whole pods with `req` fit in `net`.
fn whole_pods(req: &Resources, net: &Resources) -> f64 {
    req.names()
        .filter(|n| req.get(n) > 0)
        .map(|n| (net.get(n).max(0) / req.get(n)) as f64)
        .fold(f64::INFINITY, f64::min)
}

/// The lower bound for placing `pods` on new nodes, given the free room of existing nodes.
pub fn lower_bound(templates: &[Template], pods: &[&PodInfo], existing_free: &Resources) -> f64 {
    if pods.is_empty() {
        return 0.0;
    }
    let types = supplies(templates);
    let names = resource_names(pods);
    let total = pods.iter().fold(Resources::default(), |acc, p| acc.plus(&p.requests));
    let demand = total.minus(existing_free);
    let a = aggregate(&types, &demand, &names).unwrap_or(0.0);
    let b = per_class(&types, pods, existing_free, &names).unwrap_or(0.0);
    // Round down at a tenth of a cent's hundredth so that float noise never lifts it above a plan.
    (a.max(b) * 1e6).floor() / 1e6
}
