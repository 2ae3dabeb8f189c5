"""Writes instance-labels.json: the facts behind the well-known labels that Karpenter's AWS
provider sets (pkg/providers/instancetype/types.go, computeRequirements) and that
instance-types.json lacks, read from moto's DescribeInstanceTypes records.

Run: python3 shared/data/ec2/extract_labels.py (needs the moto package; deterministic).
"""

import gzip
import importlib.metadata
import json
import os

import moto

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(os.path.dirname(moto.__file__), "ec2", "resources", "instance_types.json.gz")
COLUMNS = [
    "name",
    "ebs_bandwidth_mbps",
    "cpu_sustained_clock_mhz",
    "encryption_in_transit",
    "accelerator_name",
    "accelerator_manufacturer",
    "accelerator_count",
]


def kabob(s):
    return s.replace(" ", "-").lower()


def row(info):
    ebs = info.get("EbsInfo") or {}
    optimized = ebs.get("EbsOptimizedInfo")
    ebs_bw = optimized.get("MaximumBandwidthInMbps") if optimized and ebs.get("EbsOptimizedSupport") == "default" else None
    cpu = info.get("ProcessorInfo")
    clock = round((cpu.get("SustainedClockSpeedInGhz") or 0) * 1000) if cpu is not None else None
    eit = bool((info.get("NetworkInfo") or {}).get("EncryptionInTransitSupported"))
    name = manufacturer = count = None
    inference = (info.get("InferenceAcceleratorInfo") or {}).get("Accelerators") or []
    neuron = (info.get("NeuronInfo") or {}).get("NeuronDevices")
    if len(inference) == 1 and info.get("NeuronInfo") is None:
        a = inference[0]
        name, manufacturer, count = kabob(a["Name"]), kabob(a["Manufacturer"]), a["Count"]
    if neuron is not None and len(neuron) == 1:
        d = neuron[0]
        name, manufacturer, count = kabob(d["Name"]), "aws", d["Count"]
    return [info["InstanceType"], ebs_bw, clock, eit, name, manufacturer, count]


def main():
    with gzip.open(SOURCE) as f:
        records = json.load(f)
    rows = [row(records[k]) for k in sorted(records)]
    out = {
        "source": f"moto {importlib.metadata.version('moto')} moto/ec2/resources/instance_types.json.gz",
        "columns": COLUMNS,
        "rows": rows,
    }
    with open(os.path.join(HERE, "instance-labels.json"), "w") as f:
        f.write('{"source": %s,\n"columns": %s,\n"rows": [\n' % (json.dumps(out["source"]), json.dumps(COLUMNS)))
        f.write(",\n".join(json.dumps(r, separators=(",", ":")) for r in rows))
        f.write("\n]}\n")


if __name__ == "__main__":
    main()
