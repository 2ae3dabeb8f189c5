//! Bounded waits: poll a check until it passes or a deadline passes.

use std::time::Duration;

use anyhow::{Result, anyhow};
use tokio::time::{Instant, sleep};

/// How often [`until`] polls.
pub const POLL: Duration = Duration::from_millis(500);

/// Runs `check` every [`POLL`] until it returns `Ok`, and returns that value. An `Err`
/// means "not yet" and says what was seen instead (a condition not met, or a transient
/// API error). After `timeout` the error names `what` and the last thing seen.
pub async fn until<T>(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> Result<T>) -> Result<T> {
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        match check().await {
            Ok(v) => {
                eprintln!("waited {:.1}s for {what}", start.elapsed().as_secs_f64());
                return Ok(v);
            }
            Err(last) if Instant::now() >= deadline => {
                return Err(anyhow!(
                    "timed out after {timeout:?} waiting for {what}; last seen: {last:#}"
                ));
            }
            Err(_) => sleep(POLL).await,
        }
    }
}

/// Waits until the disruption controller reports `healthy` pods and `allowed` disruptions
/// for the PDB's current generation.
pub async fn pdb_status(
    pdbs: &kube::Api<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    name: &str,
    healthy: i32,
    allowed: i32,
    timeout: Duration,
) -> Result<()> {
    let what = format!("PDB {name} currentHealthy={healthy} disruptionsAllowed={allowed}");
    until(&what, timeout, async || {
        let pdb = pdbs.get(name).await?;
        let status = pdb.status.ok_or_else(|| anyhow!("no status yet"))?;
        if status.observed_generation == pdb.metadata.generation
            && status.current_healthy == healthy
            && status.disruptions_allowed == allowed
        {
            Ok(())
        } else {
            Err(anyhow!("generation {:?}, status {status:?}", pdb.metadata.generation))
        }
    })
    .await
}

/// Waits until `n` pods of `namespace` are pending and marked
/// `PodScheduled=False` by kube-scheduler, as the provisioner wants them.
pub async fn unschedulable(kube: &kube::Client, namespace: &str, n: usize, timeout: Duration) -> Result<()> {
    let api = kube::Api::<carpool::model::pod::Pod>::namespaced(kube.clone(), namespace);
    until(&format!("{n} pods marked unschedulable"), timeout, async || {
        let pods = api.list(&kube::api::ListParams::default()).await?.items;
        let marked = pods
            .iter()
            .filter(|p| carpool::decide::provisioning::pod::is_provisionable(p))
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
            })
            .count();
        if marked == n {
            Ok(())
        } else {
            Err(anyhow!("{marked} of {} marked", pods.len()))
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use anyhow::bail;

    use super::*;

    #[tokio::test]
    async fn returns_the_first_success() {
        let mut n = 0;
        let v = until("n to reach 2", Duration::from_secs(5), async || {
            n += 1;
            if n < 2 { bail!("n={n}") } else { Ok(n) }
        })
        .await
        .unwrap();
        assert_eq!(v, 2);
    }

    #[tokio::test]
    async fn a_timeout_names_what_and_the_last_state() {
        let err = until("the impossible", Duration::from_millis(10), async || -> Result<()> {
            bail!("still no")
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("the impossible") && err.contains("still no"), "{err}");
    }
}
