#!/usr/bin/env python3
"""Writes examples/scaled-down.json: a cluster after a scale-down, for `carpool disrupt`.

Six on-demand m5.2xlarge nodes once ran 40 `web` pods; the Deployment is at 8 now. Two
nodes are empty but for their DaemonSet pods, three run a few `web` pods each, one runs
`api` pods whose PDB allows no disruption, and a `report` pod asks not to be disrupted.
The NodePool allows spot and on-demand. Deterministic: rerun after editing.

  python3 examples/generate_scaled_down.py
"""
import json
import os

from generate import NODECLASS, SYSTEM_DAEMONSETS, pod

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHED = "2026-11-29T08:00:00Z"
NOW = "2026-11-30T12:00:00Z"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


def node(i):
    name = f"ip-10-0-{i}-20.ec2.internal"
    zone = ZONES[i % 3]
    return name, {"apiVersion": "v1", "kind": "Node",
                  "metadata": {"name": name, "creationTimestamp": LAUNCHED, "labels": {
                      "kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                      "node.kubernetes.io/instance-type": "m5.2xlarge", "topology.kubernetes.io/zone": zone,
                      "topology.kubernetes.io/region": "us-east-1", "karpenter.sh/nodepool": "default",
                      "karpenter.sh/capacity-type": "on-demand", "carpool.sh/managed": "true"}},
                  "spec": {"providerID": f"aws:///{zone}/i-0{i:016d}"},
                  "status": {"capacity": {"cpu": "8", "memory": "32386520Ki", "pods": "58"},
                             "allocatable": {"cpu": "7910m", "memory": "31369688Ki", "pods": "58"},
                             "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": LAUNCHED}]}}


def on(p, node_name):
    p["spec"]["nodeName"] = node_name
    p["status"] = {"phase": "Running",
                   "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}
    p["metadata"]["creationTimestamp"] = LAUNCHED
    p["status"]["startTime"] = "2026-11-30T10:00:00Z"
    p["status"]["conditions"][1]["lastTransitionTime"] = "2026-11-30T10:00:20Z"
    return p


def daemon_pods(node_name, i):
    out = []
    for ds in ("aws-node", "kube-proxy"):
        p = pod("kube-system", f"{ds}-{i:05d}", ds, "50m", "64Mi")
        p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds, "uid": f"uid-{ds}", "controller": True}]
        out.append(on(p, node_name))
    return out


items = []
names = []
for i in range(6):
    name, n = node(i)
    names.append(name)
    items.append(n)
    items += daemon_pods(name, i)
web = [(0, 3), (1, 3), (2, 2)]
k = 0
for ni, count in web:
    for _ in range(count):
        items.append(on(pod("shop", f"web-7d9f-{k:05d}", "web", "500m", "1Gi"), names[ni]))
        k += 1
for j in range(2):
    items.append(on(pod("shop", f"api-5c8b-{j:05d}", "api", "1", "2Gi"), names[3]))
report = on(pod("batch", "report-6f4d-00000", "report", "250m", "512Mi"), names[2])
report["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
# The dump was taken at NOW: the report pod's last probe flipped then.
report["status"]["conditions"][1]["lastTransitionTime"] = NOW
items.append(report)
items.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "api", "namespace": "shop"},
              "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "api"}}},
              "status": {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2}})
items.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "shop"},
              "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}},
              "status": {"disruptionsAllowed": 1, "currentHealthy": 8, "desiredHealthy": 7, "expectedPods": 8}})
items += [d for d in SYSTEM_DAEMONSETS if d["kind"] == "DaemonSet"]
items.append({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
              "spec": {"template": {"spec": {
                  "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                  "requirements": [
                      {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                      {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                      {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}},
                  "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m",
                                 "budgets": [{"nodes": "50%"}]}}})
items.append(NODECLASS)
with open(os.path.join(HERE, "scaled-down.json"), "w") as f:
    json.dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}, f, indent=1)
    f.write("\n")
