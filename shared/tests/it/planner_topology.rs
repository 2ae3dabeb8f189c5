//! The planner's topology spread and inter-pod affinity against kube-scheduler's rules
//! (and Karpenter's, where kube-scheduler says nothing of new nodes). Each test names the
//! upstream code its rule comes from; every plan is re-checked by the independent checker.

use carpool::catalog::Catalog;
use carpool::decide::ProvisioningPlan;
use carpool::decide::provisioning::unschedulable::Kind;
use carpool::fixtures::{NodeBuilder, NodePoolBuilder, PodBuilder};
use serde_json::{Value, json};

use crate::support::{node_of, plan_without_bound};

const ZONE: &str = "topology.kubernetes.io/zone";

/// A NodePool of small general-purpose types in the given zones.
fn pool(zones: &[&str]) -> Value {
    NodePoolBuilder::new("general")
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m"])
        .requirement(ZONE, "In", zones)
        .build()
}

fn pending(name: &str, app: &str) -> PodBuilder {
    PodBuilder::new(name)
        .label("app", app)
        .requests("500m", "512Mi")
        .unschedulable()
}

fn spread(key: &str, app: &str, extra: Value) -> Value {
    let mut c = json!({"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}}});
    if let (Value::Object(c), Value::Object(extra)) = (&mut c, extra) {
        c.extend(extra);
    }
    json!([c])
}

/// A node that exists, cordoned so that nothing new lands on it: it is only a domain.
fn cordoned(name: &str, zone: &str) -> Value {
    let mut n = NodeBuilder::new(name)
        .zone(zone)
        .label("kubernetes.io/arch", "amd64")
        .label("karpenter.sh/capacity-type", "on-demand")
        .allocatable("cpu", "4")
        .allocatable("memory", "16Gi")
        .allocatable("pods", "58")
        .ready(true)
        .build();
    n["spec"]["unschedulable"] = json!(true);
    n
}

fn bound(name: &str, app: &str, node: &str) -> PodBuilder {
    PodBuilder::new(name)
        .label("app", app)
        .requests("100m", "128Mi")
        .spec("nodeName", json!(node))
        .running()
}

fn zones_of(p: &ProvisioningPlan, pods: &[&str]) -> Vec<String> {
    let mut z: Vec<String> = pods.iter().map(|n| node_of(p, n).zone.clone()).collect();
    z.sort();
    z
}

fn spread_pods(n: usize, key: &str, extra: Value, pod: impl Fn(PodBuilder) -> PodBuilder) -> Vec<Value> {
    (0..n)
        .map(|i| {
            pod(pending(&format!("web-{i}"), "web"))
                .spec("topologySpreadConstraints", spread(key, "web", extra.clone()))
                .build()
        })
        .collect()
}

// kube-scheduler: podtopologyspread `matchNodeInclusionPolicies`, with nodeAffinityPolicy
// defaulting to Honor in `filterTopologySpreadConstraints`: a node the pod's node
// selector excludes is no domain, so its empty zone does not hold the others back.
#[test]
fn a_zone_the_pods_own_node_selector_excludes_is_no_spread_domain_by_default() {
    let mut items = vec![
        pool(&["us-east-1a", "us-east-1b", "us-east-1c"]),
        cordoned("c1", "us-east-1c"),
    ];
    let not_c = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["us-east-1a", "us-east-1b"]}]}]}}});
    items.extend(spread_pods(6, ZONE, json!({}), |p| p.spec("affinity", not_c.clone())));
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    let names: Vec<String> = (0..6).map(|i| format!("web-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let zones = zones_of(&p, &names);
    assert_eq!(zones.iter().filter(|z| *z == "us-east-1a").count(), 3, "{zones:?}");
    assert_eq!(zones.iter().filter(|z| *z == "us-east-1b").count(), 3, "{zones:?}");
}

// kube-scheduler: podtopologyspread `matchNodeInclusionPolicies` with
// nodeAffinityPolicy: Ignore: every node is a domain, so the existing node's empty zone c
// keeps the global minimum at 0 and each other zone takes maxSkew pods.
#[test]
fn with_node_affinity_policy_ignore_an_excluded_zone_still_holds_the_spread_back() {
    let mut items = vec![
        pool(&["us-east-1a", "us-east-1b", "us-east-1c"]),
        cordoned("c1", "us-east-1c"),
    ];
    let not_c = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["us-east-1a", "us-east-1b"]}]}]}}});
    items.extend(spread_pods(6, ZONE, json!({"nodeAffinityPolicy": "Ignore"}), |p| {
        p.spec("affinity", not_c.clone())
    }));
    let p = plan_without_bound(items);
    assert_eq!(p.nodes.iter().map(|n| n.pods.len()).sum::<usize>(), 2, "{p:#?}");
    assert_eq!(p.unschedulable.len(), 4);
    assert!(
        p.unschedulable.iter().all(|u| u.has(Kind::Topology)),
        "{:#?}",
        p.unschedulable
    );
}

// kube-scheduler counts only nodes that exist; Karpenter's `domainMinCount` takes new
// domains from the pod's own requirements (`podDomains`) whatever the policy: with
// nodeAffinityPolicy: Ignore but no node in zone c, zone c is no domain.
#[test]
fn with_node_affinity_policy_ignore_a_zone_without_nodes_the_pod_cannot_use_is_no_domain() {
    let mut items = vec![pool(&["us-east-1a", "us-east-1b", "us-east-1c"])];
    items.extend(spread_pods(4, ZONE, json!({"nodeAffinityPolicy": "Ignore"}), |p| {
        p.spec(
            "affinity",
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["us-east-1a", "us-east-1b"]}]}]}}}),
        )
    }));
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
}

// kube-scheduler: podtopologyspread `matchNodeInclusionPolicies`, nodeTaintsPolicy
// defaults to Ignore: a tainted node the pods do not tolerate is still a domain...
#[test]
fn a_tainted_node_is_a_spread_domain_unless_node_taints_policy_is_honor() {
    let tainted = |items: &mut Vec<Value>| {
        let mut n = cordoned("c1", "us-east-1c");
        n["spec"]["taints"] = json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]);
        items.push(n);
    };
    let mut items = vec![pool(&["us-east-1a", "us-east-1b"])];
    tainted(&mut items);
    items.extend(spread_pods(4, ZONE, json!({}), |p| p));
    let p = plan_without_bound(items);
    assert_eq!(
        p.unschedulable.len(),
        2,
        "zone c's empty tainted node holds the minimum at 0: {p:#?}"
    );

    // ...and with nodeTaintsPolicy: Honor it is not.
    let mut items = vec![pool(&["us-east-1a", "us-east-1b"])];
    tainted(&mut items);
    items.extend(spread_pods(4, ZONE, json!({"nodeTaintsPolicy": "Honor"}), |p| p));
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    assert_eq!(
        zones_of(&p, &["web-0", "web-1", "web-2", "web-3"]),
        ["us-east-1a", "us-east-1a", "us-east-1b", "us-east-1b"]
    );
}

// kube-scheduler: podtopologyspread `calPreFilterState` takes the minimum over every
// domain of the key; Karpenter's `TopologyGroup.domainMinCount` does so over the
// NodePools' domains, which for karpenter.sh/capacity-type are spot and on-demand.
#[test]
fn a_spread_on_capacity_type_alternates_spot_and_on_demand() {
    let pool = NodePoolBuilder::new("general")
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m"])
        .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
        .build();
    let mut items = vec![pool];
    items.extend(spread_pods(4, "karpenter.sh/capacity-type", json!({}), |p| p));
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    let on = |ct: &str| {
        p.nodes
            .iter()
            .filter(|n| n.capacity_type.label() == ct)
            .map(|n| n.pods.len())
            .sum::<usize>()
    };
    assert_eq!((on("spot"), on("on-demand")), (2, 2), "{p:#?}");
}

// kube-scheduler: podtopologyspread `countPodsMatchSelector` bypasses terminating pods
// (#87621), and its pod informer lists only `status.phase!=Succeeded,!=Failed`
// (scheduler.go `newPodInformer`); Karpenter's `IgnoredForTopology` skips both.
#[test]
fn terminating_and_finished_pods_do_not_count_in_a_spread() {
    let mut items = vec![
        pool(&["us-east-1a", "us-east-1b"]),
        cordoned("a1", "us-east-1a"),
        cordoned("b1", "us-east-1b"),
    ];
    for i in 0..3 {
        items.push(
            bound(&format!("old-{i}"), "web", "a1")
                .deleting("2026-12-01T00:00:00Z")
                .build(),
        );
        items.push(bound(&format!("done-{i}"), "web", "a1").phase("Succeeded").build());
    }
    items.push(bound("live-0", "web", "b1").build());
    items.extend(spread_pods(3, ZONE, json!({}), |p| p));
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    // Counted: a=0 and b=1 (the live pod), so two go to a and one to b.
    assert_eq!(
        zones_of(&p, &["web-0", "web-1", "web-2"]),
        ["us-east-1a", "us-east-1a", "us-east-1b"]
    );
}

// kube-scheduler lists only `status.phase!=Succeeded,!=Failed` pods (scheduler.go
// `newPodInformer`), so podtopologyspread's `countPodsMatchSelector` never sees a Failed
// pod bound to a node; Karpenter: scheduling/topology.go `IgnoredForTopology` skips it
// through `pod.IsTerminal` (Succeeded or Failed).
#[test]
fn failed_pods_do_not_count_in_a_spread() {
    let mut items = vec![
        pool(&["us-east-1a", "us-east-1b"]),
        cordoned("a1", "us-east-1a"),
        cordoned("b1", "us-east-1b"),
    ];
    for i in 0..3 {
        items.push(bound(&format!("failed-{i}"), "web", "a1").phase("Failed").build());
    }
    items.push(bound("live-0", "web", "b1").build());
    items.extend(spread_pods(3, ZONE, json!({}), |p| p));
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    // Counted: a=0 and b=1 (the live pod), so two go to a and one to b; were the failed
    // pods counted (a=3), all three would go to b.
    assert_eq!(
        zones_of(&p, &["web-0", "web-1", "web-2"]),
        ["us-east-1a", "us-east-1a", "us-east-1b"]
    );
}

// kube-scheduler: podtopologyspread `Filter`: 'existing matching num' + 'if self-match
// (1 or 0)' - 'global min matching num' <= maxSkew; a pod its own selector does not
// match adds nothing to the skew.
#[test]
fn a_pod_its_own_spread_selector_does_not_match_adds_nothing_to_the_skew() {
    let mut items = vec![
        pool(&["us-east-1a", "us-east-1b"]),
        cordoned("a1", "us-east-1a"),
        cordoned("b1", "us-east-1b"),
        bound("db-0", "db", "a1").build(),
    ];
    // Pinned to zone a, where one db pod already runs and zone b has none: with the
    // pod counted, the skew would be 2.
    items.push(
        pending("web-0", "web")
            .node_selector(ZONE, "us-east-1a")
            .spec(
                "topologySpreadConstraints",
                spread(ZONE, "db", json!({"nodeAffinityPolicy": "Ignore"})),
            )
            .build(),
    );
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    assert_eq!(node_of(&p, "web-0").zone, "us-east-1a");
}

fn db_in(namespace: &str, node: &str) -> Value {
    PodBuilder::new(&format!("db-{namespace}"))
        .namespace(namespace)
        .label("app", "db")
        .requests("100m", "128Mi")
        .spec("nodeName", json!(node))
        .running()
        .build()
}

fn namespace(name: &str, team: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": team}}})
}

fn away_from_db(namespaces: Value) -> Value {
    let mut term = json!({"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "db"}}});
    if let (Value::Object(t), Value::Object(extra)) = (&mut term, namespaces) {
        t.extend(extra);
    }
    pending("web-0", "web")
        .spec(
            "affinity",
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}),
        )
        .build()
}

// kube-scheduler: framework `newAffinityTerm` / `AffinityTerm.Matches` (the namespaces
// list, or a namespace the namespaceSelector matches); Karpenter's `buildNamespaceList`.
#[test]
fn an_anti_affinity_term_covers_only_the_namespaces_its_selector_matches() {
    let base = || {
        vec![
            pool(&["us-east-1a", "us-east-1b", "us-east-1c"]),
            cordoned("a1", "us-east-1a"),
            cordoned("b1", "us-east-1b"),
            cordoned("c1", "us-east-1c"),
            namespace("data", "x"),
            namespace("other", "y"),
            namespace("third", "y"),
            db_in("data", "b1"),
            db_in("other", "a1"),
            db_in("third", "c1"),
        ]
    };
    // Only the db pod in `data` (team=x, zone b) repels the pod.
    let mut items = base();
    items.push(away_from_db(
        json!({"namespaceSelector": {"matchLabels": {"team": "x"}}}),
    ));
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    assert_ne!(node_of(&p, "web-0").zone, "us-east-1b");

    // The list and the selector together: data (by selector) and other (by name).
    let mut items = base();
    items.push(away_from_db(
        json!({"namespaces": ["other"], "namespaceSelector": {"matchLabels": {"team": "x"}}}),
    ));
    let p = plan_without_bound(items);
    assert_eq!(node_of(&p, "web-0").zone, "us-east-1c");

    // The empty selector covers every namespace: no zone is left.
    let mut items = base();
    items.push(away_from_db(json!({"namespaceSelector": {}})));
    let p = plan_without_bound(items);
    assert!(p.unschedulable.iter().any(|u| u.has(Kind::Topology)), "{p:#?}");
}

// With no Namespace objects in the dump, a namespace is read with the label the
// apiserver sets on every one (kubernetes.io/metadata.name, NamespaceDefaultLabelName).
#[test]
fn without_namespace_objects_a_namespace_selector_matches_by_metadata_name() {
    let items = vec![
        pool(&["us-east-1a", "us-east-1b"]),
        cordoned("a1", "us-east-1a"),
        cordoned("b1", "us-east-1b"),
        db_in("data", "a1"),
        db_in("other", "b1"),
        away_from_db(json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "data"}}})),
    ];
    let p = plan_without_bound(items);
    assert_eq!(node_of(&p, "web-0").zone, "us-east-1b");
}

fn two_term_affinity(name: &str) -> Value {
    PodBuilder::new(name)
        .label("app", "web")
        .label("tier", "front")
        .requests("500m", "512Mi")
        .unschedulable()
        .spec(
            "affinity",
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "web"}}},
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"tier": "front"}}}]}}),
        )
        .build()
}

// kube-scheduler: interpodaffinity `satisfyPodAffinity`: the first pod of a group passes
// only when no pod matches ANY of its terms (`len(state.affinityCounts) == 0`) and it
// matches ALL of them itself (`podMatchesAllAffinityTerms`).
#[test]
fn the_first_pod_of_a_group_is_admitted_only_when_no_pod_matches_any_of_its_terms() {
    // No pod matches either term, and it matches both: admitted.
    let p = plan_without_bound(vec![pool(&["us-east-1a"]), two_term_affinity("web-0")]);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);

    // A pod that matches only the hostname term exists: the zone term has no match in any
    // domain, and the pod is not the first of its group any more.
    let mut node = NodeBuilder::new("n1")
        .zone("us-east-1a")
        .label("kubernetes.io/arch", "amd64")
        .allocatable("cpu", "8")
        .allocatable("memory", "32Gi")
        .allocatable("pods", "58")
        .ready(true)
        .build();
    node["metadata"]["labels"]["kubernetes.io/os"] = json!("linux");
    let front = PodBuilder::new("front-0")
        .label("tier", "front")
        .requests("100m", "128Mi")
        .spec("nodeName", json!("n1"))
        .running()
        .build();
    let p = plan_without_bound(vec![pool(&["us-east-1a"]), node, front, two_term_affinity("web-0")]);
    assert_eq!(p.unschedulable.len(), 1, "{p:#?}");
    assert!(p.unschedulable[0].has(Kind::Topology));
}

// Karpenter: `Scheduler.Solve` pushes a pod that failed back on its queue and retries it
// once the others are placed (queue.go `Queue.Push`, relaxation on no progress).
#[test]
fn a_pod_whose_affinity_targets_a_pending_pod_is_placed_once_its_target_is() {
    let follower = PodBuilder::new("follower")
        .label("app", "follower")
        .requests("2", "2Gi")
        .unschedulable()
        .spec(
            "affinity",
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "leader"}}}]}}),
        )
        .build();
    // The leader itself follows the cache, so both come last, the bigger follower first.
    let leader = PodBuilder::new("leader")
        .label("app", "leader")
        .requests("1", "1Gi")
        .unschedulable()
        .spec(
            "affinity",
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": ZONE, "labelSelector": {"matchLabels": {"app": "cache"}}}]}}),
        )
        .build();
    let cache = pending("cache", "cache").build();
    let p = plan_without_bound(vec![pool(&["us-east-1a", "us-east-1b"]), follower, leader, cache]);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    assert!(node_of(&p, "follower").pods.contains(&"default/leader".to_string()));
    assert_eq!(node_of(&p, "leader").zone, node_of(&p, "cache").zone);
}

fn anti_affine_on(key: &str) -> Value {
    pending("web-0", "web")
        .spec(
            "affinity",
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": key, "labelSelector": {"matchLabels": {"app": "db"}}}]}}),
        )
        .build()
}

// Karpenter: `Topology.AddRequirements` narrows a new NodeClaim to the domains a
// topology allows (`nextDomainAntiAffinity`), so anti-affinity on a key the instance
// type decides picks types in another domain; kube-scheduler's interpodaffinity
// `satisfyExistingPodsAntiAffinity` then checks the node's own label.
#[test]
fn anti_affinity_on_the_architecture_opens_a_node_of_the_other_architecture() {
    let arm = {
        let mut n = cordoned("arm1", "us-east-1a");
        n["metadata"]["labels"]["kubernetes.io/arch"] = json!("arm64");
        n
    };
    let pool = NodePoolBuilder::new("general")
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m"])
        .requirement("kubernetes.io/arch", "In", &["amd64", "arm64"])
        .build();
    let p = plan_without_bound(vec![
        pool,
        arm,
        bound("db-0", "db", "arm1").build(),
        anti_affine_on("kubernetes.io/arch"),
    ]);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    let region = Catalog::embedded().unwrap();
    let region = region.region("us-east-1").unwrap();
    let node = node_of(&p, "web-0");
    for name in &node.instance_types {
        let it = region.types().iter().find(|t| &t.name == name).unwrap();
        assert_eq!(
            it.labels()["kubernetes.io/arch"],
            "amd64",
            "{name} among {:?}",
            node.instance_types
        );
    }
}

// Karpenter: scheduling/topology.go `buildDomainGroups` takes karpenter.sh/capacity-type's
// domains (spot, on-demand) from the NodePools' requirements and the instance types'
// offerings, and topologygroup.go `TopologyGroup.nextDomainAntiAffinity` keeps only the
// domains with no matching pod, so the new NodeClaim is narrowed to on-demand;
// kube-scheduler's interpodaffinity `satisfyPodAntiAffinity` (the incoming pod's own
// required anti-affinity terms against `antiAffinityCounts`) then accepts the node.
#[test]
fn anti_affinity_on_the_capacity_type_opens_a_node_of_the_other_capacity_type() {
    let spot = {
        let mut n = cordoned("s1", "us-east-1a");
        n["metadata"]["labels"]["karpenter.sh/capacity-type"] = json!("spot");
        n
    };
    let pool = NodePoolBuilder::new("general")
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m"])
        .requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
        .build();
    let p = plan_without_bound(vec![
        pool,
        spot,
        bound("db-0", "db", "s1").build(),
        anti_affine_on("karpenter.sh/capacity-type"),
    ]);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    assert_eq!(node_of(&p, "web-0").capacity_type.label(), "on-demand");
}

// Karpenter: scheduling/topology.go `buildDomainGroups` registers every value of
// node.kubernetes.io/instance-type the NodePools' instance types offer as a domain, and
// topologygroup.go `TopologyGroup.nextDomainAntiAffinity` narrows the new NodeClaim to
// the types with no matching pod; kube-scheduler's interpodaffinity
// `satisfyPodAntiAffinity` refuses only a node of the db pod's type.
#[test]
fn anti_affinity_on_the_instance_type_opens_a_node_of_another_instance_type() {
    let pool = || {
        NodePoolBuilder::new("general")
            .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m"])
            .requirement("kubernetes.io/arch", "In", &["amd64"])
            .build()
    };
    // The type the pod gets with no anti-affinity in play: the db pod runs on one such.
    let cheapest = node_of(
        &plan_without_bound(vec![pool(), pending("web-0", "web").build()]),
        "web-0",
    )
    .instance_type
    .clone();
    let db_node = {
        let mut n = cordoned("d1", "us-east-1a");
        n["metadata"]["labels"]["node.kubernetes.io/instance-type"] = json!(cheapest);
        n
    };
    let p = plan_without_bound(vec![
        pool(),
        db_node,
        bound("db-0", "db", "d1").build(),
        anti_affine_on("node.kubernetes.io/instance-type"),
    ]);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    let node = node_of(&p, "web-0");
    assert_ne!(node.instance_type, cheapest);
    assert!(
        !node.instance_types.contains(&cheapest),
        "{cheapest} among {:?}",
        node.instance_types
    );
}

// Karpenter: utils/pod `IsProvisionable` requires `!IsPreempting(pod)`
// (`status.nominatedNodeName` set): kube-scheduler is making room for it elsewhere.
#[test]
fn a_preempting_pod_is_not_launched_for() {
    let mut preempting = pending("urgent", "urgent").build();
    preempting["status"]["nominatedNodeName"] = json!("n1");
    let p = plan_without_bound(vec![pool(&["us-east-1a"]), preempting, pending("web-0", "web").build()]);
    assert_eq!(p.nodes.iter().map(|n| n.pods.len()).sum::<usize>(), 1);
    assert!(node_of(&p, "web-0").pods.len() == 1);
    assert!(p.unschedulable.is_empty());
}

// kube-scheduler: podtopologyspread counts every domain of the key; Karpenter takes a
// custom key's domains from the NodePools' requirements (`Topology.domains`) and narrows
// each NodeClaim to the domain with the fewest pods (`nextDomainTopologySpread`).
#[test]
fn a_spread_on_a_custom_label_alternates_its_values_and_labels_each_node() {
    let pool = NodePoolBuilder::new("teams")
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m"])
        .requirement("company.com/team", "In", &["a", "b"])
        .build();
    let mut items = vec![pool];
    items.extend(spread_pods(4, "company.com/team", json!({}), |p| p));
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    let on = |v: &str| {
        p.nodes
            .iter()
            .filter(|n| n.labels.get("company.com/team").map(String::as_str) == Some(v))
            .map(|n| n.pods.len())
            .sum::<usize>()
    };
    assert_eq!((on("a"), on("b")), (2, 2), "{p:#?}");
}

/// A `WaitForFirstConsumer` StorageClass whose volumes can only be in `zone`.
fn zonal_storage_class(zone: &str) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "zonal"},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "values": [zone]}]}]})
}

fn claim(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
        "spec": {"storageClassName": "zonal", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}})
}

fn volume(claim: &str) -> Value {
    json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])
}

/// A weighted `general` pool and a `batch` pool its pods select by `pool=batch`, both of
/// c and m types in every zone.
fn general_and_batch_pools() -> [Value; 2] {
    let general = NodePoolBuilder::new("general")
        .weight(10)
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m"])
        .build();
    let batch_pool = NodePoolBuilder::new("batch")
        .label("pool", "batch")
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m"])
        .build();
    [general, batch_pool]
}

// kube-scheduler: podtopologyspread `calPreFilterState` counts every node that passes
// `matchNodeInclusionPolicies` (nodeAffinityPolicy: Honor reads only the pod's node
// selector and required node affinity, `nodeaffinity.GetRequiredNodeAffinity`, not its
// volumes) with its matching pods, 0 when none, and `Filter` takes the global minimum over
// them; Karpenter's `TopologyGroup.domainMinCount` takes new domains only where the pod
// could go (`podDomains`, with its volume's zones). A node launched afterwards for other
// pods, in a zone the spread's pods cannot use, is then a domain with none of them: it
// drops their minimum to 0. That node must go to a zone that is already a domain
// (the planner_properties seeds 8f7e3827 and ea2abb2f).
#[test]
fn a_node_opened_for_other_pods_adds_no_empty_zone_to_a_spread_placed_before() {
    let [general, batch_pool] = general_and_batch_pools();
    let mut items = vec![general, batch_pool, zonal_storage_class("us-east-1a")];
    for i in 0..2 {
        items.push(claim(&format!("data-web-{i}")));
        items.push(
            pending(&format!("web-{i}"), "web")
                .requests("1", "512Mi")
                .spec("topologySpreadConstraints", spread(ZONE, "web", json!({})))
                .spec("volumes", volume(&format!("data-web-{i}")))
                .build(),
        );
    }
    // Placed after the web pods (smaller), on a node of its own pool, which allows every
    // zone: at the same price, the planner spreads new nodes over the zones.
    items.push(
        pending("batch-0", "batch")
            .requests("500m", "512Mi")
            .node_selector("pool", "batch")
            .build(),
    );
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    assert_eq!(zones_of(&p, &["web-0", "web-1"]), ["us-east-1a", "us-east-1a"]);
    assert_eq!(node_of(&p, "batch-0").zone, "us-east-1a", "{p:#?}");
}

// The same with nodeAffinityPolicy: Honor and a node selector: podtopologyspread
// `matchNodeInclusionPolicies` counts the nodes the selector accepts, so a planned node
// of the right architecture in a zone the pod's volume rules out is still a domain of its
// spread, and a pod its selector matches may not join it where that takes it past maxSkew
// (the planner_properties seed 49e539d8).
#[test]
fn a_planned_node_the_spreads_node_selector_accepts_is_a_domain_for_later_pods() {
    let [general, batch_pool] = general_and_batch_pools();
    let amd64 = |p: PodBuilder| p.node_selector("kubernetes.io/arch", "amd64");
    let items = vec![
        general,
        batch_pool,
        zonal_storage_class("us-east-1a"),
        claim("data-web-0"),
        // Zone a (its volume), alone in its domains: the minimum is its own count.
        amd64(pending("web-0", "web"))
            .requests("2", "512Mi")
            .spec("topologySpreadConstraints", spread(ZONE, "web", json!({})))
            .spec("volumes", volume("data-web-0"))
            .build(),
        // An amd64 node of its own, in zone b: a web domain with no web pod.
        amd64(pending("batch-0", "batch"))
            .requests("1", "512Mi")
            .node_selector("pool", "batch")
            .build(),
        // Matches web-0's selector, without a spread of its own: next to web-0 it would
        // make zone a 2 against zone b's 0.
        amd64(pending("web-extra", "web")).requests("100m", "128Mi").build(),
    ];
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    let (web, batch) = (node_of(&p, "web-0"), node_of(&p, "batch-0"));
    assert_eq!(web.zone, "us-east-1a");
    if batch.zone != web.zone {
        assert_ne!(node_of(&p, "web-extra").zone, web.zone, "{p:#?}");
    }
}

// kube-scheduler: podtopologyspread `calPreFilterState` counts, for a pod placed on an
// existing node in zone a (its volume's only zone), every node that passes
// `matchNodeInclusionPolicies` (nodeAffinityPolicy: Honor reads its node selector, not its
// volume) and `Filter` takes the global minimum over them. A node opened afterwards in zone
// b for a pod of another app (whose own spread rules zone a out, Karpenter's `podDomains`
// counting the pool's empty zones) is such a node with none of its pods: zone a's 2 against
// b's 0. With no zone left that keeps the placed spread within maxSkew, that pod is
// unschedulable rather than breaking the pod placed before it (the planner_properties seed
// 949915db).
#[test]
fn a_node_that_would_break_a_placed_spread_is_not_opened_even_when_no_other_zone_will_do() {
    let amd64 = |p: PodBuilder| p.node_selector("kubernetes.io/arch", "amd64");
    let existing = NodeBuilder::new("existing-0")
        .zone("us-east-1a")
        .label("topology.ebs.csi.aws.com/zone", "us-east-1a")
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/os", "linux")
        .label("karpenter.sh/capacity-type", "on-demand")
        .instance_type("m5.large")
        .provider_id("aws:///us-east-1a/i-00")
        .allocatable("cpu", "1930m")
        .allocatable("memory", "7Gi")
        .allocatable("pods", "29")
        .ready(true)
        .build();
    let items = vec![
        pool(&["us-east-1a", "us-east-1b", "us-east-1c"]),
        zonal_storage_class("us-east-1a"),
        existing,
        bound("running-0", "app0", "existing-0").build(),
        bound("running-1", "app1", "existing-0").build(),
        claim("data-p1"),
        amd64(pending("p0", "app1"))
            .requests("100m", "128Mi")
            .spec("topologySpreadConstraints", spread(ZONE, "app1", json!({})))
            .build(),
        amd64(pending("p1", "app0"))
            .requests("100m", "512Mi")
            .spec("topologySpreadConstraints", spread(ZONE, "app0", json!({})))
            .spec("volumes", volume("data-p1"))
            .build(),
    ];
    // The checker (in `plan`) holds every placed pod to its spread in the final state.
    let p = plan_without_bound(items);
    assert!(p.nodes.is_empty(), "{p:#?}");
    assert_eq!(p.existing.len(), 1, "{p:#?}");
    assert_eq!(p.existing[0].pods, ["default/p1"]);
    assert_eq!(p.unschedulable.len(), 1, "{p:#?}");
    assert_eq!(p.unschedulable[0].pod, "default/p0");
    assert!(p.unschedulable[0].has(Kind::Topology), "{p:#?}");
}

const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const TEAM: &str = "company.com/team";

/// A NodePool, preferred to `general`, that labels its nodes with a custom key,
/// `company.com/team` In [a, b].
fn team_pool() -> Value {
    NodePoolBuilder::new("teams")
        .weight(5)
        .requirement(TEAM, "In", &["a", "b"])
        .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m"])
        .build()
}

/// An on-demand amd64 node that exists and takes pods, with one running pod of `app`.
fn on_demand_amd64_with(app: &str) -> Vec<Value> {
    let node = NodeBuilder::new("existing-0")
        .zone("us-east-1a")
        .label("kubernetes.io/arch", "amd64")
        .label("kubernetes.io/os", "linux")
        .label(CAPACITY_TYPE, "on-demand")
        .instance_type("m5.large")
        .provider_id("aws:///us-east-1a/i-00")
        .allocatable("cpu", "1930m")
        .allocatable("memory", "7Gi")
        .allocatable("pods", "29")
        .ready(true)
        .build();
    vec![node, bound("running-0", app, "existing-0").build()]
}

/// A pending pod of `web` spread on capacity type.
fn web_on_capacity_type(name: &str, cpu: &str, memory: &str) -> PodBuilder {
    pending(name, "web")
        .requests(cpu, memory)
        .spec("topologySpreadConstraints", spread(CAPACITY_TYPE, "web", json!({})))
}

// kube-scheduler: podtopologyspread `matchNodeInclusionPolicies` (nodeAffinityPolicy:
// Honor) reads the node's labels, so a node labelled `company.com/team=a` is not counted
// by a spread of pods selecting `b`. A new node whose custom label the NodePool leaves
// open (Karpenter's `TopologyNodeFilter.MatchesRequirements` counts it while compatible)
// must open with the value it will be labelled with: here the large pod's node is `a`,
// and the pods asking `b` balance spot and on-demand among the `b` nodes alone.
#[test]
fn a_new_node_is_counted_by_a_spread_under_the_custom_label_it_will_have() {
    let items = vec![
        pool(&["us-east-1a", "us-east-1b", "us-east-1c"]),
        team_pool(),
        web_on_capacity_type("b-0", "100m", "128Mi")
            .node_selector(TEAM, "b")
            .build(),
        web_on_capacity_type("large", "100m", "16Gi").build(),
        web_on_capacity_type("b-1", "250m", "128Mi")
            .node_selector(TEAM, "b")
            .build(),
    ];
    // The checker (in `plan`) holds each pod to its spread over the nodes its policy counts.
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    let (b0, b1) = (node_of(&p, "b-0"), node_of(&p, "b-1"));
    assert_eq!(b0.labels.get(TEAM).map(String::as_str), Some("b"), "{p:#?}");
    assert_ne!(b0.capacity_type, b1.capacity_type, "{p:#?}");
}

// kube-scheduler: podtopologyspread `matchNodeInclusionPolicies` (nodeAffinityPolicy:
// Honor): a spread of amd64 pods counts only amd64 nodes. A new node's candidate types
// must agree on the architecture its pods were counted under (Karpenter narrows a
// NodeClaim's requirements to what its topology allowed, `Topology.AddRequirements`):
// a spot node counted as amd64 and launched as arm64 would leave the amd64 pod on the
// on-demand node at skew 2.
#[test]
fn a_new_node_keeps_the_architecture_a_spread_counted_it_under() {
    let mut items = vec![
        NodePoolBuilder::new("general")
            .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
            .build(),
    ];
    items.extend(on_demand_amd64_with("web"));
    items.extend([
        web_on_capacity_type("p0", "1000m", "128Mi").build(),
        web_on_capacity_type("p1", "100m", "128Mi").build(),
        web_on_capacity_type("amd64", "250m", "128Mi")
            .node_selector("kubernetes.io/arch", "amd64")
            .build(),
    ]);
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
    let catalog = Catalog::embedded().unwrap();
    for n in &p.nodes {
        let arch = |t: &str| catalog.get(t).map(|t| t.labels().get("kubernetes.io/arch").cloned());
        let first = arch(&n.instance_type);
        assert!(n.instance_types.iter().all(|t| arch(t) == first), "{n:#?}");
    }
}

// kube-scheduler: podtopologyspread `Filter` with `matchNodeInclusionPolicies`: a pod of
// `web` on an amd64 on-demand node would take the amd64 pods' spread to skew 2, on an
// arm64 one it is not counted there. Karpenter's `nextDomainTopologySpread` narrows the
// NodeClaim to the domains that keep every spread within maxSkew; so the new node takes
// the types (here the architecture) that do, instead of refusing the pod.
#[test]
fn a_new_node_takes_the_types_that_keep_the_spreads_counting_its_pod_balanced() {
    let mut items = vec![pool(&["us-east-1a", "us-east-1b", "us-east-1c"]), team_pool()];
    items.extend(on_demand_amd64_with("web"));
    items.extend([
        web_on_capacity_type("b", "1000m", "128Mi")
            .node_selector(TEAM, "b")
            .build(),
        web_on_capacity_type("arm64", "2000m", "128Mi")
            .node_selector("kubernetes.io/arch", "arm64")
            .build(),
        web_on_capacity_type("amd64", "250m", "128Mi")
            .node_selector("kubernetes.io/arch", "amd64")
            .build(),
    ]);
    let p = plan_without_bound(items);
    assert!(p.unschedulable.is_empty(), "{:#?}", p.unschedulable);
}
