#!/usr/bin/env python3
"""Writes the example cluster dumps in this folder, as `kubectl get pods,nodes,daemonsets,
poddisruptionbudgets,nodepools.karpenter.sh,ec2nodeclasses.karpenter.k8s.aws -A -o json`
prints them. Deterministic: rerun after editing to regenerate.

  python3 examples/generate.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = "2026-11-30T12:00:00Z"


def pod(ns, name, app, cpu, mem, extra_spec=None, extra_limits=None, labels=None, node=None):
    res = {"requests": {"cpu": cpu, "memory": mem}}
    if extra_limits:
        res["limits"] = extra_limits
    spec = {
        "containers": [{"name": app, "image": f"example.com/{app}:1.0", "resources": res}],
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ],
    }
    spec.update(extra_spec or {})
    meta = {"name": name, "namespace": ns, "labels": {"app": app, **(labels or {})},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-7d9f", "uid": f"uid-{app}", "controller": True}],
            "creationTimestamp": T0}
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    else:
        status = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                  "message": "0/2 nodes are available: 2 Insufficient cpu.", "lastTransitionTime": T0}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def deployment(ns, app, n, cpu, mem, **kw):
    return [pod(ns, f"{app}-7d9f-{i:05d}", app, cpu, mem, **kw) for i in range(n)]


def node(name, itype, zone, cpu, mem, pods, arch="amd64", pool="default", ct="on-demand"):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/arch": arch, "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/zone": zone,
                "topology.kubernetes.io/region": "us-east-1", "karpenter.sh/nodepool": pool,
                "karpenter.sh/capacity-type": ct}},
            "spec": {"providerID": f"aws:///{zone}/i-0{abs(hash(name)) % 10**16:016d}"},
            "status": {"capacity": {"cpu": str(cpu // 1000), "memory": f"{mem}Mi", "pods": str(pods)},
                       "allocatable": {"cpu": f"{cpu - 70}m", "memory": f"{int(mem * 0.85)}Mi", "pods": str(pods)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def daemonset(name, cpu, mem, tolerate_all=True):
    spec = {"containers": [{"name": name, "image": f"example.com/{name}", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}
    if tolerate_all:
        spec["tolerations"] = [{"operator": "Exists"}]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def nodepool(name, reqs, weight=None, taints=None, limits=None, labels=None):
    spec = {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                                  "requirements": reqs, "expireAfter": "720h"}},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"}}
    if taints:
        spec["template"]["spec"]["taints"] = taints
    if labels:
        spec["template"]["metadata"] = {"labels": labels}
    if limits:
        spec["limits"] = limits
    if weight:
        spec["weight"] = weight
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


NODECLASS = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
             "spec": {"role": "KarpenterNodeRole-prod", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                      "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
                      "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}]}}

SYSTEM_DAEMONSETS = [daemonset("aws-node", "25m", "64Mi"), daemonset("kube-proxy", "100m", "64Mi"),
                     daemonset("ebs-csi-node", "30m", "96Mi"), daemonset("node-exporter", "50m", "64Mi")]

GENERAL = [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
           {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
           {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
           {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]}]


def zone_spread(app, skew=1, hard=True):
    return {"maxSkew": skew, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": app}}}


def write(name, items):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}, f, indent=1)
        f.write("\n")


def main():
    # A web tier spread across zones, with room left on two existing nodes.
    web = []
    web += [node("ip-10-0-1-10.ec2.internal", "m6i.xlarge", "us-east-1a", 4000, 16384, 58),
            node("ip-10-0-2-11.ec2.internal", "m6i.xlarge", "us-east-1b", 4000, 16384, 58)]
    web += [pod("shop", f"cart-5c8b-{i}", "cart", "500m", "1Gi", node="ip-10-0-1-10.ec2.internal") for i in range(2)]
    anti_pref = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}}]}}
    web += deployment("shop", "web", 30, "500m", "1Gi", extra_spec={"topologySpreadConstraints": [zone_spread("web")], "affinity": anti_pref})
    web += deployment("shop", "api", 12, "1", "2Gi", extra_spec={"topologySpreadConstraints": [zone_spread("api")],
                      "containers": [{"name": "api", "image": "example.com/api:2.1", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
                                     ]})
    web += deployment("shop", "search", 6, "2", "4Gi", extra_spec={
        "initContainers": [{"name": "envoy", "image": "envoyproxy/envoy", "restartPolicy": "Always",
                            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "search"}}}]}}})
    web += SYSTEM_DAEMONSETS
    web += [{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "shop"},
             "spec": {"minAvailable": "80%", "selector": {"matchLabels": {"app": "web"}}}}]
    web += [nodepool("default", GENERAL, limits={"cpu": "200"}), NODECLASS]
    write("web-zone-spread.json", web)

    # Batch jobs with big memory: a spot memory pool by weight, the default pool behind it.
    batch = deployment("batch", "etl", 20, "2", "28Gi") + deployment("batch", "train-features", 8, "8", "120Gi")
    batch += deployment("batch", "reporter", 10, "500m", "2Gi")
    batch += SYSTEM_DAEMONSETS
    batch += [nodepool("memory-spot", [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                                       {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["r", "x"]},
                                       {"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 3}],
                       weight=50, limits={"memory": "4Ti"}),
              nodepool("default", GENERAL), NODECLASS]
    write("batch-big-memory.json", batch)

    # GPU inference: a tainted GPU pool for the model servers; the web front end elsewhere.
    gpu_tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    gpu = deployment("ml", "llm-server", 6, "6", "24Gi", extra_limits={"nvidia.com/gpu": "1"},
                     extra_spec={"tolerations": gpu_tol, "topologySpreadConstraints": [zone_spread("llm-server", skew=2)]})
    gpu += deployment("ml", "embedder", 4, "3", "12Gi", extra_limits={"nvidia.com/gpu": "1"},
                      extra_spec={"tolerations": gpu_tol, "nodeSelector": {"karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia"}})
    gpu += deployment("ml", "gateway", 10, "500m", "512Mi")
    gpu += SYSTEM_DAEMONSETS + [daemonset("nvidia-device-plugin", "50m", "100Mi")]
    gpu += [nodepool("gpu", [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g5", "g6", "g6e"]},
                             {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                     weight=10, taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                     labels={"workload": "gpu"}),
            nodepool("default", GENERAL), NODECLASS]
    write("gpu-inference.json", gpu)

    # Mixed shapes and no NodePool: the documented default pool applies.
    mixed = deployment("apps", "encoder", 40, "4", "2Gi") + deployment("apps", "cache", 40, "500m", "16Gi")
    mixed += deployment("apps", "frontend", 100, "250m", "512Mi")
    mixed += deployment("apps", "worker", 16, "2", "8Gi", extra_spec={"nodeSelector": {"kubernetes.io/arch": "arm64"}})
    mixed += SYSTEM_DAEMONSETS
    write("mixed.json", mixed)


if __name__ == "__main__":
    main()
