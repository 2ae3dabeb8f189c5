//! The local stack's own tests, in one test binary. Every test needs the stack
//! (`infra/local/up`) and is `#[ignore]`d without it: run them with
//! `cargo test -p carpool-tests --test it -- --include-ignored` (add `rbac::` or `smoke::`
//! to run one module).
//!
//! - [`rbac`]: the ClusterRoles and admission policies of `infra/rbac/` on a real
//!   apiserver let Carpool's groups make every call their functions make, and nothing more.
//! - [`status`]: a provisioner run writes the status of the NodePools and EC2NodeClasses
//!   it manages, as `kubectl get` shows them.
//! - [`smoke`]: the components Carpool relies on (kube-scheduler, the Eviction API and
//!   PDBs, the harness playing the kubelet, moto's EC2 and DynamoDB) behave as it expects.

mod examples;
mod rbac;
mod smoke;
mod status;
