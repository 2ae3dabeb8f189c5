#!/usr/bin/env python3
"""The consolidation phase of one autoscaler's run of one workload, from what the
apiserver holds (kubectl, with $KUBECTL and $KUBECONFIG):

    consolidate.py scale                  # scale the workload down, wait until it settled
    consolidate.py watch OUT_DIR TYPES    # watch until the nodes settle; OUT_DIR/consolidation.json

`scale` sets each workload Deployment's replicas to its annotation
carpool.sh/bench-scale-down-to (`carpool bench karpenter-world`: a third of its peak,
rounded up, at least 1, and one more than an integral minAvailable), then waits until
every Deployment has exactly that many pods, all Running and none terminating
(VSK_SCALE_TIMEOUT, default 180 s).

`watch` polls pods, PDBs and nodes (one `kubectl get` a poll, about every second) until
the set of nodes (names, and whether each carries a disruption taint:
karpenter.sh/disrupted or carpool.sh/disrupted) has not changed for VSK_SETTLE seconds
(default 60) with every workload pod Running, or VSK_CONSOLIDATE_MAX seconds passed
(default 360). It counts:

- evictions: workload pods (label carpool.sh/bench=true) that existed when `watch` began
  or were created since, and were deleted (a deletionTimestamp, or gone) while it watched.
  The Deployments' replica counts do not change during `watch`, so every such pod was
  taken by the autoscaler (an eviction, or a node deleted under it);
- PDB violations: polls where a PDB whose status is current (observedGeneration =
  generation) had currentHealthy < desiredHealthy, and which PDBs;

and prices the nodes present at the end (those with a karpenter.sh/nodepool label: the
autoscaler's) from TYPES (their instance type, zone and
capacity type labels), and dumps them (nodes-after.json, pods-after.json)."""
import json
import os
import subprocess
import sys
import time

LABEL = "carpool.sh/bench"
SCALE = "carpool.sh/bench-scale-down-to"
TAINTS = ("karpenter.sh/disrupted", "carpool.sh/disrupted")


def kubectl(*args):
    cmd = [os.environ["KUBECTL"], "--kubeconfig", os.environ["KUBECONFIG"], *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def get(kinds):
    return json.loads(kubectl("get", kinds, "-A", "-o", "json"))["items"]


def bench_pods(items):
    return [p for p in items if p.get("kind", "Pod") == "Pod" and p["metadata"].get("labels", {}).get(LABEL) == "true"]


def managed(nodes):
    """The nodes an autoscaler launched (a NodePool's label), not the stack's own."""
    return [n for n in nodes if "karpenter.sh/nodepool" in n["metadata"].get("labels", {})]


def running(p):
    return p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")


def scale():
    targets = {}
    for d in get("deployments"):
        n = d["metadata"].get("annotations", {}).get(SCALE)
        if n is None:
            continue
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        targets[(ns, name)] = int(n)
        kubectl("scale", "deployment", name, "-n", ns, f"--replicas={n}")
    deadline = time.time() + float(os.environ.get("VSK_SCALE_TIMEOUT", "180"))
    while True:
        pods = bench_pods(get("pods"))
        have = {}
        ok = True
        for p in pods:
            key = (p["metadata"]["namespace"], p["metadata"]["labels"].get("app"))
            have[key] = have.get(key, 0) + 1
            ok = ok and running(p)
        ok = ok and all(have.get(k, 0) == v for k, v in targets.items())
        if ok or time.time() > deadline:
            break
        time.sleep(1)
    print(json.dumps({"scaled": {f"{k[0]}/{k[1]}": v for k, v in targets.items()}, "settled": ok, "pods": len(pods)}))


def prices(types_file):
    out = {}
    for t in json.load(open(types_file)):
        for o in t["offerings"]:
            r = {q["key"]: q["values"][0] for q in o["Requirements"]}
            out[(t["name"], r["topology.kubernetes.io/zone"], r["karpenter.sh/capacity-type"])] = o["Price"]
    return out


def watch(out, types_file):
    settle = float(os.environ.get("VSK_SETTLE", "60"))
    limit = float(os.environ.get("VSK_CONSOLIDATE_MAX", "360"))
    start = time.time()
    seen, gone = {}, {}
    violation_polls, violated, polls = 0, {}, 0
    last_sig, since = None, start
    settled = False
    nodes = []
    while True:
        items = get("pods,poddisruptionbudgets,nodes")
        polls += 1
        now = time.time()
        pods = bench_pods([i for i in items if i["kind"] == "Pod"])
        live = set()
        for p in pods:
            uid = p["metadata"]["uid"]
            seen.setdefault(uid, f'{p["metadata"]["namespace"]}/{p["metadata"]["name"]}')
            if not p["metadata"].get("deletionTimestamp"):
                live.add(uid)
        for uid, name in seen.items():
            if uid not in live and uid not in gone:
                gone[uid] = {"pod": name, "at_seconds": round(now - start, 1)}
        bad = []
        for b in (i for i in items if i["kind"] == "PodDisruptionBudget"):
            st, md = b.get("status", {}), b["metadata"]
            if st.get("observedGeneration") != md.get("generation"):
                continue
            if st.get("currentHealthy", 0) < st.get("desiredHealthy", 0):
                name = f'{md["namespace"]}/{md["name"]}'
                bad.append(name)
                v = violated.setdefault(name, {"polls": 0, "fewest_healthy": st.get("currentHealthy", 0), "desired": st.get("desiredHealthy")})
                v["polls"] += 1
                v["fewest_healthy"] = min(v["fewest_healthy"], st.get("currentHealthy", 0))
        if bad:
            violation_polls += 1
            print(f"consolidate: PDB violated: {bad}", file=sys.stderr)
        nodes = managed([i for i in items if i["kind"] == "Node"])
        sig = sorted((n["metadata"]["name"], any(t.get("key") in TAINTS for t in n.get("spec", {}).get("taints", []) or [])) for n in nodes)
        if sig != last_sig:
            last_sig, since = sig, now
        all_running = all(running(p) for p in pods)
        if not all_running:
            since = now
        if now - since >= settle:
            settled = True
            break
        if now - start >= limit:
            break
        time.sleep(1)
    ended = time.time()
    kubectl_out = kubectl("get", "nodes", "-o", "json")
    open(f"{out}/nodes-after.json", "w").write(kubectl_out)
    open(f"{out}/pods-after.json", "w").write(kubectl("get", "pods", "-A", "-o", "json"))
    nodes = managed(json.loads(kubectl_out)["items"])
    pods = bench_pods(json.loads(open(f"{out}/pods-after.json").read())["items"])
    table = prices(types_file)
    cost, per, types, zones = 0.0, [], {}, {}
    for n in nodes:
        l = n["metadata"].get("labels", {})
        it, z, ct = l.get("node.kubernetes.io/instance-type"), l.get("topology.kubernetes.io/zone"), l.get("karpenter.sh/capacity-type")
        price = table.get((it, z, ct))
        cost += price or 0.0
        on = sum(1 for p in pods if p["spec"].get("nodeName") == n["metadata"]["name"])
        per.append({"node": n["metadata"]["name"], "instance_type": it, "zone": z, "capacity_type": ct, "price": price, "pods": on})
        types[f"{it} {ct}"] = types.get(f"{it} {ct}", 0) + 1
        zones[z] = zones.get(z, 0) + 1
    result = {
        "settled": settled,
        "seconds": round((since if settled else ended) - start),
        "watched_seconds": round(ended - start),
        "settle_seconds": settle,
        "limit_seconds": limit,
        "polls": polls,
        "pods": len(pods),
        "pods_pending": sum(1 for p in pods if not running(p)),
        "nodes": len(nodes),
        "cost_per_hour": round(cost, 4),
        "evictions": len(gone),
        "evicted": sorted(gone.values(), key=lambda g: g["at_seconds"]),
        "pdb_violation_polls": violation_polls,
        "pdbs_violated": violated,
        "types": dict(sorted(types.items())),
        "zones": dict(sorted(zones.items())),
        "node_list": per,
    }
    json.dump(result, open(f"{out}/consolidation.json", "w"), indent=2)
    brief = {k: v for k, v in result.items() if k not in ("evicted", "node_list")}
    print(json.dumps(brief))


if __name__ == "__main__":
    if sys.argv[1:2] == ["scale"]:
        scale()
    elif sys.argv[1:2] == ["watch"] and len(sys.argv) == 4:
        watch(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
