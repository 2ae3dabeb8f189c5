//! Topology bookkeeping for spread constraints and pod (anti-)affinity: how many pods
//! matching each selector sit in each domain (zone, hostname, capacity type, or any other
//! node label).
//!
//! Every selector a pending pod uses becomes a group, registered before placement. Each
//! placed pod (existing or planned) is recorded once: O(groups) selector checks. A check
//! is then O(terms of the pod).
//!
//! A spread's group counts only the pods on the nodes its node inclusion policies admit
//! ([`NodeInclusion`]), and never a terminating pod (kube-scheduler's podtopologyspread
//! `countPodsMatchSelector` skips pods with a deletion timestamp; Karpenter's
//! `IgnoredForTopology`). Pods that have finished are not recorded at all: kube-scheduler
//! does not see them (its pod informer selects `status.phase!=Succeeded,!=Failed`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1::Taint;

use crate::decide::provisioning::node_inclusion::NodeInclusion;
use crate::decide::provisioning::pod::{AffinityTerm, PodInfo};
use crate::decide::provisioning::selector::Selector;
use crate::decide::provisioning::unschedulable::Rejection;
use crate::model::Requirement;

/// A group: topology key, selector, namespaces, and for a spread the nodes it counts
/// (`None` for pod (anti-)affinity, which counts every node).
type GroupKey = (String, Selector, Option<BTreeSet<String>>, Option<NodeInclusion>);

#[derive(Debug)]
struct Group {
    key: String,
    selector: Selector,
    namespaces: Option<BTreeSet<String>>,
    spread: Option<NodeInclusion>,
    counts: HashMap<String, i32>,
    total: i32,
}

/// A placed pod as the topology sees it.
#[derive(Clone, Copy)]
pub struct PlacedPod<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Its required anti-affinity terms.
    pub anti_affinity: &'a [AffinityTerm],
    /// Whether it is terminating (spreads do not count it).
    pub terminating: bool,
}

impl<'a> PlacedPod<'a> {
    /// A pending pod, placed by the plan.
    pub fn planned(pod: &'a PodInfo) -> Self {
        PlacedPod {
            namespace: &pod.namespace,
            labels: &pod.labels,
            anti_affinity: &pod.anti_affinity,
            terminating: false,
        }
    }
}

/// The domains a pod's spread may count for its global minimum, one entry per spread:
/// `None` when new domains can always be opened (a hostname: a new node is one), so the
/// minimum is 0.
pub type SpreadDomains = [Option<Vec<String>>];

/// The domains of one node, by topology key.
pub trait Domains {
    /// The node's value for a topology key, if it has one.
    fn domain(&self, key: &str) -> Option<&str>;

    /// Whether the node meets a node requirement, or for a label not decided yet (a
    /// planned node's custom key), may still meet it.
    fn may_meet(&self, r: &Requirement) -> bool {
        match self.domain(r.key()) {
            Some(v) => r.has(v),
            None => r.allows_absent(),
        }
    }
}

impl Domains for BTreeMap<String, String> {
    fn domain(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// The groups a pod's constraints refer to, looked up once per pod class.
#[derive(Clone, Debug, Default)]
pub struct PodGroups {
    // Group ids, in the order of the pod's spreads and terms.
    spreads: Vec<Option<usize>>,
    affinity: Vec<Option<usize>>,
    anti_affinity: Vec<Option<usize>>,
    preferred_affinity: Vec<Option<usize>>,
    preferred_anti_affinity: Vec<Option<usize>>,
}

/// Counts of matching pods per domain, per selector group.
#[derive(Debug, Default)]
pub struct Topology {
    groups: Vec<Group>,
    index: HashMap<GroupKey, usize>,
    /// Required anti-affinity terms of placed pods, with the domains they hold.
    held: HashMap<AffinityTerm, HashSet<String>>,
}

/// Which of a pod's soft constraints are enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strictness {
    /// Preferred pod (anti-)affinity treated as required.
    pub preferred_pod_affinity: bool,
    /// `ScheduleAnyway` spreads treated as `DoNotSchedule`.
    pub soft_spreads: bool,
}

impl Topology {
    fn group(
        &mut self,
        key: &str,
        selector: &Selector,
        namespaces: Option<&BTreeSet<String>>,
        spread: Option<&NodeInclusion>,
    ) -> usize {
        let k = (key.to_string(), selector.clone(), namespaces.cloned(), spread.cloned());
        if let Some(&g) = self.index.get(&k) {
            return g;
        }
        self.groups.push(Group {
            key: key.to_string(),
            selector: selector.clone(),
            namespaces: namespaces.cloned(),
            spread: spread.cloned(),
            counts: HashMap::new(),
            total: 0,
        });
        self.index.insert(k, self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// Registers the groups a pending pod's constraints count. Call before recording pods.
    pub fn register(&mut self, pod: &PodInfo) {
        for s in &pod.spreads {
            let ns = BTreeSet::from([s.namespace.clone()]);
            self.group(&s.key, &s.selector, Some(&ns), Some(&s.inclusion));
        }
        for t in pod
            .affinity
            .iter()
            .chain(&pod.anti_affinity)
            .chain(&pod.preferred_affinity)
            .chain(&pod.preferred_anti_affinity)
        {
            self.group(&t.key, &t.selector, t.namespaces.as_ref(), None);
        }
    }

    /// Records a placed pod on a node with these taints.
    pub fn record(&mut self, pod: PlacedPod<'_>, node: &impl Domains, taints: &[Taint]) {
        for g in &mut self.groups {
            if g.namespaces.as_ref().is_some_and(|ns| !ns.contains(pod.namespace)) || !g.selector.matches(pod.labels) {
                continue;
            }
            if let Some(inclusion) = &g.spread
                && (pod.terminating || !inclusion.admits(|r| node.may_meet(r), taints))
            {
                continue;
            }
            if let Some(d) = node.domain(&g.key) {
                *g.counts.entry(d.to_string()).or_insert(0) += 1;
                g.total += 1;
            }
        }
        for t in pod.anti_affinity {
            if let Some(d) = node.domain(&t.key) {
                self.held.entry(t.clone()).or_default().insert(d.to_string());
            }
        }
    }

    /// The topology keys of every group and of every required anti-affinity term held by
    /// a placed pod.
    pub fn keys(&self) -> BTreeSet<String> {
        self.groups
            .iter()
            .map(|g| g.key.clone())
            .chain(self.held.keys().map(|t| t.key.clone()))
            .collect()
    }

    /// The label keys that the spread groups' node inclusion reads: the keys of the pods'
    /// node selectors and required node affinity, under `nodeAffinityPolicy: Honor`
    /// (kube-scheduler's podtopologyspread `matchNodeInclusionPolicies`). A planned node
    /// whose value for one of them is not decided yet could be counted where the node
    /// finally launched is not.
    pub fn inclusion_keys(&self) -> BTreeSet<String> {
        self.groups
            .iter()
            .filter_map(|g| g.spread.as_ref()?.affinity.as_ref())
            .flatten()
            .flat_map(|b| b.iter().map(|r| r.key().to_string()))
            .collect()
    }

    /// Looks up the groups of a pod's constraints (registered with [`Topology::register`]).
    pub fn groups_of(&self, pod: &PodInfo) -> PodGroups {
        let id = |key: &str, sel: &Selector, ns: Option<&BTreeSet<String>>, spread: Option<&NodeInclusion>| {
            self.index
                .get(&(key.to_string(), sel.clone(), ns.cloned(), spread.cloned()))
                .copied()
        };
        let terms = |ts: &[AffinityTerm]| {
            ts.iter()
                .map(|t| id(&t.key, &t.selector, t.namespaces.as_ref(), None))
                .collect()
        };
        PodGroups {
            spreads: pod
                .spreads
                .iter()
                .map(|s| {
                    id(
                        &s.key,
                        &s.selector,
                        Some(&BTreeSet::from([s.namespace.clone()])),
                        Some(&s.inclusion),
                    )
                })
                .collect(),
            affinity: terms(&pod.affinity),
            anti_affinity: terms(&pod.anti_affinity),
            preferred_affinity: terms(&pod.preferred_affinity),
            preferred_anti_affinity: terms(&pod.preferred_anti_affinity),
        }
    }

    /// The groups whose selector counts a pod with these labels in this namespace.
    pub fn groups_counting(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Vec<usize> {
        (0..self.groups.len())
            .filter(|&g| {
                let g = &self.groups[g];
                g.namespaces.as_ref().is_none_or(|ns| ns.contains(namespace)) && g.selector.matches(labels)
            })
            .collect()
    }

    /// The topology key of group `g`.
    pub fn group_key(&self, g: usize) -> &str {
        &self.groups[g].key
    }

    /// Whether group `g` would count a pod on this node (its spread's node inclusion
    /// policies, the taints taken as tolerated).
    pub fn counts_on(&self, g: usize, node: &impl Domains) -> bool {
        self.groups[g]
            .spread
            .as_ref()
            .is_none_or(|inclusion| inclusion.admits(|r| node.may_meet(r), &[]))
    }

    /// Pods counted by group `g` in a domain.
    pub fn count_of(&self, g: usize, domain: &str) -> i32 {
        self.count_in(Some(g), domain)
    }

    fn count_in(&self, g: Option<usize>, domain: &str) -> i32 {
        g.and_then(|g| self.groups[g].counts.get(domain)).copied().unwrap_or(0)
    }

    /// The group id of a pod's `i`-th spread.
    pub fn spread_group(groups: &PodGroups, i: usize) -> Option<usize> {
        groups.spreads.get(i).copied().flatten()
    }

    /// Pods matching the `i`-th spread of a pod in a domain.
    pub fn spread_count_of(&self, groups: &PodGroups, i: usize, domain: &str) -> i32 {
        self.count_in(groups.spreads.get(i).copied().flatten(), domain)
    }

    /// Checks a pod's spreads and (anti-)affinity against a node. `domains` are, per
    /// spread, the domains its global minimum is taken over.
    pub fn check(
        &self,
        pod: &PodInfo,
        groups: &PodGroups,
        node: &impl Domains,
        strict: Strictness,
        domains: &SpreadDomains,
    ) -> Result<(), Rejection> {
        self.check_keys(pod, groups, node, strict, domains, |_| true)
    }

    /// The global minimum of a pod's `i`-th spread: the fewest matching pods in any of
    /// its domains, or 0 when there are fewer domains than `minDomains` or new ones can
    /// be opened (kube-scheduler's podtopologyspread `preFilterState.minMatchNum`;
    /// Karpenter's `TopologyGroup.domainMinCount`).
    pub fn spread_min(&self, pod: &PodInfo, groups: &PodGroups, i: usize, domains: &SpreadDomains) -> i32 {
        let Some(s) = pod.spreads.get(i) else { return 0 };
        let g = groups.spreads.get(i).copied().flatten();
        match domains.get(i).and_then(Option::as_ref) {
            Some(ds) if !ds.is_empty() && ds.len() as i32 >= s.min_domains.unwrap_or(1) => {
                ds.iter().map(|d| self.count_in(g, d)).min().unwrap_or(0)
            }
            _ => 0,
        }
    }

    /// [`Topology::check`] restricted to the constraints whose topology key passes `keys`
    /// (e.g. only zonal ones, to rule out whole zones at once).
    pub fn check_keys<'a>(
        &self,
        pod: &'a PodInfo,
        groups: &'a PodGroups,
        node: &impl Domains,
        strict: Strictness,
        domains: &SpreadDomains,
        keys: impl Fn(&str) -> bool,
    ) -> Result<(), Rejection> {
        for (i, s) in pod.spreads.iter().enumerate() {
            if !(s.hard || strict.soft_spreads) || !keys(&s.key) {
                continue;
            }
            let Some(d) = node.domain(&s.key) else {
                return Err(Rejection::Spread(s.key.clone()));
            };
            let g = groups.spreads.get(i).copied().flatten();
            let count = self.count_in(g, d);
            let min = self.spread_min(pod, groups, i, domains);
            // 'existing matching num' + 'if self-match (1 or 0)' - 'global min matching num'.
            let self_match = i32::from(s.counts_itself(&pod.labels));
            if count + self_match - min > s.max_skew {
                return Err(Rejection::Spread(s.key.clone()));
            }
        }
        // Required terms, then the preferred ones when they are enforced, with their groups.
        let terms = |required: &'a [AffinityTerm],
                     preferred: &'a [AffinityTerm],
                     ids: &'a [Option<usize>],
                     pref_ids: &'a [Option<usize>]| {
            let preferred = if strict.preferred_pod_affinity { preferred } else { &[] };
            let pref_ids = if strict.preferred_pod_affinity { pref_ids } else { &[] };
            required
                .iter()
                .chain(preferred)
                .zip(ids.iter().chain(pref_ids))
                .filter(|(t, _)| keys(&t.key))
        };
        // kube-scheduler's interpodaffinity `satisfyPodAffinity`: every term needs a
        // matching pod in the node's domain, and the node must have every term's key;
        // failing that, the first pod of a group is admitted when no pod anywhere matches
        // any of its terms and it matches all of them itself.
        let mut missing: Option<&str> = None;
        let mut any_match_anywhere = false;
        let mut matches_all_itself = true;
        for (t, g) in terms(
            &pod.affinity,
            &pod.preferred_affinity,
            &groups.affinity,
            &groups.preferred_affinity,
        ) {
            let Some(d) = node.domain(&t.key) else {
                return Err(Rejection::Affinity(t.key.clone()));
            };
            if self.count_in(*g, d) == 0 && missing.is_none() {
                missing = Some(&t.key);
            }
            any_match_anywhere |= g.is_some_and(|g| self.groups[g].total > 0);
            matches_all_itself &= t.matches(&pod.namespace, &pod.labels);
        }
        if let Some(key) = missing
            && (any_match_anywhere || !matches_all_itself)
        {
            return Err(Rejection::Affinity(key.to_string()));
        }
        for (t, g) in terms(
            &pod.anti_affinity,
            &pod.preferred_anti_affinity,
            &groups.anti_affinity,
            &groups.preferred_anti_affinity,
        ) {
            let Some(d) = node.domain(&t.key) else { continue };
            if self.count_in(*g, d) > 0 {
                return Err(Rejection::AntiAffinity(t.key.clone()));
            }
        }
        for (t, domains) in &self.held {
            if !keys(&t.key) {
                continue;
            }
            if let Some(d) = node.domain(&t.key)
                && domains.contains(d)
                && t.matches(&pod.namespace, &pod.labels)
            {
                return Err(Rejection::AntiAffinity(t.key.clone()));
            }
        }
        Ok(())
    }
}
