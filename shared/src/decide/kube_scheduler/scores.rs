//! kube-scheduler's resource scores, as its default profile weighs them
//! (`pkg/scheduler/apis/config/v1/default_plugins.go`, `getDefaultPlugins`: weight 1
//! each), for a node whose pods would request `requested` (cpu millis, memory bytes)
//! with the pod on it, out of its `allocatable`.

use crate::model::Resources;

/// A score's maximum (`framework.MaxNodeScore`).
pub const MAX_SCORE: i64 = 100;
/// What the scores count for a container without a cpu request (millicores;
/// `schedutil.DefaultMilliCPURequest`, used by `GetNonzeroRequests`).
pub const DEFAULT_CPU_MILLIS: i64 = 100;
/// What they count for a container without a memory request (bytes;
/// `schedutil.DefaultMemoryRequest`).
pub const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;

/// `NodeResourcesFit` with its default `LeastAllocated` strategy
/// (`noderesources/least_allocated.go`, `leastResourceScorer`, `leastRequestedScore`):
/// per resource `(allocatable - requested) * 100 / allocatable` in integers, 0 past
/// allocatable, averaged over cpu and memory.
pub fn least_allocated(requested: (i64, i64), allocatable: &Resources) -> i64 {
    let one = |req: i64, cap: i64| {
        if cap <= 0 || req > cap {
            0
        } else {
            (cap - req) * MAX_SCORE / cap
        }
    };
    (one(requested.0, allocatable.cpu_millis) + one(requested.1, allocatable.memory)) / 2
}

/// `NodeResourcesBalancedAllocation` (`noderesources/balanced_allocation.go`,
/// `balancedResourceScorer`): with `f` the requested share of cpu and of memory (at most
/// 1), `(1 - std(f)) * 100`, which for two resources is `(1 - |f_cpu - f_mem| / 2) * 100`.
pub fn balanced_allocation(requested: (i64, i64), allocatable: &Resources) -> i64 {
    let share = |req: i64, cap: i64| {
        if cap <= 0 {
            1.0
        } else {
            (req as f64 / cap as f64).min(1.0)
        }
    };
    let std = (share(requested.0, allocatable.cpu_millis) - share(requested.1, allocatable.memory)).abs() / 2.0;
    ((1.0 - std) * MAX_SCORE as f64) as i64
}

/// Both resource scores, as the default profile adds them.
pub fn resources(requested: (i64, i64), allocatable: &Resources) -> i64 {
    least_allocated(requested, allocatable) + balanced_allocation(requested, allocatable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(cpu_millis: i64, memory: i64) -> Resources {
        Resources {
            cpu_millis,
            memory,
            ..Resources::default()
        }
    }

    #[test]
    fn an_empty_node_scores_highest_and_a_full_one_lowest_on_least_allocated() {
        let n = node(4000, 8 << 30);
        assert_eq!(least_allocated((0, 0), &n), 100);
        assert_eq!(least_allocated((2000, 4 << 30), &n), 50);
        assert_eq!(least_allocated((4000, 8 << 30), &n), 0);
        // Past allocatable, a resource scores 0: cpu 0, memory 0.
        assert_eq!(least_allocated((5000, 9 << 30), &n), 0);
    }

    #[test]
    fn equal_shares_of_cpu_and_memory_are_perfectly_balanced() {
        let n = node(4000, 8 << 30);
        assert_eq!(balanced_allocation((2000, 4 << 30), &n), 100);
        assert_eq!(balanced_allocation((4000, 0), &n), 50);
    }
}
