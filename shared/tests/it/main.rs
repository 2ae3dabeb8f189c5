//! The core crate's integration tests, in one test binary (one module per concern), over
//! the in-memory ports and the embedded catalog; none needs the local stack.
//!
//! The catalog and the model:
//! - [`catalog`]: the embedded catalog's size, offerings, prices and cheapest-types query.
//! - [`allocatable`]: allocatable resources equal Karpenter's published AL2023 figures.
//! - [`manifests`]: NodePool and EC2NodeClass manifests as Karpenter users write them.
//!
//! The planner (each plan re-checked by the independent checker):
//! - [`planner`]: table-driven snapshots and the behaviour a user expects.
//! - [`planner_labels`]: NodePool labels and requirements, DaemonSets, well-known labels.
//! - [`planner_preferences`]: preferences relaxed as Karpenter does, `PreferNoSchedule`
//!   taints, `minValues`.
//! - [`planner_topology`]: topology spread and inter-pod affinity by kube-scheduler's rules.
//! - [`planner_volumes`]: volumes, ephemeral storage and extended resources.
//! - [`planner_properties`]: properties on generated snapshots.
//! - [`ami_requirements`]: a class's AMIs constrain the instance types planned for it.
//! - [`nodepool_selector`]: Carpool launches only for the NodePools its selector picks.
//! - [`one_planning_path`]: `carpool plan` prints what the provisioner's batch launches.
//! - [`starting_nodes`]: starting nodes count at their expected capacity until initialized.
//! - [`checker`]: the independent checker rejects hand-written plans that break each rule.
//! - [`scheduler_replay`]: kube-scheduler's placement of a plan replayed, and the plan grown
//!   so that it strands nothing.
//!
//! The provisioner's run:
//! - [`provisioner`]: pending pods become launches; capacity in flight, the lease, capacity
//!   errors, limits, the registration TTL.
//! - [`provisioner_crash`]: runs that crash at each await point converge.
//! - [`launch_reconcile`]: a launch is never lost, and never doubled.
//! - [`launch_templates`]: many batches use one launch template per NodePool and
//!   capacity type.
//! - [`ownership`]: housekeeping terminates only what Carpool owns.
//! - [`housekeeping`]: housekeeping as a pure decision.
//! - [`backoff`]: a NodePool that keeps failing is backed off, then tried again.
//! - [`burst`]: twenty spot warnings in one batch are replaced together.
//! - [`class_failure`]: a class that cannot be resolved backs off its NodePools alone.
//! - [`capacity_reservations`]: reserved capacity first, never past a reservation's room,
//!   launches that target it, a full one falls back, a malformed term.
//! - [`label_injection`]: a label or taint that would break out of the user data never
//!   reaches a launch.
//! - [`waves`]: launch waves held by a startup taint and released together.
//! - [`pod_events`]: the Kubernetes Events published on pending pods.
//!
//! Disruption, interruption and consolidation:
//! - [`disruption`]: the disruption decision on snapshots: each method, each reason a node
//!   is kept, budgets.
//! - [`disruption_properties`]: properties of the disruption decision on generated clusters.
//! - [`drain`]: the drain: tiers, PDBs, throttling, the deadline.
//! - [`interruption_events`]: the interruption events read into typed actions.
//! - [`interruption`]: the interruption run: taint, replace, drain, terminate, clean up.
//! - [`consolidation`]: the consolidator's run: delete, replace, resume after crashes.
//! - [`consolidation_rules`]: pending pods, same-type merges, spot-to-spot's 15 types and
//!   the one-node replan, each after Karpenter's rule.
//!
//! The ports' contracts on the fakes:
//! - [`cluster_contract`]: the Cluster contract, and the fake's eviction rule.
//! - [`store_contract`]: the StateStore contract.
//! - [`fake_cloud`]: the Cloud contract, and the failures the fake injects.
//!
//! Shared by the modules:
//! - [`support`]: the planner run and checked, where a pod landed, the region, the property
//!   tests' cases and seed.
//! - [`run_world`]: a provisioner's world over the in-memory ports.

mod allocatable;
mod ami_requirements;
mod backoff;
mod burst;
mod capacity_buffers;
mod capacity_reservations;
mod catalog;
mod checker;
mod class_failure;
mod cluster_contract;
mod consolidation;
mod consolidation_rules;
mod dashboard;
mod disruption;
mod disruption_properties;
mod drain;
mod fake_cloud;
mod housekeeping;
mod interruption;
mod interruption_events;
mod label_injection;
mod launch_reconcile;
mod launch_templates;
mod manifests;
mod node_overlay;
mod nodepool_selector;
mod one_planning_path;
mod ownership;
mod planner;
mod planner_labels;
mod planner_preferences;
mod planner_properties;
mod planner_topology;
mod planner_volumes;
mod pod_events;
mod provisioner;
mod provisioner_crash;
mod run_world;
mod scheduler_replay;
mod starting_nodes;
mod static_capacity;
mod status;
mod store_contract;
mod support;
mod surge;
mod waves;
mod zone_balance;
