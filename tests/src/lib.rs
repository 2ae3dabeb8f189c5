//! # Carpool tests: the harness that plays the kubelet, and helpers for the local stack
//!
//! The tests of this crate run against the real local stack that `infra/local/up` starts
//! (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, and moto for
//! EC2 and DynamoDB). Nothing here is a mock: the harness only does what a kubelet and the
//! cloud node lifecycle controller would do, turning EC2 instances in moto into Nodes
//! that kwok then keeps Ready.
//!
//! ## Layout
//!
//! - [`stack`]: finds the running stack through its env file and builds the kube, EC2
//!   and DynamoDB clients for it.
//! - [`moto`]: resets moto and seeds it again.
//! - [`aws_json`]: moto's JSON-protocol APIs (EventBridge, SQS) called over plain HTTP.
//! - [`capacity_reservation`]: capacity reservations (and the stand-in Capacity Block) on
//!   moto.
//! - [`tags`]: the instance tag conventions the harness reads (NodePool, labels, taints,
//!   startup taints, never-register). The real launch path passes taints in nodeadm
//!   user data, which a later issue writes; here the launch puts them in the tag
//!   `carpool.sh/taints` (and `carpool.sh/startup-taints`) as JSON
//!   `[{"key": "...", "value": "...", "effect": "NoSchedule"}]`.
//! - [`instance`]: an EC2 instance as the harness reads it, and the `DescribeInstances`
//!   listing by cluster tag.
//! - [`node`]: the Node a kubelet registers for an instance (labels from the catalog and
//!   the tags, taints, capacity and allocatable, the kwok annotation).
//! - [`harness`]: the background task that registers and deletes Nodes, with a
//!   registration delay and a never-register switch.
//! - [`launch`]: `RunInstances` and `TerminateInstances` the way Carpool tags launches.
//! - [`pod_clock`]: when each pod of a namespace was first seen bound and Running.
//! - [`schedule_log`]: when each node of a wave lost its startup taint, and the order
//!   kube-scheduler bound the pods in.
//! - [`wait`]: bounded polling with failure messages that say what was last seen.
//! - [`scene`]: what a function's end-to-end test sets up (namespace, NodePool,
//!   EC2NodeClass, table) and tears down, with the adapters on the stack; the three
//!   functions' `e2e` tests share it.
//!
//! The crate root also holds what tests sharing one stack need: [`unique`] names, and a
//! lock that lets them run concurrently ([`shared`]) except around a moto reset
//! ([`exclusive`]).

pub mod aws_json;
pub mod capacity_reservation;
pub mod harness;
pub mod instance;
pub mod launch;
pub mod moto;
pub mod node;
pub mod pod_clock;
pub mod scene;
pub mod schedule_log;
pub mod stack;
pub mod tags;
pub mod user_data;
pub mod wait;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub use harness::Harness;
pub use stack::Stack;

static STACK_LOCK: RwLock<()> = RwLock::const_new(());

/// Held by a test that uses the stack; many tests hold it at once.
pub async fn shared() -> RwLockReadGuard<'static, ()> {
    STACK_LOCK.read().await
}

/// Held by a test that resets shared state (moto); no other test runs meanwhile.
pub async fn exclusive() -> RwLockWriteGuard<'static, ()> {
    STACK_LOCK.write().await
}

/// A name no other test run uses: `<prefix>-<pid and time>-<counter>`, valid as a
/// Kubernetes name, label value or DynamoDB table name for a short prefix.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:x}{:x}-{n}", std::process::id(), millis % 0x100_0000)
}

#[cfg(test)]
mod tests {
    #[test]
    fn unique_names_differ_and_are_dns_labels() {
        let (a, b) = (super::unique("smoke"), super::unique("smoke"));
        assert_ne!(a, b);
        for name in [a, b] {
            assert!(name.len() <= 63);
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
        }
    }
}
