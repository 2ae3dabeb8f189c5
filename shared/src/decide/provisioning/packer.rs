//! Choosing the instance type of a new node so that the whole plan is cheap.
//!
//! Karpenter's scheduler grows a node while any instance type still fits, then launches
//! the cheapest type that holds what it got. Its nodes therefore fill in pod order: a run
//! of CPU-heavy pods fills a node's CPU and strands its memory, and the memory-heavy pods
//! after them open nodes of their own.
//!
//! Carpool instead picks each new node's type, and the mix of pods it is for, up front:
//!
//! 1. **Resource prices.** The LP relaxation of covering the pending demand (CPU and
//!    memory) with the template's instance types has an optimal basis of at most two types;
//!    enumerating all pairs (O(T²)) gives it exactly, and its dual gives a price per
//!    millicore and per byte ([`ResourcePrices`]).
//! 2. **Patterns.** For each candidate type, the node is filled on paper with the pod that
//!    opened it and then, greedily, with the remaining pods of the classes that may share
//!    it, taking at each step the class with the best value per share of the capacity left
//!    (a multi-dimensional knapsack greedy). The value of a pattern is its pods' worth at
//!    the resource prices.
//! 3. **Choice.** The type with the highest value per dollar wins; the pattern becomes the
//!    node's quotas, which reserve room for those classes as pods arrive in
//!    first-fit-decreasing order.
//!
//! With `T` candidate types and `K` pod classes, opening a node costs O(T·K²); a plan
//! opens at most one node per pod, and usually far fewer.

use crate::model::Resources;

/// Dual prices of CPU and memory, USD per hour per millicore and per byte.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResourcePrices {
    /// Per millicore.
    pub cpu: f64,
    /// Per byte.
    pub memory: f64,
}

impl ResourcePrices {
    /// The worth of a set of requests.
    pub fn value(&self, r: &Resources) -> f64 {
        self.cpu * r.cpu_millis as f64 + self.memory * r.memory as f64
    }
}

/// A type's resources and price, as the LP sees it.
#[derive(Clone, Copy, Debug)]
pub struct Supply {
    /// Millicores.
    pub cpu: f64,
    /// Bytes.
    pub memory: f64,
    /// USD per hour.
    pub price: f64,
}

/// The cheapest fractional cover of `(cpu, memory)` by the supplies, and its dual prices.
/// Returns `(cost, prices)`; `None` when nothing can cover the demand.
pub fn cover_lp(supplies: &[Supply], demand_cpu: f64, demand_memory: f64) -> Option<(f64, ResourcePrices)> {
    let (dc, dm) = (demand_cpu.max(0.0), demand_memory.max(0.0));
    let mut best: Option<(f64, ResourcePrices)> = None;
    let mut consider = |cost: f64, prices: ResourcePrices| {
        if cost.is_finite() && best.is_none_or(|(b, _)| cost < b - 1e-12) {
            best = Some((cost, prices));
        }
    };
    // One type alone: enough copies to cover the binding resource.
    for s in supplies
        .iter()
        .filter(|s| s.cpu > 0.0 && s.memory > 0.0 && s.price > 0.0)
    {
        let by_cpu = dc / s.cpu;
        let by_mem = dm / s.memory;
        if by_cpu >= by_mem {
            consider(
                by_cpu * s.price,
                ResourcePrices {
                    cpu: s.price / s.cpu,
                    memory: 0.0,
                },
            );
        } else {
            consider(
                by_mem * s.price,
                ResourcePrices {
                    cpu: 0.0,
                    memory: s.price / s.memory,
                },
            );
        }
    }
    // Two types, both resources binding: solve the 2×2 system.
    for (i, a) in supplies.iter().enumerate() {
        for b in &supplies[i + 1..] {
            let det = a.cpu * b.memory - b.cpu * a.memory;
            if det.abs() < 1e-9 {
                continue;
            }
            let xa = (dc * b.memory - b.cpu * dm) / det;
            let xb = (a.cpu * dm - dc * a.memory) / det;
            if xa < 0.0 || xb < 0.0 {
                continue;
            }
            // Duals: a.cpu·y_c + a.mem·y_m = a.price, same for b.
            let yc = (a.price * b.memory - b.price * a.memory) / det;
            let ym = (a.cpu * b.price - b.cpu * a.price) / det;
            if yc < 0.0 || ym < 0.0 {
                continue;
            }
            consider(xa * a.price + xb * b.price, ResourcePrices { cpu: yc, memory: ym });
        }
    }
    best
}

/// A pod class as the pattern search sees it.
#[derive(Clone, Debug)]
pub struct ClassDemand {
    /// The class id.
    pub class: usize,
    /// One pod's requests.
    pub requests: Resources,
    /// Pods of the class still unplaced.
    pub remaining: u32,
    /// At most this many on one node (hostname spread, self anti-affinity, host ports).
    pub per_node_cap: u32,
}

/// How many pods of each class a node of a given capacity would take.
#[derive(Clone, Debug, PartialEq)]
pub struct Pattern {
    /// `(class, count)` pairs, the opening class first.
    pub counts: Vec<(usize, u32)>,
    /// Their worth at the resource prices.
    pub value: f64,
}

fn max_copies(req: &Resources, free: &Resources) -> u32 {
    let mut n = u32::MAX;
    for name in req.names() {
        let need = req.get(name);
        if need <= 0 {
            continue;
        }
        let have = free.get(name).max(0);
        n = n.min(u32::try_from(have / need).unwrap_or(u32::MAX));
    }
    n
}

fn dominant_share(req: &Resources, free: &Resources) -> f64 {
    req.names()
        .map(|n| {
            let have = free.get(n);
            if have <= 0 {
                f64::INFINITY
            } else {
                req.get(n) as f64 / have as f64
            }
        })
        .fold(0.0, f64::max)
}

/// Fills `capacity` with one pod of the opening class, then greedily with the remaining
/// pods of every class (the opening one included): at each step the class with the best
/// value per dominant share of the capacity left, in batches of half of what still fits,
/// so that CPU-heavy and memory-heavy classes end up sharing the node. `None` if the
/// opening pod does not fit.
pub fn fill(
    capacity: &Resources,
    opening: &ClassDemand,
    others: &[ClassDemand],
    prices: &ResourcePrices,
) -> Option<Pattern> {
    if opening.requests.fits_in(capacity).is_err() {
        return None;
    }
    let mut free = capacity.minus(&opening.requests);
    let mut value = prices.value(&opening.requests);
    let mut classes: Vec<&ClassDemand> = vec![opening];
    classes.extend(others.iter());
    let mut taken: Vec<u32> = vec![0; classes.len()];
    taken[0] = 1;
    // The node's fair share of what waits: the fraction of the remaining demand it can
    // hold in its tightest resource. No class takes much more than that share of its pods,
    // so that one node cannot strip the mix the nodes after it need (a memory-rich node
    // taking every memory-heavy pod, leaving CPU-heavy ones to CPU-only nodes).
    let total = classes.iter().fold((0.0f64, 0.0f64), |acc, c| {
        let n = f64::from(c.remaining.max(1));
        (
            acc.0 + n * c.requests.cpu_millis as f64,
            acc.1 + n * c.requests.memory as f64,
        )
    });
    let share = [(capacity.cpu_millis as f64, total.0), (capacity.memory as f64, total.1)]
        .iter()
        .filter(|(_, need)| *need > 0.0)
        .map(|(have, need)| have / need)
        .fold(1.0f64, f64::min);
    let avail = |i: usize, taken: &[u32]| {
        let c = classes[i];
        let fair = (share * f64::from(c.remaining.max(1))).ceil() as u32 + 1;
        c.remaining
            .max(1)
            .min(c.per_node_cap.max(1))
            .min(fair)
            .saturating_sub(taken[i])
    };
    loop {
        let best = (0..classes.len())
            .filter(|&i| avail(i, &taken) > 0 && classes[i].requests.fits_in(&free).is_ok())
            .map(|i| {
                let c = classes[i];
                (
                    i,
                    prices.value(&c.requests) / dominant_share(&c.requests, &free).max(1e-12),
                )
            })
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        let Some((i, _)) = best else { break };
        let c = classes[i];
        let take = (max_copies(&c.requests, &free) / 2).max(1).min(avail(i, &taken));
        for _ in 0..take {
            free = free.minus(&c.requests);
        }
        taken[i] += take;
        value += prices.value(&c.requests) * f64::from(take);
    }
    let mut counts: Vec<(usize, u32)> = Vec::new();
    for (i, c) in classes.iter().enumerate() {
        if taken[i] == 0 {
            continue;
        }
        match counts.iter_mut().find(|(k, _)| *k == c.class) {
            Some((_, n)) => *n += taken[i],
            None => counts.push((c.class, taken[i])),
        }
    }
    Some(Pattern { counts, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(cpu: i64, mem_gib: i64) -> Resources {
        Resources {
            cpu_millis: cpu,
            memory: mem_gib << 30,
            pods: 1,
            ..Resources::default()
        }
    }

    #[test]
    fn the_cover_lp_mixes_two_types_when_demand_is_between_their_ratios() {
        // c: 4 cpu / 8 GiB for $0.17; r: 4 cpu / 32 GiB for $0.25. Demand 8 cpu / 40 GiB:
        // one of each covers exactly, for $0.42; r alone needs 2 ($0.50).
        let s = [
            Supply {
                cpu: 4000.0,
                memory: (8u64 << 30) as f64,
                price: 0.17,
            },
            Supply {
                cpu: 4000.0,
                memory: (32u64 << 30) as f64,
                price: 0.25,
            },
        ];
        let (cost, y) = cover_lp(&s, 8000.0, (40u64 << 30) as f64).unwrap();
        assert!((cost - 0.42).abs() < 1e-9, "{cost}");
        assert!(y.cpu > 0.0 && y.memory > 0.0);
        // The duals price each type at exactly its cost.
        assert!((4000.0 * y.cpu + (8u64 << 30) as f64 * y.memory - 0.17).abs() < 1e-9);
    }

    #[test]
    fn a_pattern_mixes_cpu_heavy_and_memory_heavy_pods() {
        let prices = ResourcePrices {
            cpu: 1e-5,
            memory: 1e-11,
        };
        let cap = Resources {
            cpu_millis: 16_000,
            memory: 64 << 30,
            pods: 110,
            ..Resources::default()
        };
        let cpu_heavy = ClassDemand {
            class: 0,
            requests: res(4000, 1),
            remaining: 100,
            per_node_cap: u32::MAX,
        };
        let mem_heavy = ClassDemand {
            class: 1,
            requests: res(500, 15),
            remaining: 100,
            per_node_cap: u32::MAX,
        };
        let p = fill(&cap, &cpu_heavy, std::slice::from_ref(&mem_heavy), &prices).unwrap();
        let count = |class| p.counts.iter().find(|(c, _)| *c == class).map_or(0, |(_, n)| *n);
        assert!(
            count(0) >= 2 && count(1) >= 2,
            "both classes share the node: {:?}",
            p.counts
        );
        let used_cpu = count(0) as i64 * 4000 + count(1) as i64 * 500;
        let used_mem = count(0) as i64 + count(1) as i64 * 15;
        assert!(used_cpu <= 16_000 && used_mem <= 64);
        assert!(
            used_cpu >= 12_000 && used_mem >= 48,
            "the node is well used: {used_cpu}m {used_mem}Gi"
        );
    }
}
