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
//!    capacity left out, the nodes in any disruption excluded). Only a node whose
//!    instance this deployment launched is a candidate (its launch-id and deployment
//!    tags, the rule housekeeping and the interruption function apply:
//!    [`crate::decide::housekeeping::ownership`]); a `karpenter.sh/nodepool` label alone
//!    is not ownership, as Karpenter labels its own nodes so.
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
use crate::decide::disruption::drift::Networks;
use crate::decide::disruption::{DisruptionCommand, DisruptionInput, DisruptionSettings, decide};
use crate::decide::housekeeping::ownership::launched_by;
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
    /// At most this many commands start in one run: drift, expiration and repair as many
    /// as the budgets allow, a consolidation only while no other is in flight.
    pub max_commands: usize,
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
            max_commands: 20,
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
    /// EC2 failed (listing this cluster's instances).
    #[error(transparent)]
    Cloud(#[from] crate::ports::CloudError),
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

    /// Advances what is in flight, then starts commands while the budgets allow: drift,
    /// expiration and repair as many as they allow (each replaces its nodes whatever they
    /// save, and runs beside the others, as Karpenter's orchestration queue runs its
    /// commands at once), a consolidation only while no other consolidation is in flight
    /// (its moves are not in the cluster yet), re-checked on a fresh snapshot first. A
    /// command started is taken into the next decision (its nodes disrupting and tainted),
    /// so the budgets count it.
    async fn work(
        &self,
        region: &RegionCatalog<'_>,
        until: SystemTime,
        report: &mut ConsolidationReport,
    ) -> Result<(), ConsolidationError> {
        let in_flight = self.resume(region, until, report).await?;
        let mut consolidating = in_flight.consolidating;
        let mut seen = self.observe(region).await?;
        let mut started = 0;
        while started < self.settings.max_commands && self.ports.clock.now() < until {
            let decision = decide(&seen.input(self.ports.clock.now(), &self.settings.disruption));
            if started == 0 {
                report.record_decision(&decision);
                self.record_pod_events(&decision.pod_events).await;
                self.rebaseline(&decision.hash_records).await;
            }
            let Some(command) = decision.command else {
                break;
            };
            let fresh = if command.method.consolidates() {
                if consolidating {
                    tracing::info!(method = %command.method, nodes = ?command.nodes,
                        "a consolidation is in flight: this one waits for it");
                    break;
                }
                self.ports.clock.sleep(self.settings.recheck_delay).await;
                seen = self.observe(region).await?;
                let again = decide(&seen.input(self.ports.clock.now(), &self.settings.disruption));
                let Some(fresh) = again.command.filter(|c| same_command(c, &command)) else {
                    let why = "the cluster changed during the re-check: the command no longer holds".to_string();
                    tracing::info!(method = %command.method, nodes = ?command.nodes, reason = %why, "consolidation abandoned");
                    report.abandoned = Some(why);
                    break;
                };
                fresh
            } else {
                command
            };
            if report.command.is_none() {
                report.command = Some(fresh.clone());
            }
            report.commands.push(fresh.clone());
            if self.settings.provision.dry_run {
                // Decided, re-checked, logged and reported: nothing tainted, evicted,
                // recorded, launched or terminated.
                tracing::warn!(method = %fresh.method, nodes = ?fresh.nodes,
                    replacements = fresh.replacements.len(), savings_per_hour = fresh.savings_per_hour,
                    "dry run: would consolidate");
                break;
            }
            self.start(&seen.region, &seen.snapshot, &fresh, until, report).await?;
            seen.started(&fresh);
            consolidating |= fresh.method.consolidates();
            started += 1;
        }
        Ok(())
    }

    /// Gives the nodes whose drift hash is of another version the current hash and version
    /// ([`crate::decide::disruption::drift::rebaseline`]). Best effort, as the pod events;
    /// in dry run, nothing is written.
    async fn rebaseline(&self, records: &[(String, crate::ports::MetadataPatch)]) {
        if self.settings.provision.dry_run {
            return;
        }
        let none = crate::ports::MetadataPatch::new();
        for (node, labels) in records {
            match self.ports.cluster.patch_labels_annotations(node, labels, &none).await {
                Ok(()) | Err(ClusterError::NotFound { .. }) => {}
                Err(e) => {
                    tracing::warn!(node = %node, error = %crate::error_chain::Chain(&e), "could not record the node's drift hash version");
                }
            }
        }
    }

    /// Keeps each node's pod events on it ([`crate::decide::disruption::pod_events`]), so
    /// the next run knows when a pod left unseen. Best effort: a failure is logged, and
    /// the next run writes again (until then, a pod gone unseen counts from that run). In
    /// dry run, nothing is written.
    async fn record_pod_events(&self, records: &[(String, crate::ports::MetadataPatch)]) {
        if self.settings.provision.dry_run {
            return;
        }
        let none = crate::ports::MetadataPatch::new();
        for (node, annotations) in records {
            match self
                .ports
                .cluster
                .patch_labels_annotations(node, &none, annotations)
                .await
            {
                Ok(()) | Err(ClusterError::NotFound { .. }) => {}
                Err(e) => {
                    tracing::warn!(node = %node, error = %crate::error_chain::Chain(&e), "could not record the node's pod events");
                }
            }
        }
    }

    /// What the decision reads: see [`Observed`].
    async fn observe<'r>(&self, region: &RegionCatalog<'r>) -> Result<Observed<'r>, ConsolidationError> {
        let mut snapshot = crate::run::observe::read_snapshot(self.ports.cluster).await?;
        // The CapacityBuffers' chunks are pending pods: the decision places them first,
        // so their room is never consolidated away (Karpenter's `SimulateScheduling`
        // injects the same virtual pods into its pending pods).
        let chunks = crate::run::observe::buffer_pods(self.ports.cluster, self.ports.clock.now()).await?;
        snapshot.pods.extend(chunks.pods);
        nodepools::keep_managed(&mut snapshot, &self.settings.provision.nodepool_selector);
        nodepools::drop_without_node_class(&mut snapshot);
        // A class that cannot be resolved leaves its NodePools out: their nodes are not
        // candidates, and nothing is planned on them.
        let resolved = self
            .provisioner("consolidator-observe")
            .narrow_pools(&mut snapshot, region)
            .await;
        let images = resolved.images;
        let mut region = region.clone();
        // Savings at the prices the user pays: the cluster's NodeOverlays.
        let overlays = region.apply_overlays(&snapshot.nodeoverlays);
        for (object, reason) in overlays.skipped_objects() {
            tracing::warn!(object = %object, reason = %reason, "NodeOverlay skipped");
        }
        for o in self.ports.store.unavailable_offerings(self.ports.clock.now()).await? {
            region.mark_unavailable(&o.instance_type, &o.zone, o.capacity_type);
        }
        let disruptions = self.ports.store.list_disruptions().await?;
        let mut in_progress: BTreeSet<String> = disruptions.iter().map(|d| d.node.clone()).collect();
        // An interruption's replacement is not removed before that drain is done: its
        // room is kept for the evicted pods, which may not have landed yet.
        let replacing: BTreeSet<&String> = disruptions
            .iter()
            .filter(|d| !crate::run::disruption::is_consolidation(d))
            .flat_map(|d| d.replacements.iter())
            .collect();
        if !replacing.is_empty() {
            let launches = self.ports.store.list_launches().await?;
            let instances: BTreeSet<&str> = launches
                .iter()
                .filter(|l| replacing.contains(&l.id))
                .filter_map(|l| l.instance_id.as_deref())
                .collect();
            in_progress.extend(
                snapshot
                    .nodes
                    .iter()
                    .filter(|n| crate::model::node::node_instance_id(n).is_some_and(|id| instances.contains(id)))
                    .filter_map(|n| n.metadata.name.clone()),
            );
        }
        // A NodePool whose class keeps failing to launch gets no replacement planned in
        // it, as the provisioner launches none there.
        let now = crate::ports::epoch_millis(self.ports.clock.now());
        let held_back = crate::decide::provisioning::backoff::held_back(&self.ports.store.list_backoffs().await?, now)
            .into_iter()
            .map(|b| b.nodepool)
            .collect();
        // Only nodes whose instance this deployment launched are its to disrupt: a
        // `karpenter.sh/nodepool` label is not ownership (Karpenter's nodes carry it too).
        let deployment = &self.settings.provision.deployment;
        let mine: Vec<_> = self
            .ports
            .cloud
            .list()
            .await?
            .into_iter()
            .filter(|i| launched_by(i, deployment).is_ok())
            .collect();
        let networks = Networks {
            classes: resolved.networks,
            instances: mine.iter().map(|i| (i.id.clone(), i.network.clone())).collect(),
        };
        let owned = mine.into_iter().map(|i| i.id).collect();
        Ok(Observed {
            snapshot,
            region,
            in_progress,
            images,
            networks,
            owned,
            held_back,
        })
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

/// What a decision reads, observed afresh.
struct Observed<'r> {
    /// The cluster, its NodePools those Carpool manages, narrowed to their classes'
    /// zones and AMIs (a class that cannot be resolved leaves its NodePools out).
    snapshot: Snapshot,
    /// The region, with the offerings out of capacity left out.
    region: RegionCatalog<'r>,
    /// The nodes of every disruption in progress, and those of an interruption's
    /// replacements while its drain goes on.
    in_progress: BTreeSet<String>,
    /// The AMIs each class resolves.
    images: BTreeMap<String, Vec<crate::ports::ResolvedImage>>,
    /// What each class selects in the network, and where this deployment's instances are.
    networks: Networks,
    /// The instances this deployment launched ([`launched_by`]).
    owned: BTreeSet<String>,
    /// The NodePools held back by launch backoff at the time observed.
    held_back: BTreeSet<String>,
}

impl Observed<'_> {
    /// Takes a command just started into the view: its nodes are disrupting, and tainted
    /// as the cluster now has them, so the next decision neither picks them nor moves
    /// pods onto them, and the budgets count them.
    fn started(&mut self, command: &DisruptionCommand) {
        for name in &command.nodes {
            self.in_progress.insert(name.clone());
            if let Some(node) = self
                .snapshot
                .nodes
                .iter_mut()
                .find(|n| n.metadata.name.as_deref() == Some(name.as_str()))
            {
                node.spec
                    .get_or_insert_default()
                    .taints
                    .get_or_insert_default()
                    .push(crate::run::disruption::advance::disrupted_taint());
            }
        }
    }

    fn input(&self, now: SystemTime, settings: &DisruptionSettings) -> DisruptionInput<'_> {
        DisruptionInput {
            snapshot: &self.snapshot,
            region: &self.region,
            now,
            in_progress: self.in_progress.clone(),
            settings: settings.clone(),
            images: self.images.clone(),
            networks: self.networks.clone(),
            owned: Some(self.owned.clone()),
            held_back: self.held_back.clone(),
        }
    }
}

/// Whether a re-checked command is the command decided: the same method on the same nodes.
fn same_command(fresh: &DisruptionCommand, decided: &DisruptionCommand) -> bool {
    fresh.method == decided.method && fresh.nodes == decided.nodes
}
