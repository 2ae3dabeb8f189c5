//! The well-known label keys that every instance-type offering carries, and Carpool's own
//! names on nodes (see DESIGN.md, "Names on AWS and in Kubernetes").

/// `node.kubernetes.io/instance-type`.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// `topology.kubernetes.io/zone`.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// `topology.kubernetes.io/region`.
pub const REGION: &str = "topology.kubernetes.io/region";
/// `karpenter.sh/capacity-type`: `on-demand` or `spot`.
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// `kubernetes.io/arch`: `amd64` or `arm64`.
pub const ARCH: &str = "kubernetes.io/arch";
/// `kubernetes.io/os`.
pub const OS: &str = "kubernetes.io/os";
/// `kubernetes.io/hostname`.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// `karpenter.sh/nodepool`.
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
/// `karpenter.k8s.aws/ec2nodeclass`.
pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// `carpool.sh/managed`: `true` on nodes Carpool launched.
pub const CARPOOL_MANAGED: &str = "carpool.sh/managed";

/// `karpenter.k8s.aws/instance-family`, e.g. `m7g`.
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// `karpenter.k8s.aws/instance-category`, e.g. `m`.
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
/// `karpenter.k8s.aws/instance-generation`, e.g. `7`.
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
/// `karpenter.k8s.aws/instance-size`, e.g. `2xlarge`.
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
/// `karpenter.k8s.aws/instance-cpu`: vCPUs.
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
/// `karpenter.k8s.aws/instance-cpu-manufacturer`: `intel`, `amd`, `aws`.
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
/// `karpenter.k8s.aws/instance-memory`: MiB.
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
/// `karpenter.k8s.aws/instance-gpu-count`.
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
/// `karpenter.k8s.aws/instance-gpu-manufacturer`.
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// `karpenter.k8s.aws/instance-gpu-name`.
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
/// `karpenter.k8s.aws/instance-gpu-memory`: MiB per GPU.
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// `karpenter.k8s.aws/instance-local-nvme`: GiB of local NVMe storage.
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
/// `karpenter.k8s.aws/instance-hypervisor`: `nitro`, `xen`, or empty for bare metal.
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
/// `karpenter.k8s.aws/instance-network-bandwidth`: baseline Mbps.
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// `karpenter.k8s.aws/instance-ebs-bandwidth`: maximum EBS Mbps.
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
/// `karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz`.
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str = "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
/// `karpenter.k8s.aws/instance-encryption-in-transit-supported`: `true` or `false`.
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str = "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// `karpenter.k8s.aws/instance-capability-flex`: `true` for the `-flex` families.
pub const INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
/// `karpenter.k8s.aws/instance-accelerator-name`, e.g. `inferentia2`.
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
/// `karpenter.k8s.aws/instance-accelerator-manufacturer`, e.g. `aws`.
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str = "karpenter.k8s.aws/instance-accelerator-manufacturer";
/// `karpenter.k8s.aws/instance-accelerator-count`.
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
/// `topology.k8s.aws/zone-id`: the zone's account-independent id, e.g. `use1-az1`.
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
/// `node.kubernetes.io/windows-build`: never on Carpool's (Linux) nodes.
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
/// `karpenter.k8s.aws/capacity-reservation-id`: the reservation a `reserved` node was
/// launched into.
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// `karpenter.k8s.aws/capacity-reservation-type`: `default` (an ODCR) or
/// `capacity-block`, on a `reserved` node.
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";

/// The label keys an offering may define (Karpenter's AWS `WellKnownLabels`,
/// `pkg/apis/v1/labels.go`, with the upstream ones). A requirement on one of them is checked
/// against the offering's value, and a type without the label meets only requirements that
/// allow absence; a requirement on any other key must be satisfied by the NodePool's own
/// labels or requirements.
pub const OFFERING_LABELS: &[&str] = &[
    INSTANCE_TYPE,
    ZONE,
    REGION,
    CAPACITY_TYPE,
    ARCH,
    OS,
    INSTANCE_FAMILY,
    INSTANCE_CATEGORY,
    INSTANCE_GENERATION,
    INSTANCE_SIZE,
    INSTANCE_CPU,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_MEMORY,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MEMORY,
    INSTANCE_LOCAL_NVME,
    INSTANCE_HYPERVISOR,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    INSTANCE_CAPABILITY_FLEX,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    ZONE_ID,
    WINDOWS_BUILD,
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
];

/// Label keys that may be required without being defined by a NodePool (Karpenter's
/// `WellKnownLabels`): the offering labels, the node pool, and the hostname, which every
/// node gets at registration.
pub fn is_well_known(key: &str) -> bool {
    OFFERING_LABELS.contains(&key) || key == NODEPOOL || key == HOSTNAME || key == EC2NODECLASS
}

// Carpool's own labels, annotations and taints, and the Kubernetes ones its decisions read.

/// The annotation of a static pod's mirror (`kubernetes.io/config.mirror`).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The taint the planner's view puts on reserved capacity.
pub const RESERVED_TAINT: &str = "carpool.sh/reserved";

/// The annotation the volume controller sets on a claim once it is bound.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// The node label (or annotation) with the hash of the template it was launched from.
pub const NODEPOOL_HASH: &str = "carpool.sh/nodepool-hash";

/// The node label with the version of the [`NODEPOOL_HASH`] it carries (Karpenter's
/// `karpenter.sh/nodepool-hash-version` and `karpenter.k8s.aws/ec2nodeclass-hash-version`):
/// a hash is compared only with a hash of its own version. A node without it carries the
/// first version's hash.
pub const NODEPOOL_HASH_VERSION: &str = "carpool.sh/nodepool-hash-version";

/// The node label (or annotation) with the AMI it booted.
pub const IMAGE_ID: &str = "carpool.sh/image-id";

/// The annotation a controller reads to pick which pod to delete first.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The taint Carpool sets on a node it disrupts.
pub const DISRUPTED_TAINT: &str = "carpool.sh/disrupted";

/// The label that takes a node out of external load balancers' targets
/// (`corev1.LabelNodeExcludeBalancers`): set on a node Carpool drains, with the value
/// [`EXCLUDE_BALANCERS_VALUE`], as Karpenter's `Terminator.Taint` sets it.
pub const EXCLUDE_BALANCERS: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// The finalizer Carpool puts on the nodes it launched, once they register: a `kubectl
/// delete node` then leaves the Node until Carpool has drained it and terminated its
/// instance, as Karpenter's `karpenter.sh/termination` finalizer does. Without Carpool
/// (uninstalled), remove it by hand: `kubectl patch node <name> --type=json -p
/// '[{"op":"remove","path":"/metadata/finalizers"}]'`.
pub const TERMINATION_FINALIZER: &str = "carpool.sh/termination";

/// The annotation on a node whose voluntary disruption stalled and was rolled back: until
/// this time (RFC 3339), consolidation, drift and expiration leave it alone.
pub const STALLED_UNTIL: &str = "carpool.sh/disruption-stalled-until";

/// The pods on a node when the consolidator last looked (the first 8 characters of their
/// UIDs, sorted, comma-separated): how it tells that a pod left between two runs.
pub const PODS_ANNOTATION: &str = "carpool.sh/pods";

/// When a node's pods last changed (RFC 3339): Karpenter's `lastPodEventTime`, from which
/// `consolidateAfter` counts.
pub const LAST_POD_EVENT_ANNOTATION: &str = "carpool.sh/last-pod-event";

/// The value Carpool gives [`EXCLUDE_BALANCERS`], so that a rollback removes only its own.
pub const EXCLUDE_BALANCERS_VALUE: &str = "carpool";

/// Annotations that keep a node, or the node of a pod, from voluntary disruption.
pub const DO_NOT_DISRUPT: [&str; 2] = ["karpenter.sh/do-not-disrupt", "carpool.sh/do-not-disrupt"];

/// The NodePool annotation that opts a pool in to acting on rebalance recommendations.
pub const REBALANCE_ANNOTATION: &str = "carpool.sh/rebalance";

/// The startup taint that holds a node back until its wave is released.
pub const WAVE_TAINT: &str = "carpool.sh/wave";

/// The label a node of a wave registers with, its value the wave id, so that a run lists
/// only the nodes of the waves it holds back ([`crate::ports::Cluster::nodes_of_waves`]).
pub const WAVE_LABEL: &str = "carpool.sh/wave";

/// Taints a node carries while it starts, whatever its NodePool says: the kubelet's, the
/// cloud provider's, and Carpool's own launch-wave taint.
pub const EPHEMERAL_TAINTS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    WAVE_TAINT,
];
