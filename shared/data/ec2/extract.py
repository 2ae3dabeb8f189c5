#!/usr/bin/env python3
"""Regenerate the embedded catalog from the data handed to developers.

Usage: python3 shared/data/ec2/extract.py [SOURCE_DIR]   (default: ../shared/data/ec2)

Writes, next to this script:
  instance-types.json   only the fields Carpool reads, one row per type, columnar
  offerings.json        {region: [row index into instance-types.json]}
  on-demand-prices.json {region: {type: usd_per_hour}} (USD regions only, minified)
  instance-type-extras.json  per type: instance store, EFA interfaces, EBS attachments
and, for the tests only, shared/tests/fixtures/karpenter-allocatable-al2023.json.
The script is deterministic: rerunning it on the same input gives the same bytes.
"""
import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../../../../shared/data/ec2")

COLUMNS = [
    "name", "family", "category", "generation", "size", "vcpu", "memory_mib", "arch",
    "cpu_manufacturer", "gpu_count", "gpu_manufacturer", "gpu_name", "gpu_memory_mib_per_gpu",
    "neuron_device_count", "neuron_core_count", "default_card_max_enis", "ipv4_per_eni",
    "max_pods", "branch_interfaces", "network_bandwidth_mbps", "supported_usage_classes",
    "hypervisor", "bare_metal", "local_nvme_gb",
]

types = json.load(open(os.path.join(SRC, "instance-types.json")))
types.sort(key=lambda t: t["name"])
index = {t["name"]: i for i, t in enumerate(types)}
rows = [[t[c] for c in COLUMNS] for t in types]


def dump(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")


with open(os.path.join(HERE, "instance-types.json"), "w") as f:
    # One row per line keeps diffs readable while staying compact.
    f.write('{"columns":' + json.dumps(COLUMNS, separators=(",", ":")) + ',"rows":[\n')
    f.write(",\n".join(json.dumps(r, separators=(",", ":")) for r in rows))
    f.write("\n]}\n")

offerings = json.load(open(os.path.join(SRC, "instance-type-offerings-by-region.json")))
dump({r: sorted(index[n] for n in names if n in index) for r, names in offerings.items()},
     os.path.join(HERE, "offerings.json"))

dump(json.load(open(os.path.join(SRC, "on-demand-prices.json"))), os.path.join(HERE, "on-demand-prices.json"))

fixtures = os.path.join(HERE, "../../tests/fixtures")
os.makedirs(fixtures, exist_ok=True)
dump({t["name"]: t["karpenter_allocatable_al2023"] for t in types if t["karpenter_allocatable_al2023"]},
     os.path.join(fixtures, "karpenter-allocatable-al2023.json"))


# The facts behind RAID0 ephemeral storage, vpc.amazonaws.com/efa and the EBS CSI driver's
# attach limit. EBS attachments come from moto's DescribeInstanceTypes records (EbsInfo), the
# data the EBS CSI driver's limits table is generated from; the driver's own rules are applied:
# Xen types get 39 (dedicated), types it does not know 27 (shared).
EXTRA_COLUMNS = ["name", "local_storage_gb", "efa", "ebs_max_attachments", "ebs_attachment_limit_type"]


def moto_instance_types():
    import moto  # moto 5.2.5, pip-installed; see SOURCES.md

    path = os.path.join(os.path.dirname(moto.__file__), "ec2/resources/instance_types.json.gz")
    with gzip.open(path) as f:
        return json.load(f)


def extra_row(t, moto_types):
    m = moto_types.get(t["name"])
    published = t.get("karpenter_allocatable_al2023")
    if published is not None:
        efa = published["efa"]
    elif m is not None:
        efa = ((m.get("NetworkInfo") or {}).get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)
    else:
        efa = 0
    if t.get("hypervisor") == "xen":
        ebs = (39, "dedicated")
    elif m is not None and "MaximumEbsAttachments" in (m.get("EbsInfo") or {}):
        ebs = (m["EbsInfo"]["MaximumEbsAttachments"], m["EbsInfo"].get("AttachmentLimitType", "shared"))
    else:
        ebs = (27, "shared")
    return [t["name"], t.get("local_storage_gb") or 0, efa, ebs[0], ebs[1]]


moto_types = moto_instance_types()
with open(os.path.join(HERE, "instance-type-extras.json"), "w") as f:
    f.write('{"columns":' + json.dumps(EXTRA_COLUMNS, separators=(",", ":")) + ',"rows":[\n')
    f.write(",\n".join(json.dumps(extra_row(t, moto_types), separators=(",", ":")) for t in types))
    f.write("\n]}\n")
