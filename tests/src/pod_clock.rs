//! When each pod of a namespace was first seen bound and first seen Running: a background
//! task that lists the namespace's pods every [`POLL`], for the pending → Running latency
//! of an end-to-end test.
//!
//! The latency is measured from the pod's `creationTimestamp`, which the apiserver keeps
//! to the second (as the provisioner's pending → CreateFleet figure is), to the poll that
//! first saw it; each figure is therefore up to a second long and [`POLL`] short.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How often the pods are listed.
pub const POLL: Duration = Duration::from_millis(200);

/// What the clock saw of one pod.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Its `creationTimestamp`.
    pub created: Option<SystemTime>,
    /// When it was first seen with `spec.nodeName`.
    pub bound: Option<SystemTime>,
    /// When it was first seen in phase Running.
    pub running: Option<SystemTime>,
}

impl Seen {
    /// Created → first seen Running, in milliseconds.
    pub fn pending_to_running_ms(&self) -> Option<u64> {
        let d = self.running?.duration_since(self.created?).ok()?;
        u64::try_from(d.as_millis()).ok()
    }
}

/// A running clock; [`PodClock::stop`] returns what it saw, by pod name.
pub struct PodClock {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<BTreeMap<String, Seen>>,
}

impl PodClock {
    /// Starts watching the pods of `namespace`.
    pub fn start(kube: kube::Client, namespace: &str) -> PodClock {
        let api: Api<Pod> = Api::namespaced(kube, namespace);
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
            loop {
                if let Ok(list) = api.list(&ListParams::default()).await {
                    let now = SystemTime::now();
                    for p in list.items {
                        let Some(name) = p.metadata.name.clone() else { continue };
                        let s = seen.entry(name).or_default();
                        s.created = p.metadata.creation_timestamp.as_ref().map(|t| SystemTime::from(t.0));
                        if s.bound.is_none() && p.spec.as_ref().is_some_and(|sp| sp.node_name.is_some()) {
                            s.bound = Some(now);
                        }
                        if s.running.is_none()
                            && p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running")
                        {
                            s.running = Some(now);
                        }
                    }
                }
                tokio::select! {
                    _ = &mut stopped => return seen,
                    () = tokio::time::sleep(POLL) => {}
                }
            }
        });
        PodClock { stop: Some(stop), task }
    }

    /// Stops the task and returns what it saw.
    pub async fn stop(mut self) -> Result<BTreeMap<String, Seen>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.context("the pod clock task panicked")
    }
}

impl Drop for PodClock {
    fn drop(&mut self) {
        self.task.abort();
    }
}
