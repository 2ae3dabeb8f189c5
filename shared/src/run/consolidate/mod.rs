//! The consolidator's run: one [`decide::disruption`](crate::decide::disruption) command
//! at a time, carried out as durable disruptions that survive crashes.
//!
//! Each run, under the `consolidator` lease:
//!
//! 1. **Resume** the consolidation in progress (its `DISRUPT#` records, one per node,
//!    grouped by the command's first instance and start time): advance each step by step with the
//!    interruption function's machinery ([`crate::run::interruption`]): taint, wait for the
//!    replacement to be Ready, drain by eviction (PDBs hold), terminate, clean up. It is
//!    **rolled back** (untainted, records deleted, the reason logged) when it crashed
//!    before its replacement was launched, when its replacement failed, or when its drain
//!    stalls past [`ConsolidationSettings::drain_limit`]. While one is in progress no
//!    other starts.
//! 2. **Decide** on a fresh snapshot (the NodePools Carpool manages, offerings out of
//!    capacity left out, the nodes in any disruption excluded).
//! 3. **Re-check** after [`ConsolidationSettings::recheck_delay`] on another fresh
//!    snapshot, and abandon the command unless the same method picks the same nodes
//!    (Karpenter validates its commands the same way, after 15 s).
//! 4. **Start** it: a `DISRUPT#` record per node (reason `consolidation-<method>`), the
//!    nodes tainted `carpool.sh/disrupted:NoSchedule`, the replacements launched through
//!    the provisioner's path with their room [reserved](crate::decide::provisioning::reservation) for the
//!    moving pods (so the provisioner launches nothing for them), then advanced as in 1.

mod execute;
pub mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

pub use report::{ConsolidationReport, RolledBack};

use crate::catalog::RegionCatalog;
use crate::decide::disruption::{DisruptionCommand, DisruptionInput, DisruptionSettings, decide};
use crate::decide::provisioning::nodepools;
use crate::ports::{Cloud, Cluster, ClusterError, StateStore, StoreError, Timer};
use crate::run::disruption::InterruptionError;
use crate::run::ports::Ports;
use crate::run::provision::{ProvisionError, Provisioner, Settings};
use crate::snapshot::Snapshot;

/// The consolidator's lease.
pub const LEASE: &str = "consolidator";

/// The settings of a consolidator run.
#[derive(Clone, Debug, PartialEq)]
pub struct ConsolidationSettings {
    /// What the launch path needs.
    pub provision: Settings,
    /// The decision's settings.
    pub disruption: DisruptionSettings,
    /// How long to wait before re-checking a command on a fresh snapshot.
    pub recheck_delay: Duration,
    /// A drain still blocked this long after the consolidation started is rolled back.
    pub drain_limit: Duration,
    /// How long one invocation drains before leaving the rest to the next.
    pub drain_slice: Duration,
}

impl ConsolidationSettings {
    /// The settings of a configuration.
    pub fn from_config(config: &crate::run::config::Config) -> Self {
        let mut disruption = DisruptionSettings::default();
        if config.repair_after.is_zero() {
            // Repair off: no node is unhealthy for that long.
            disruption.repair_after = Duration::MAX;
        } else {
            disruption.repair_after = config.repair_after;
        }
        ConsolidationSettings {
            provision: Settings::from_config(config, config.watch),
            disruption,
            recheck_delay: config.consolidation_recheck,
            drain_limit: config.consolidation_drain_limit,
            ..ConsolidationSettings::default()
        }
    }
}

impl Default for ConsolidationSettings {
    fn default() -> Self {
        ConsolidationSettings {
            provision: Settings::default(),
            disruption: DisruptionSettings::default(),
            recheck_delay: Duration::from_secs(15),
            drain_limit: Duration::from_secs(15 * 60),
            drain_slice: Duration::from_secs(60),
        }
    }
}

/// A run that could not go on; the next run resumes.
#[derive(Debug, thiserror::Error)]
pub enum ConsolidationError {
    /// The Kubernetes API failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Reading the NodePools' zones or images failed.
    #[error("preparing the snapshot")]
    Prepare(#[source] ProvisionError),
    /// The launch path failed outside a launch (its records): the next run resumes.
    #[error("launching the replacement")]
    Launch(#[source] ProvisionError),
    /// Advancing a disruption failed.
    #[error(transparent)]
    Advance(#[from] InterruptionError),
}

/// One run's ports and settings.
pub struct Consolidator<'a, C, K, S, T> {
    /// EC2, the Kubernetes API, DynamoDB and time.
    pub ports: Ports<'a, C, K, S, T>,
    /// Settings.
    pub settings: ConsolidationSettings,
    /// Who runs (the Lambda request id).
    pub owner: String,
}

impl<'a, C: Cloud, K: Cluster, S: StateStore, T: Timer> Consolidator<'a, C, K, S, T> {
    /// A run by `owner`.
    pub fn new(
        cloud: &'a C,
        cluster: &'a K,
        store: &'a S,
        clock: &'a T,
        settings: ConsolidationSettings,
        owner: &str,
    ) -> Self {
        Consolidator {
            ports: Ports {
                cloud,
                cluster,
                store,
                clock,
            },
            settings,
            owner: owner.to_string(),
        }
    }

    /// One run, working until `until` at most; see the module doc. The report is logged.
    pub async fn run(
        &self,
        region: &RegionCatalog<'_>,
        until: SystemTime,
    ) -> Result<ConsolidationReport, ConsolidationError> {
        let mut report = ConsolidationReport::default();
        let start = self.ports.clock.now();
        let ttl = until.duration_since(start).unwrap_or_default() + Duration::from_secs(60);
        let lease = match self.ports.store.acquire_lease(LEASE, &self.owner, start, ttl).await {
            Ok(lease) => lease,
            Err(StoreError::Conflict { detail, .. }) => {
                tracing::info!(holder = %detail, "another run holds the consolidator lease; exiting");
                report.lease_held_by = Some(detail);
                report.log();
                return Ok(report);
            }
            Err(e) => return Err(e.into()),
        };
        let outcome = self.work(region, until, &mut report).await;
        if let Err(e) = self.ports.store.release_lease(&lease).await {
            tracing::warn!(error = %crate::error_chain::Chain(&e), "could not release the consolidator lease; it lapses by itself");
        }
        report.elapsed_ms = u64::try_from(
            self.ports
                .clock
                .now()
                .duration_since(start)
                .unwrap_or_default()
                .as_millis(),
        )
        .unwrap_or(u64::MAX);
        outcome?;
        report.log();
        Ok(report)
    }

    async fn work(
        &self,
        region: &RegionCatalog<'_>,
        until: SystemTime,
        report: &mut ConsolidationReport,
    ) -> Result<(), ConsolidationError> {
        if self.resume(region, until, report).await? {
            return Ok(());
        }
        let (snapshot, region_now, in_progress, images) = self.observe(region).await?;
        let decision = decide(&DisruptionInput {
            snapshot: &snapshot,
            region: &region_now,
            now: self.ports.clock.now(),
            in_progress: in_progress.clone(),
            settings: self.settings.disruption.clone(),
            images,
        });
        report.record_decision(&decision);
        let Some(command) = decision.command else {
            return Ok(());
        };
        self.ports.clock.sleep(self.settings.recheck_delay).await;
        let (snapshot, region_now, in_progress, images) = self.observe(region).await?;
        let again = decide(&DisruptionInput {
            snapshot: &snapshot,
            region: &region_now,
            now: self.ports.clock.now(),
            in_progress,
            settings: self.settings.disruption.clone(),
            images,
        });
        let Some(fresh) = again.command.filter(|c| same_command(c, &command)) else {
            let why = "the cluster changed during the re-check: the command no longer holds".to_string();
            tracing::info!(method = %command.method, nodes = ?command.nodes, reason = %why, "consolidation abandoned");
            report.abandoned = Some(why);
            return Ok(());
        };
        report.command = Some(fresh.clone());
        self.start(&region_now, &snapshot, &fresh, until, report).await
    }

    /// The snapshot the decision reads, the region with the offerings out of capacity left
    /// out, the nodes of every disruption in progress, and the AMIs each class resolves.
    #[allow(clippy::type_complexity)] // the four things a decision reads, unpacked at once
    async fn observe<'r>(
        &self,
        region: &RegionCatalog<'r>,
    ) -> Result<
        (
            Snapshot,
            RegionCatalog<'r>,
            BTreeSet<String>,
            BTreeMap<String, Vec<crate::ports::ResolvedImage>>,
        ),
        ConsolidationError,
    > {
        let mut snapshot = crate::run::observe::read_snapshot(self.ports.cluster).await?;
        nodepools::keep_managed(&mut snapshot, &self.settings.provision.nodepool_selector);
        nodepools::drop_without_node_class(&mut snapshot);
        let provisioner = self.provisioner("consolidator-observe");
        let images = provisioner
            .narrow_pools(&mut snapshot, region)
            .await
            .map_err(ConsolidationError::Prepare)?;
        let mut region = region.clone();
        for o in self.ports.store.unavailable_offerings(self.ports.clock.now()).await? {
            region.mark_unavailable(&o.instance_type, &o.zone, o.capacity_type);
        }
        let in_progress = self
            .ports
            .store
            .list_disruptions()
            .await?
            .into_iter()
            .map(|d| d.node)
            .collect();
        Ok((snapshot, region, in_progress, images))
    }

    fn provisioner(&self, owner: &str) -> Provisioner<'a, C, K, S, T> {
        Provisioner::new(
            self.ports.cloud,
            self.ports.cluster,
            self.ports.store,
            self.ports.clock,
            self.settings.provision.clone(),
            owner,
        )
    }
}

/// Whether a re-checked command is the command decided: the same method on the same nodes.
fn same_command(fresh: &DisruptionCommand, decided: &DisruptionCommand) -> bool {
    fresh.method == decided.method && fresh.nodes == decided.nodes
}
