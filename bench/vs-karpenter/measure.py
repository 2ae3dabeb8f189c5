#!/usr/bin/env python3
"""Measure one autoscaler's run of one workload from what the apiserver holds.

    measure.py DIR TYPES_FILE > result.json

DIR holds `pods.json` and `nodes.json` (`kubectl get -o json`) and `launches.json`: the
launch decisions, one object each, {"id", "node" (or null: never registered),
"launched_at" (RFC 3339), "instance_type", "zone", "capacity_type"}: Karpenter's
NodeClaims or Carpool's EC2 instances. Prices come from TYPES_FILE (Karpenter's
instance-types file, which holds the same prices as Carpool's catalog).

Only the workload's pods count (label carpool.sh/bench=true). Times are the apiserver's,
to the second: decision = the launch of the node a pod runs on less the pod's creation;
running = the pod's Ready condition less its creation."""
import json
import sys
from datetime import datetime


def ts(s):
    """RFC 3339, or epoch milliseconds (EC2's launch time as Carpool's adapter reads it)."""
    if s is None or s == "":
        return None
    if isinstance(s, (int, float)):
        return s / 1000.0
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def main():
    d, types_file = sys.argv[1], sys.argv[2]
    pods = json.load(open(f"{d}/pods.json"))["items"]
    nodes = {n["metadata"]["name"]: n for n in json.load(open(f"{d}/nodes.json"))["items"]}
    launches = json.load(open(f"{d}/launches.json"))
    prices = {}
    for t in json.load(open(types_file)):
        for o in t["offerings"]:
            r = {q["key"]: q["values"][0] for q in o["Requirements"]}
            prices[(t["name"], r["topology.kubernetes.io/zone"], r["karpenter.sh/capacity-type"])] = o["Price"]

    pods = [p for p in pods if p["metadata"].get("labels", {}).get("carpool.sh/bench") == "true"]
    by_node = {}
    for l in launches:
        if l.get("node"):
            by_node[l["node"]] = l
    used = set()
    decision, running = [], []
    pending = 0
    for p in pods:
        created = ts(p["metadata"]["creationTimestamp"])
        node = p["spec"].get("nodeName")
        if node:
            used.add(node)
        ready = next((c for c in p.get("status", {}).get("conditions", []) if c["type"] == "Ready" and c["status"] == "True"), None)
        if p.get("status", {}).get("phase") == "Running" and ready:
            running.append(ts(ready["lastTransitionTime"]) - created)
        else:
            pending += 1
        if node in by_node:
            decision.append(ts(by_node[node]["launched_at"]) - created)
    out_nodes, cost, unused = [], 0.0, 0
    for l in launches:
        price = prices.get((l["instance_type"], l["zone"], l["capacity_type"]))
        cost += price or 0.0
        is_used = bool(l.get("node")) and l["node"] in used
        unused += 0 if is_used else 1
        out_nodes.append({**l, "price": price, "pods": sum(1 for p in pods if p["spec"].get("nodeName") == l.get("node") and l.get("node")), "used": is_used})
    by_type = {}
    for n in out_nodes:
        k = f'{n["instance_type"]} {n["capacity_type"]}'
        by_type[k] = by_type.get(k, 0) + 1
    created = [ts(p["metadata"]["creationTimestamp"]) for p in pods]
    readies = [ts(c["lastTransitionTime"]) for p in pods for c in p.get("status", {}).get("conditions", []) if c["type"] == "Ready" and c["status"] == "True"]
    json.dump({
        "pods": len(pods),
        "pods_running": len(running),
        "pods_pending": pending,
        "nodes": len(out_nodes),
        "cost_per_hour": round(cost, 4),
        "launched_not_used": unused,
        "decision_seconds": {"p50": pct(decision, 50), "p99": pct(decision, 99), "n": len(decision)},
        "running_seconds": {"p50": pct(running, 50), "p99": pct(running, 99), "n": len(running)},
        "all_running_after_seconds": (max(readies) - min(created)) if readies and created and pending == 0 else None,
        "types": by_type,
        "zones": {z: sum(1 for n in out_nodes if n["zone"] == z) for z in sorted({n["zone"] for n in out_nodes})},
        "launches": out_nodes,
    }, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
