//! The provisioner's tests, in one test binary. The tests that need the local stack
//! (`infra/local/up`) are `#[ignore]`d without it.
//!
//! - [`handler`]: the handler on the in-memory ports, invoked with the scheduled
//!   EventBridge event the schedule sends.
//! - [`eks_auth`]: on the stack, the apiserver's token webhook accepts the EKS tokens the
//!   adapters make, maps them to `carpool` in `carpool:controller`, and refuses the rest.
//! - [`binary`]: on the stack, the real `provisioner` binary run as Lambda runs it (its
//!   cold start, invocation and peak memory printed); two by-hand measurements at scale.
//! - [`e2e`]: on the stack, the handler in-process against the real apiserver and
//!   kube-scheduler, with the harness playing the kubelet: pending pods run on the nodes
//!   it launched, NodePool limits hold, capacity errors fall back, unregistered instances
//!   are terminated.
//! - [`capacity_reservation`]: on the stack, a reservation of 3 takes the first three
//!   nodes and the launches target it; one found full falls back in the same run.
//! - [`runtime_api`]: the fake Lambda Runtime API [`binary`] runs the binary against;
//! - [`warm_capacity`]: a static NodePool and a CapacityBuffer get their room.

mod binary;
mod capacity_reservation;
mod e2e;
mod eks_auth;
mod handler;
mod runtime_api;
mod warm_capacity;
