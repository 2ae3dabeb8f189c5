//! The apiserver's reads are retried when it answers 429 or 5xx, and a write is not: the
//! `Cluster` port on a `kube::Client` whose transport is an in-process service answering
//! as a faulty apiserver would, with the Status bodies the real one sends. Needs no stack.
//!
//! kube's own retry stays off (`default_retry = false`), since the Eviction API's 429 is
//! a PDB's answer (see the adapter's module docs); the eviction test below checks that
//! this 429 is still seen at once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use anyhow::{Result, bail, ensure};
use bytes::Bytes;
use carpool::ports::{Cluster, ClusterError, Eviction, PodRef};
use carpool_adapters::kube_cluster::KubeCluster;
use carpool_adapters::kube_retry::ReadRetry;
use http_body_util::Full;
use serde_json::json;

/// The answers the fake apiserver gives, in order, and the requests it saw.
#[derive(Clone, Default)]
struct Script {
    answers: Arc<Mutex<VecDeque<(u16, serde_json::Value)>>>,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Script {
    fn new(answers: Vec<(u16, serde_json::Value)>) -> Self {
        Script {
            answers: Arc::new(Mutex::new(answers.into())),
            seen: Arc::default(),
        }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    fn cluster(&self) -> KubeCluster {
        let script = self.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let script = script.clone();
            async move {
                script
                    .seen
                    .lock()
                    .unwrap()
                    .push(format!("{} {}", req.method(), req.uri().path()));
                let (code, body) = script
                    .answers
                    .lock()
                    .unwrap()
                    .pop_front()
                    .unwrap_or_else(|| (500, status(500, "InternalError", "script ran out")));
                let response = http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body.to_string())))
                    .unwrap();
                Ok::<_, Infallible>(response)
            }
        });
        KubeCluster::new(kube::Client::new(service, "default")).with_read_retry(ReadRetry {
            attempts: 4,
            base: std::time::Duration::from_millis(5),
            max: std::time::Duration::from_millis(20),
        })
    }
}

/// The apiserver's Status body for an error.
fn status(code: u16, reason: &str, message: &str) -> serde_json::Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn pod_list() -> serde_json::Value {
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"},
           "items": [{"metadata": {"name": "web-0", "namespace": "shop"},
                      "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                      "status": {"phase": "Pending"}}]})
}

#[tokio::test]
async fn a_429_then_200_on_the_pending_pods_poll_returns_the_pods() -> Result<()> {
    let script = Script::new(vec![
        (
            429,
            status(429, "TooManyRequests", "Too many requests, please try again later."),
        ),
        (200, pod_list()),
    ]);
    let cluster = script.cluster();
    let pods = cluster.pending_pods().await?;
    ensure!(pods.len() == 1, "{pods:?}");
    ensure!(
        script.seen() == ["GET /api/v1/pods", "GET /api/v1/pods"],
        "{:?}",
        script.seen()
    );
    // The run's `ApiserverRequests` counts what the apiserver saw, the retry included.
    ensure!(cluster.requests_sent() == 2, "counted {}", cluster.requests_sent());
    Ok(())
}

#[tokio::test]
async fn server_errors_are_retried_until_the_apiserver_answers() -> Result<()> {
    let script = Script::new(vec![
        (
            503,
            status(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
        ),
        (500, status(500, "InternalError", "etcdserver: request timed out")),
        (200, pod_list()),
    ]);
    ensure!(script.cluster().pending_pods().await?.len() == 1);
    ensure!(script.seen().len() == 3);
    Ok(())
}

#[tokio::test]
async fn a_read_that_keeps_failing_gives_up_after_its_attempts_as_throttled() -> Result<()> {
    let throttled = (429, status(429, "TooManyRequests", "slow down"));
    let script = Script::new(vec![throttled.clone(), throttled.clone(), throttled.clone(), throttled]);
    match script.cluster().nodes().await {
        Err(ClusterError::Throttled { .. }) => {}
        other => bail!("expected Throttled, got {other:?}"),
    }
    ensure!(script.seen().len() == 4, "{:?}", script.seen());
    Ok(())
}

#[tokio::test]
async fn a_refusal_that_retrying_cannot_change_is_not_retried() -> Result<()> {
    let script = Script::new(vec![(403, status(403, "Forbidden", "nodes is forbidden"))]);
    match script.cluster().nodes().await {
        Err(ClusterError::Unauthorized { .. }) => {}
        other => bail!("expected Unauthorized, got {other:?}"),
    }
    ensure!(script.seen().len() == 1);
    Ok(())
}

#[tokio::test]
async fn an_eviction_a_pdb_refuses_with_429_is_answered_at_once_not_retried() -> Result<()> {
    let mut refusal = status(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    refusal["details"] = json!({"causes": [{"reason": "DisruptionBudget",
        "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]});
    let script = Script::new(vec![(429, refusal)]);
    match script
        .cluster()
        .evict(&PodRef {
            namespace: "shop".into(),
            name: "web-0".into(),
            uid: None,
        })
        .await?
    {
        Eviction::Blocked { .. } => {}
        other => bail!("expected Blocked, got {other:?}"),
    }
    ensure!(script.seen().len() == 1, "{:?}", script.seen());
    Ok(())
}

#[tokio::test]
async fn a_cluster_without_the_nodeoverlay_crd_has_no_overlays() -> Result<()> {
    // The apiserver answers 404 for a kind it does not serve.
    let script = Script::new(vec![(
        404,
        status(404, "NotFound", "the server could not find the requested resource"),
    )]);
    let overlays = script.cluster().nodeoverlays().await?;
    ensure!(overlays.valid.is_empty() && overlays.invalid.is_empty(), "{overlays:?}");
    ensure!(
        script.seen() == ["GET /apis/karpenter.sh/v1alpha1/nodeoverlays"],
        "{:?}",
        script.seen()
    );
    Ok(())
}

#[tokio::test]
async fn nodeoverlays_are_read_and_an_invalid_one_is_named_with_its_reason() -> Result<()> {
    let overlay = |name: &str, spec: serde_json::Value| json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name}, "spec": spec});
    let list = json!({"kind": "NodeOverlayList", "apiVersion": "karpenter.sh/v1alpha1", "metadata": {"resourceVersion": "3"},
    "items": [
        overlay("m6i", json!({"requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m6i"]}],
                              "priceAdjustment": "-30%"})),
        overlay("bad", json!({"priceAdjustment": "cheaper"})),
    ]});
    let script = Script::new(vec![(200, list)]);
    let overlays = script.cluster().nodeoverlays().await?;
    ensure!(
        overlays.valid.len() == 1 && overlays.valid[0].name() == "m6i",
        "{overlays:?}"
    );
    ensure!(
        overlays.invalid.len() == 1
            && overlays.invalid[0].name == "bad"
            && overlays.invalid[0].reason.starts_with("spec.priceAdjustment"),
        "{overlays:?}"
    );
    Ok(())
}
