//! What `kubectl get nodepools` and `kubectl describe ec2nodeclass` show for the objects
//! Carpool manages: their `status`, written as Karpenter writes it, so that users read
//! Carpool's view where they read Karpenter's.
//!
//! - [`nodepool`]: a NodePool's resources in use, its node count and its conditions
//!   (Karpenter's `nodepool/counter` and `nodepool/readiness` controllers).
//! - [`nodeclass`]: a class's resolved subnets, security groups, AMIs and instance
//!   profile, and its conditions, Ready with the reason when it is not (Karpenter's
//!   `nodeclass` controller in the AWS provider).
//! - [`condition`]: the conditions themselves, whose transition times hold while their
//!   status does not change.
//! - [`fleet`]: each NodePool's nodes and their cost per hour by capacity type, for the
//!   stack's dashboard.
//!
//! Each function returns the whole status; [`changed`] says whether it differs from the
//! one the object has, so that an unchanged status is never written again.

pub mod condition;
pub mod fleet;
pub mod nodeclass;
pub mod nodepool;

pub use condition::Condition;
pub use nodeclass::{ClassFailure, ClassResolution, nodeclass_status};
pub use nodepool::{ClassReadiness, nodepool_status};

/// Whether writing `wanted` (merged into the status, field by field) would change the
/// status the object has now: fields of the status Carpool does not write are not compared.
pub fn changed(current: Option<&serde_json::Value>, wanted: &serde_json::Value) -> bool {
    let Some(fields) = wanted.as_object() else {
        return current != Some(wanted);
    };
    fields.iter().any(|(k, v)| current.and_then(|c| c.get(k)) != Some(v))
}
