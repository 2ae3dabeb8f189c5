//! The provisioner's run: pending pods become nodes.
//!
//! An EventBridge schedule starts a run every minute, but Karpenter reacts within seconds,
//! so a run [watches](Provisioner::run) for up to its window (50 s by default):
//!
//! 1. It takes the `provisioner` lease; a run that cannot returns at once, saying who
//!    holds it. Two overlapping runs therefore never launch for the same pods.
//! 2. [Housekeeping](Provisioner::housekeeping) carries out the plan
//!    [`crate::decide::housekeeping`] makes: launches whose node registered, launches in
//!    flight reconciled with the cloud's list (found by their launch-id tag, or failed
//!    when their instance is gone), instances that never registered (terminated after the
//!    registration TTL, only when this deployment owns them, a few per round), records of
//!    instances gone.
//! 3. It polls the pods kube-scheduler left pending and [batches](batcher) them: a batch
//!    closes after 1 s without a new pod, or after 10 s.
//! 4. Each [batch](Provisioner::batch) takes a snapshot, keeps the NodePools that can
//!    launch ([`crate::decide::provisioning::nodepools`]), counts the launches in flight as capacity
//!    ([`crate::decide::provisioning::in_flight`]), plans with [`crate::decide`] (NodePool limits
//!    included), grows the plan where kube-scheduler's own placement would strand a pod
//!    ([`crate::decide::provisioning::scheduler_fit`]), [launches](launch) every planned node at once,
//!    as one [wave](waves) that registers tainted and is released together, and after capacity errors
//!    marks those offerings unavailable for 3 minutes and re-plans, so spot falls back
//!    to other offerings and to on-demand where the pool allows it. It then publishes
//!    Kubernetes [Events](events) on the pods (nominated, unschedulable, launch failed),
//!    rate-limited across batches and runs.
//!    A NodePool whose launches fail otherwise, or whose nodes do not register three
//!    times in a row, is [backed off](crate::decide::provisioning::backoff) (1 minute, doubling, up
//!    to 30), in the state store so that it holds across runs.
//! 5. Once the watch is over, it goes on releasing the waves it launched until they are
//!    out or its time is up; the next run's housekeeping releases what is left.
//! 6. It releases the lease.
//!
//! Everything that acts goes through the ports; `now` comes from the [`Timer`].

pub mod backoff;
pub mod batch;
pub mod batcher;
pub mod buffers;
pub mod events;
pub mod housekeeping;

pub mod metrics;

pub mod report;
pub mod room;
pub mod static_capacity;
pub mod status;
pub mod waves;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

pub use events::SharedRecentEvents;
pub use report::{BatchReport, HousekeepingReport, RunReport};

use self::batcher::Batcher;
use crate::catalog::RegionCatalog;
use crate::decide::provisioning::pod::{is_provisionable, pod_key};
use crate::decide::provisioning::selector::Selector;
use crate::ports::{Cloud, CloudError, Cluster, ClusterError, Lease, StateStore, StoreError, Timer};
use crate::run::config::Config;
use crate::run::ports::Ports;
use crate::run::watch_mode::WatchMode;

/// The lease's name.
pub const LEASE: &str = "provisioner";

/// A run that could not go on.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// The Kubernetes API failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The state store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// EC2 failed outside a launch (launch failures are reported, not raised).
    #[error(transparent)]
    Cloud(#[from] CloudError),
}

impl ProvisionError {
    /// Whether running again later may succeed (throttling, a lost race); the Lambda
    /// reports the others as failures. A misconfigured EC2NodeClass
    /// ([`CloudError::NodeClass`]) is not: it lasts until someone fixes the class, and a
    /// launch reports it as a failed launch rather than raising it.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProvisionError::Store(StoreError::Throttled { .. } | StoreError::Conflict { .. })
                | ProvisionError::Cloud(CloudError::Throttled { .. })
                | ProvisionError::Cluster(ClusterError::Throttled { .. })
        )
    }
}

/// The settings a run uses (the parts of [`Config`] the core needs).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// How long to watch.
    pub watch: Duration,
    /// Batch idle window.
    pub batch_idle: Duration,
    /// Batch maximum.
    pub batch_max: Duration,
    /// How often to list pending pods while watching.
    pub poll: Duration,
    /// Registration TTL.
    pub registration_ttl: Duration,
    /// Plan and log, launch and terminate nothing.
    pub dry_run: bool,
    /// This deployment's name ([`Config::deployment`]): launches are tagged
    /// with it, and housekeeping terminates only instances that carry it.
    pub deployment: String,
    /// The NodePools Carpool manages, by their labels (empty: every NodePool).
    pub nodepool_selector: Selector,
    /// Launch waves ([`crate::decide::waves::wave`]): how long the nodes of a wave wait for the
    /// others once the first is Ready; zero launches without the wave taint.
    pub wave_grace: Duration,
    /// Grow each plan where kube-scheduler's replay strands a pod
    /// ([`crate::decide::provisioning::scheduler_fit`]).
    pub fit_to_scheduler: bool,
    /// The latest a wave taint stays on a node, from its launch.
    pub wave_deadline: Duration,
    /// How long from its start the run may go on after its watch to release the waves it
    /// launched (what the function's time allows); a wave left over is released by the
    /// next run.
    pub release_limit: Duration,
    /// Whether a run with nothing to do exits after one check ([`WatchMode`]).
    pub watch_mode: WatchMode,
}

impl Default for Settings {
    /// The function's defaults (those of an empty [`Config`]): a 50 s watch,
    /// batches of 1 s idle and 10 s at most, a 15 min registration TTL, every NodePool,
    /// launching for real, as the deployment `carpool`, in waves released 10 s after
    /// their first node is Ready at the latest, for up to 60 s from the run's start.
    fn default() -> Self {
        Settings {
            watch: Duration::from_secs(50),
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            poll: poll_interval(Duration::from_secs(1)),
            registration_ttl: Duration::from_secs(900),
            dry_run: false,
            nodepool_selector: Selector::default(),
            deployment: "carpool".into(),
            wave_grace: WAVE_GRACE,
            fit_to_scheduler: true,
            wave_deadline: WAVE_DEADLINE,
            release_limit: Duration::from_secs(60),
            watch_mode: WatchMode::Continuous,
        }
    }
}

/// The default wave grace: nodes of one CreateFleet round boot within seconds of each
/// other, so the first ones wait that long at most for the rest.
pub const WAVE_GRACE: Duration = Duration::from_secs(10);

/// The default longest life of a wave taint, from the launch: well past a node's boot.
pub const WAVE_DEADLINE: Duration = Duration::from_secs(300);

impl Settings {
    /// The settings of a configuration, watching at most `watch_limit` (what the
    /// function's remaining time allows).
    pub fn from_config(config: &Config, watch_limit: Duration) -> Self {
        Settings {
            watch: config.watch.min(watch_limit),
            batch_idle: config.batch_idle,
            batch_max: config.batch_max,
            poll: poll_interval(config.batch_idle),
            registration_ttl: config.registration_ttl,
            dry_run: config.dry_run,
            nodepool_selector: config.nodepool_selector.clone(),
            deployment: config.deployment.clone(),
            wave_grace: config.wave_grace,
            fit_to_scheduler: config.fit_to_scheduler,
            wave_deadline: WAVE_DEADLINE,
            release_limit: watch_limit,
            watch_mode: config.watch_mode,
        }
    }
}

/// A quarter of the idle window, between 100 ms and 1 s: fine enough that the idle
/// window is honoured, coarse enough to be a few list calls a second.
pub fn poll_interval(idle: Duration) -> Duration {
    (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// One run's ports and settings.
pub struct Provisioner<'a, C, K, S, T> {
    /// EC2, the Kubernetes API, DynamoDB and time.
    pub ports: Ports<'a, C, K, S, T>,
    /// Settings.
    pub settings: Settings,
    /// Who runs (the Lambda request id): the lease owner, and the launch ids' prefix.
    pub owner: String,
    launches: AtomicU64,
    batches: u64,
    /// The waves this run launched that are not released yet.
    waves: std::collections::BTreeSet<String>,
    /// The wave each pod of this run's launches was planned into.
    wave_pods: HashMap<String, String>,
    /// The tier each pod of `wave_pods` is handed its wave in
    /// ([`crate::decide::waves::hand_tiers`]).
    hand_tiers: HashMap<String, usize>,
    /// How far each of this run's waves was handed to its pending pods.
    handed: std::collections::BTreeMap<String, crate::decide::waves::wave::Handing>,
    /// When each of this run's waves was seen released.
    released_at: HashMap<String, SystemTime>,
    /// Until when the watch stays open for the pods of a wave released while they were
    /// still pending.
    recheck_until: Option<SystemTime>,
    recent_events: SharedRecentEvents,
    /// The cluster as the invocation read it, shared by its records (the interruption
    /// function's replacements); `None`: read when needed.
    pub(crate) shared_snapshot: Option<&'a crate::run::shared_snapshot::SharedSnapshot>,
}

fn since(now: SystemTime, then: SystemTime) -> Duration {
    now.duration_since(then).unwrap_or_default()
}

impl<'a, C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'a, C, K, S, T> {
    /// A run by `owner`.
    pub fn new(cloud: &'a C, cluster: &'a K, store: &'a S, clock: &'a T, settings: Settings, owner: &str) -> Self {
        Provisioner {
            ports: Ports {
                cloud,
                cluster,
                store,
                clock,
            },
            settings,
            owner: owner.to_string(),
            launches: AtomicU64::new(0),
            batches: 0,
            waves: std::collections::BTreeSet::new(),
            wave_pods: HashMap::new(),
            hand_tiers: HashMap::new(),
            handed: std::collections::BTreeMap::new(),
            released_at: HashMap::new(),
            recheck_until: None,
            recent_events: SharedRecentEvents::default(),
            shared_snapshot: None,
        }
    }

    /// Plans a node's replacement on `shared`, the invocation's one read of the cluster,
    /// in turn with the invocation's other records ([`crate::run::shared_snapshot`]).
    #[must_use]
    pub fn with_shared_snapshot(mut self, shared: Option<&'a crate::run::shared_snapshot::SharedSnapshot>) -> Self {
        self.shared_snapshot = shared;
        self
    }

    /// The run remembers the Events it publishes in `recent` (for the rate limit), and
    /// does not publish again what another run with the same `recent` published lately.
    /// Without it, a run starts with none remembered.
    #[must_use]
    pub fn with_recent_events(mut self, recent: SharedRecentEvents) -> Self {
        self.recent_events = recent;
        self
    }

    /// A launch id unique to this run: the owner and a counter.
    pub(crate) fn next_launch_id(&self) -> String {
        let n = self.launches.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.owner)
    }

    fn lease_ttl(&self) -> Duration {
        self.settings.watch + Duration::from_secs(60)
    }

    /// Watches, batches, plans and launches until the window ends; see the module doc.
    pub async fn run(&mut self, region: &RegionCatalog<'_>) -> Result<RunReport, ProvisionError> {
        let mut report = RunReport::default();
        let start = self.ports.clock.now();
        let requests_before = self.ports.cluster.requests_sent();
        let mut lease = match self
            .ports
            .store
            .acquire_lease(LEASE, &self.owner, start, self.lease_ttl())
            .await
        {
            Ok(lease) => lease,
            Err(StoreError::Conflict { detail, .. }) => {
                tracing::info!(holder = %detail, "another run holds the provisioner lease; exiting");
                report.lease_held_by = Some(detail);
                return Ok(report);
            }
            Err(e) => return Err(e.into()),
        };
        let outcome = self.watch(region, start, &mut lease, &mut report).await;
        if let Err(e) = self.ports.store.release_lease(&lease).await {
            tracing::warn!(error = %crate::error_chain::Chain(&e), "could not release the provisioner lease; it lapses by itself");
        }
        report.watched_ms = u64::try_from(since(self.ports.clock.now(), start).as_millis()).unwrap_or(u64::MAX);
        report.apiserver_requests = self.ports.cluster.requests_sent().saturating_sub(requests_before);
        outcome.map(|()| report)
    }

    async fn watch(
        &mut self,
        region: &RegionCatalog<'_>,
        start: SystemTime,
        lease: &mut Lease,
        report: &mut RunReport,
    ) -> Result<(), ProvisionError> {
        let mut faults = Faults::default();
        self.housekeep(region, report, &mut faults).await?;
        let deadline = start + self.settings.watch;
        let mut batcher = Batcher::new(self.settings.batch_idle, self.settings.batch_max);
        // Pods a batch of this run already handled, and when: they open another batch only
        // once the batch maximum has passed since, in case they are still pending because
        // the scheduler placed them otherwise than planned. Re-planning them is safe: the
        // capacity in flight is counted, so nothing is launched twice.
        let mut handled: HashMap<String, SystemTime> = HashMap::new();
        let mut first = true;
        let mut first_poll = true;
        let release_end = start + self.settings.release_limit.max(self.settings.watch);
        loop {
            let now = self.ports.clock.now();
            // A wave released while some of its pods were still pending keeps the watch
            // open until they can be planned again (`wave_settled_for`), so the run that
            // launched the wave provides for what kube-scheduler left over.
            let deadline = self
                .recheck_until
                .map_or(deadline, |r| deadline.max(r.min(release_end)));
            if now >= deadline && !batcher.is_open() && !first {
                // The watch is over; the run goes on only to release its own waves.
                if self.waves.is_empty() || now >= release_end {
                    break;
                }
                self.release_waves(report, None).await;
                self.renew_if_due(lease).await?;
                self.ports.clock.sleep(self.settings.poll).await;
                continue;
            }
            first = false;
            let polled = match self.ports.cluster.pending_pods().await {
                Ok(pods) => {
                    faults.polls = 0;
                    pods
                }
                Err(e) => {
                    // The adapter retried already; the next poll tries again, unless
                    // the apiserver has been failing for a while.
                    faults.polls += 1;
                    faults.note(report, "poll of pending pods", &e);
                    if faults.polls >= MAX_FAILED_POLLS {
                        return Err(e.into());
                    }
                    self.ports.clock.sleep(self.settings.poll).await;
                    continue;
                }
            };
            if first_poll {
                first_poll = false;
                if self.quiet(&polled, now).await {
                    tracing::info!("nothing pending and nothing launched lately; the adaptive watch exits");
                    report.exited_early = true;
                    break;
                }
            }
            let pending: Vec<String> = polled
                .iter()
                .filter(|p| is_provisionable(p))
                .map(pod_key)
                .filter(|k| handled.get(k).is_none_or(|&t| since(now, t) >= self.settings.batch_max))
                .filter(|k| self.wave_settled_for(k, now))
                .collect();
            batcher.observe(now, pending);
            // The poll is what the wave release reads of the pending pods, unless a batch
            // (seconds long) ran since.
            let mut fresh = Some(&polled);
            if batcher.is_due(now) || (now >= deadline && batcher.is_open()) {
                fresh = None;
                let pods = batcher.take();
                match self.batch(region).await {
                    Ok(batch) => {
                        faults.batches = 0;
                        self.log_batch(&batch);
                        let at = self.ports.clock.now();
                        handled.extend(pods.into_iter().map(|p| (p, at)));
                        report.batches.push(batch);
                    }
                    // A batch that failed launched only what its records count as in
                    // flight: its pods are batched again at the next poll, and planned
                    // with that capacity counted, so nothing is launched twice.
                    Err(e) if e.is_retryable() && faults.batches + 1 < MAX_FAILED_BATCHES => {
                        faults.batches += 1;
                        faults.note(report, "batch", &e);
                    }
                    Err(e) => return Err(e),
                }
                self.housekeep(region, report, &mut faults).await?;
            }
            if !self.waves.is_empty() {
                self.release_waves(report, fresh.map(Vec::as_slice)).await;
            }
            self.renew_if_due(lease).await?;
            if self.ports.clock.now() >= deadline && !batcher.is_open() && self.waves.is_empty() {
                break;
            }
            self.ports.clock.sleep(self.settings.poll).await;
        }
        Ok(())
    }

    /// Whether the watch may end after its first poll ([`WatchMode::may_exit_early`]):
    /// nothing in `polled` to launch for, and no launch within the quiet period. A store
    /// that cannot say keeps the run watching.
    async fn quiet(&self, polled: &[crate::model::pod::Pod], now: SystemTime) -> bool {
        if self.settings.watch_mode == WatchMode::Continuous {
            return false;
        }
        let pending = polled.iter().filter(|p| is_provisionable(p)).count();
        if pending > 0 {
            return false;
        }
        match self.ports.store.list_launches().await {
            Ok(launches) => self.settings.watch_mode.may_exit_early(pending, &launches, now),
            Err(_) => false,
        }
    }

    /// One housekeeping round. A round that fails is logged and counted, and the watch
    /// goes on: provisioning does not need it to be safe. The capacity in flight that a
    /// batch counts comes from the batch's own read of the launch records (a batch that
    /// cannot read them fails, and launches nothing); housekeeping only follows launches
    /// up, terminates what never registered and releases waves, which the next round or
    /// run does as well. Only a run whose every round fails ends, with the error, after
    /// [`MAX_FAILED_HOUSEKEEPING`] in a row.
    async fn housekeep(
        &self,
        region: &RegionCatalog<'_>,
        report: &mut RunReport,
        faults: &mut Faults,
    ) -> Result<(), ProvisionError> {
        match self.housekeeping(region).await {
            Ok(mut round) => {
                if report.housekeeping.is_empty() {
                    self.collect_launch_templates(&mut round).await;
                    match self.keep_static_capacity(region).await {
                        Ok(kept) => report.static_capacity = kept,
                        Err(e) => {
                            static_capacity::log_failure("static NodePools", &e);
                            faults.note(report, "static capacity", &e);
                        }
                    }
                    match self.keep_buffers(region).await {
                        Ok(kept) => report.buffers = kept,
                        Err(e) => {
                            static_capacity::log_failure("CapacityBuffers", &e);
                            faults.note(report, "capacity buffers", &e);
                        }
                    }
                    match self.write_statuses(region).await {
                        Ok((written, fleet)) => {
                            report.statuses_written = written;
                            report.fleet = fleet;
                        }
                        Err(e) => faults.note(report, "statuses", &e),
                    }
                }
                faults.housekeeping = 0;
                report.housekeeping.push(round);
                Ok(())
            }
            Err(e) => {
                faults.housekeeping += 1;
                faults.note(report, "housekeeping", &e);
                if faults.housekeeping >= MAX_FAILED_HOUSEKEEPING {
                    return Err(e);
                }
                Ok(())
            }
        }
    }

    /// Whether kube-scheduler has had its chance at a pod since the launch wave planned
    /// for it was released: a pod whose wave is still held, or was released less than
    /// the batch maximum (10 s) ago, is not planned again. kube-scheduler retries a pod
    /// that failed within its backoff, at most `podMaxBackoffSeconds` (10 s by default,
    /// `pkg/scheduler/apis/config/v1/defaults.go`), so a pod still pending after that is
    /// one the wave did not take, and only then is it launched for again.
    fn wave_settled_for(&self, pod: &str, now: SystemTime) -> bool {
        let Some(wave) = self.wave_pods.get(pod) else {
            return true;
        };
        if self.waves.contains(wave) {
            return false;
        }
        self.released_at
            .get(wave)
            .is_none_or(|&at| since(now, at) >= self.settings.batch_max)
    }

    async fn renew_if_due(&self, lease: &mut Lease) -> Result<(), ProvisionError> {
        if self.ports.clock.now() >= lease_renew_at(lease) {
            *lease = self
                .ports
                .store
                .renew_lease(lease, self.ports.clock.now(), self.lease_ttl())
                .await?;
        }
        Ok(())
    }

    fn log_batch(&self, batch: &BatchReport) {
        let summary = serde_json::to_string(batch).unwrap_or_default();
        tracing::info!(
            pods_seen = batch.pods_seen,
            pods_planned = batch.pods_planned,
            nodes_launched = batch.launched.len(),
            launch_errors = batch.launch_errors.len(),
            launch_backoffs = batch.launch_backoffs(),
            unschedulable = batch.unschedulable.len(),
            cost_per_hour_added = batch.cost_per_hour_added,
            plan_ms = batch.plan_ms,
            launch_ms = batch.launch_ms,
            pending_to_fleet_p50_ms = report::quantile(&batch.pending_to_fleet_ms, 0.5),
            pending_to_fleet_p99_ms = report::quantile(&batch.pending_to_fleet_ms, 0.99),
            batch = %summary,
            "batch"
        );
    }
}

/// Polls of pending pods that may fail in a row (each after the adapter's own retries)
/// before the run gives up: at the default poll of 250 ms, a few seconds of an apiserver
/// that answers nothing but errors.
pub const MAX_FAILED_POLLS: u32 = 20;
/// Batches that may fail in a row with a retryable error before the run gives up.
pub const MAX_FAILED_BATCHES: u32 = 3;
/// Housekeeping rounds that may fail in a row before the run gives up.
pub const MAX_FAILED_HOUSEKEEPING: u32 = 3;

/// The steps of a watch that failed in a row, by kind.
#[derive(Debug, Default)]
struct Faults {
    polls: u32,
    batches: u32,
    housekeeping: u32,
}

impl Faults {
    /// Logs a failed step and records it in the run's report.
    fn note(&self, report: &mut RunReport, step: &str, error: &(dyn std::error::Error + 'static)) {
        let chain = crate::error_chain::Chain(error).to_string();
        tracing::warn!(step, error = %chain, "a step of the watch failed; the watch goes on");
        report.transient_errors.push(format!("{step}: {chain}"));
    }
}

/// When to renew a lease: one minute before its `expires_at` (at `expires_at` itself for a
/// lease that would expire within a minute of the epoch). The watch loop checks this after
/// each poll. The lease is taken, and renewed, with a TTL of the watch window plus a
/// minute, so a run renews it only when it is still at work as its watch window ends (a
/// last batch still open), with a minute to spare before another run could take it.
fn lease_renew_at(lease: &Lease) -> SystemTime {
    let expires = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(lease.expires_at).unwrap_or(0));
    expires.checked_sub(Duration::from_secs(60)).unwrap_or(expires)
}
