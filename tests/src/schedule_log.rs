//! What kube-scheduler did once a launch wave was released: when each node lost the
//! wave's startup taint (a watch on Nodes, so each time is the moment the test's client
//! saw the update), and in which order the scheduler bound the pods of a namespace (its
//! `Scheduled` events, which carry a microsecond `eventTime`). An end-to-end test prints
//! both, so that a pod the scheduler strands can be traced to the order it came in.

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::{Context, Result};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::Api;
use kube::api::ListParams;
use kube::runtime::watcher;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running watch on Nodes; [`ReleaseLog::stop`] returns when each node was first seen
/// without the taint `key`, by node name.
pub struct ReleaseLog {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<BTreeMap<String, SystemTime>>,
}

impl ReleaseLog {
    /// Starts watching every Node for the removal of the taint `key`.
    pub fn start(kube: kube::Client, key: &str) -> ReleaseLog {
        let api: Api<Node> = Api::all(kube);
        let key = key.to_string();
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut tainted: BTreeMap<String, bool> = BTreeMap::new();
            let mut released: BTreeMap<String, SystemTime> = BTreeMap::new();
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            loop {
                tokio::select! {
                    _ = &mut stopped => return released,
                    e = stream.next() => {
                        let Some(Ok(event)) = e else { continue };
                        let nodes: Vec<Node> = match event {
                            watcher::Event::Apply(n) | watcher::Event::InitApply(n) => vec![n],
                            _ => Vec::new(),
                        };
                        let now = SystemTime::now();
                        for n in nodes {
                            let Some(name) = n.metadata.name.clone() else { continue };
                            let has = n
                                .spec
                                .as_ref()
                                .and_then(|s| s.taints.as_ref())
                                .is_some_and(|t| t.iter().any(|t| t.key == key));
                            let was = tainted.insert(name.clone(), has);
                            if was == Some(true) && !has {
                                released.entry(name).or_insert(now);
                            }
                        }
                    }
                }
            }
        });
        ReleaseLog { stop: Some(stop), task }
    }

    /// Stops the watch and returns what it saw.
    pub async fn stop(mut self) -> Result<BTreeMap<String, SystemTime>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.context("the release log task panicked")
    }
}

impl Drop for ReleaseLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One binding by kube-scheduler.
#[derive(Clone, Debug)]
pub struct Binding {
    /// When the scheduler recorded it.
    pub at: SystemTime,
    /// The pod's name.
    pub pod: String,
    /// The node, as the event's message names it.
    pub node: String,
}

/// The pods of `namespace` that kube-scheduler bound, in the order it bound them.
pub async fn bindings(kube: kube::Client, namespace: &str) -> Result<Vec<Binding>> {
    let events = scheduler_events(kube, namespace, "Scheduled").await?;
    Ok(events
        .into_iter()
        .filter_map(|e| {
            // "Successfully assigned <ns>/<pod> to <node>"
            let node = e.message.rsplit(" to ").next()?.to_string();
            Some(Binding {
                at: e.at,
                pod: e.pod,
                node,
            })
        })
        .collect())
}

/// A pod kube-scheduler last failed to place.
#[derive(Clone, Debug)]
pub struct Failure {
    /// When it last said so (an event repeated is kept once, with a series).
    pub at: SystemTime,
    /// The pod's name.
    pub pod: String,
    /// What it said: how many nodes, and why each was refused.
    pub message: String,
}

/// The last time kube-scheduler failed to place each pod of `namespace`, in time order.
pub async fn failures(kube: kube::Client, namespace: &str) -> Result<Vec<Failure>> {
    let events = scheduler_events(kube, namespace, "FailedScheduling").await?;
    Ok(events
        .into_iter()
        .map(|e| Failure {
            at: e.at,
            pod: e.pod,
            message: e.message,
        })
        .collect())
}

struct PodEvent {
    at: SystemTime,
    pod: String,
    message: String,
}

/// The events of `reason` on the pods of `namespace`, by when each was last observed.
async fn scheduler_events(kube: kube::Client, namespace: &str, reason: &str) -> Result<Vec<PodEvent>> {
    let api: Api<Event> = Api::namespaced(kube, namespace);
    let events = api
        .list(&ListParams::default().fields(&format!("reason={reason}")))
        .await
        .with_context(|| format!("listing {reason} events"))?;
    let mut out: Vec<PodEvent> = events
        .items
        .into_iter()
        .filter_map(|e| {
            let last = e
                .series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_ref())
                .map(|t| t.0);
            let at = SystemTime::from(last.or_else(|| e.event_time.as_ref().map(|t| t.0))?);
            Some(PodEvent {
                at,
                pod: e.involved_object.name.clone()?,
                message: e.message.clone()?,
            })
        })
        .collect();
    out.sort_by_key(|e| e.at);
    Ok(out)
}
