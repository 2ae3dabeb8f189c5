//! kube-scheduler's spread *score*: among the nodes that pass its filters, it prefers
//! those whose domains hold fewer of the pod's kin (`PodTopologySpread`'s `PreScore`,
//! `Score` and `NormalizeScore`, `pkg/scheduler/framework/plugins/podtopologyspread/
//! scoring.go`; weight 2 in the default profile, `getDefaultPlugins`).
//!
//! The constraints scored are the pod's `ScheduleAnyway` spreads or, when it has no
//! spread at all, the system defaults (`systemDefaultConstraints` in `plugin.go`: per
//! hostname with `maxSkew` 3 and per zone with `maxSkew` 5), which count the pods of the
//! same selector. kube-scheduler builds that selector from the Services and the
//! ReplicaSet, StatefulSet or ReplicationController that select the pod
//! (`helper.DefaultSelector`); the replay reads the pods of its controller (the same
//! `ownerReference`), which its controller's selector matches, and no Service.
//!
//! Without it, a replay of pods of one Deployment and no spread of their own piles them
//! on the emptiest node where kube-scheduler spreads them over zones and nodes (the
//! measurement is in the book, `docs/src/design/waves-and-fit.md`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::decide::checker::node_affinity;
use crate::decide::checker::pending::namespace;
use crate::decide::checker::selector::{self, Labels};
use crate::decide::checker::spread::constraints_when;
use crate::decide::checker::state::FinalState;
use crate::model::pod::Pod;

/// The score's weight in the default profile.
pub(super) const WEIGHT: i64 = 2;

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// Which pods a constraint counts.
enum Kin<'a> {
    /// Those its selector matches.
    Selector(Option<LabelSelector>),
    /// Those of the same controller.
    Controller(&'a str),
}

struct Soft<'a> {
    key: String,
    max_skew: i32,
    kin: Kin<'a>,
    honor_affinity: bool,
}

fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

fn soft_constraints(pod: &Pod) -> (Vec<Soft<'_>>, bool) {
    let has_own = pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .is_some_and(|c| !c.is_empty());
    if has_own {
        let soft = constraints_when(pod, "ScheduleAnyway")
            .into_iter()
            .map(|c| Soft {
                key: c.c.topology_key.clone(),
                max_skew: c.c.max_skew,
                kin: Kin::Selector(c.selector),
                honor_affinity: c.honor_affinity,
            })
            .collect();
        return (soft, true);
    }
    let Some(uid) = controller_uid(pod) else {
        return (Vec::new(), false);
    };
    let default = [(HOSTNAME, 3), (ZONE, 5)]
        .into_iter()
        .map(|(key, max_skew)| Soft {
            key: key.into(),
            max_skew,
            kin: Kin::Controller(uid),
            honor_affinity: true,
        })
        .collect();
    (default, false)
}

fn kin_of(kin: &Kin<'_>, ns: &str, candidate: &Pod) -> bool {
    if namespace(candidate) != ns {
        return false;
    }
    match kin {
        Kin::Selector(sel) => {
            let no_labels = Labels::new();
            let labels = candidate.metadata.labels.as_ref().unwrap_or(&no_labels);
            selector::label_selector(sel.as_ref(), labels)
        }
        Kin::Controller(uid) => controller_uid(candidate) == Some(uid),
    }
}

/// The normalized spread score (0 to 100) of each of the `feasible` nodes for `pod`, as
/// kube-scheduler computes it; all 0 when it scores no spread for the pod.
pub(super) fn scores(pod: &Pod, state: &FinalState<'_>, feasible: &[usize]) -> Vec<i64> {
    let (constraints, require_all) = soft_constraints(pod);
    if constraints.is_empty() || feasible.is_empty() {
        return vec![0; feasible.len()];
    }
    let Some(spec) = pod.spec.as_ref() else {
        return vec![0; feasible.len()];
    };
    let ns = namespace(pod);
    let has_keys = |labels: &Labels| constraints.iter().all(|c| labels.contains_key(&c.key));
    let ignored: Vec<bool> = feasible
        .iter()
        .map(|&i| require_all && !has_keys(&state.nodes[i].labels))
        .collect();
    let counted = ignored.iter().filter(|i| !**i).count();
    // The domains of each constraint among the feasible nodes, and their weights.
    let mut counts: Vec<BTreeMap<String, i64>> = vec![BTreeMap::new(); constraints.len()];
    for (f, &i) in feasible.iter().enumerate() {
        if ignored[f] {
            continue;
        }
        for (c, soft) in constraints.iter().enumerate() {
            if soft.key != HOSTNAME {
                let value = state.nodes[i].labels.get(&soft.key).cloned().unwrap_or_default();
                counts[c].entry(value).or_insert(0);
            }
        }
    }
    let weights: Vec<f64> = constraints
        .iter()
        .enumerate()
        .map(|(c, soft)| {
            let size = if soft.key == HOSTNAME { counted } else { counts[c].len() };
            ((size + 2) as f64).ln()
        })
        .collect();
    // Each constraint's kin on each node; a domain counts them over the nodes whose
    // labels, and the pod's node affinity when honoured, let them count.
    let kin: Vec<Vec<i64>> = constraints
        .iter()
        .map(|soft| {
            let mut per_node = vec![0; state.nodes.len()];
            for q in &state.placed {
                if !q.terminating && kin_of(&soft.kin, ns, q.pod) {
                    per_node[q.node] += 1;
                }
            }
            per_node
        })
        .collect();
    for (c, soft) in constraints.iter().enumerate() {
        if soft.key == HOSTNAME {
            continue;
        }
        for (i, n) in state.nodes.iter().enumerate() {
            let counts_here = (!require_all || has_keys(&n.labels))
                && (!soft.honor_affinity || node_affinity::matches(spec, &n.labels, n.node_name.as_deref()));
            if !counts_here {
                continue;
            }
            let value = n.labels.get(&soft.key).cloned().unwrap_or_default();
            if let Some(count) = counts[c].get_mut(&value) {
                *count += kin[c][i];
            }
        }
    }
    let raw: Vec<i64> = feasible
        .iter()
        .map(|&i| {
            let mut score = 0.0;
            for (c, soft) in constraints.iter().enumerate() {
                let Some(value) = state.nodes[i].labels.get(&soft.key) else {
                    continue;
                };
                let count = if soft.key == HOSTNAME {
                    kin[c][i]
                } else {
                    counts[c].get(value).copied().unwrap_or(0)
                };
                score += count as f64 * weights[c] + f64::from(soft.max_skew - 1);
            }
            score.round() as i64
        })
        .collect();
    let live = raw.iter().zip(&ignored).filter(|(_, ig)| !**ig).map(|(s, _)| *s);
    let (min, max) = live.fold((i64::MAX, 0), |(lo, hi), s| (lo.min(s), hi.max(s)));
    raw.iter()
        .zip(&ignored)
        .map(|(&s, &ig)| match () {
            _ if ig => 0,
            _ if max == 0 => 100,
            _ => 100 * (max + min - s) / max,
        })
        .collect()
}
