//! Keeping backoffs ([`crate::decide::provisioning::backoff`]) in the state store: a batch's launch
//! errors, and a housekeeping round's registrations and registration failures, become
//! `BACKOFF#<nodepool>#<nodeclass>` records, so they hold across Lambda invocations.

use std::collections::BTreeMap;

use super::report::LaunchFailure;
use super::{ProvisionError, Provisioner};
use crate::decide::provisioning::backoff::{self, Change, Policy, PoolKey, Round};
use crate::error_chain::Chain;
use crate::ports::{Backoff, Cloud, Cluster, EpochMillis, StateStore, StoreError, Timer};
use crate::snapshot::Snapshot;

/// The rounds of a batch's non-capacity launch errors, per NodePool and the class it
/// launched with (the first error of each).
pub(super) fn launch_error_rounds(failures: &[LaunchFailure], snapshot: &Snapshot) -> BTreeMap<PoolKey, Round> {
    let mut rounds: BTreeMap<PoolKey, Round> = BTreeMap::new();
    for f in failures {
        let Some(pool) = snapshot.nodepools.iter().find(|p| p.name() == f.nodepool) else {
            continue;
        };
        let round = rounds.entry(PoolKey::of(pool)).or_default();
        if round.launch_error.is_none() {
            round.launch_error = Some(f.error.clone());
        }
    }
    rounds
}

impl<C: Cloud, K: Cluster, S: StateStore, T: Timer> Provisioner<'_, C, K, S, T> {
    /// Applies rounds to the stored backoffs (`stored`, as listed), at `now`; returns the
    /// backoffs that set a new window. In dry run nothing is written, and the backoffs it
    /// would set are returned. A lost race on a record (another writer) is
    /// logged and skipped; other store errors end the call.
    pub(super) async fn apply_backoffs(
        &self,
        rounds: &BTreeMap<PoolKey, Round>,
        stored: &[Backoff],
        now: EpochMillis,
    ) -> Result<Vec<Backoff>, ProvisionError> {
        let policy = Policy::default();
        let mut set = Vec::new();
        for (key, round) in rounds {
            let current = stored.iter().find(|b| PoolKey::of_backoff(b) == *key);
            let change = backoff::next(key, current, round, now, &policy);
            if self.settings.dry_run {
                // Nothing is written: the backoff is reported as the one it would set.
                if let Change::Put {
                    backoff,
                    window_set: true,
                } = change
                {
                    tracing::warn!(nodepool = %backoff.nodepool, node_class = %backoff.node_class,
                        until = backoff.until, reason = %backoff.reason, "dry run: would back off");
                    set.push(backoff);
                }
                continue;
            }
            let written = match change {
                Change::Unchanged => continue,
                Change::Clear => {
                    tracing::info!(nodepool = %key.nodepool, node_class = %key.node_class,
                        "a node registered: launch backoff reset");
                    self.ports.store.delete_backoff(&key.nodepool, &key.node_class).await
                }
                Change::Put { backoff, window_set } => {
                    let result = if backoff.version == 0 {
                        self.ports.store.create_backoff(&backoff).await
                    } else {
                        self.ports.store.update_backoff(&backoff).await
                    };
                    if result.is_ok() && window_set {
                        let until = crate::decide::provisioning::backoff::reason(&backoff).to_string();
                        tracing::warn!(
                            nodepool = %backoff.nodepool, node_class = %backoff.node_class,
                            failures = backoff.failures, registration_failures = backoff.registration_failures,
                            until = backoff.until, reason = %backoff.reason, message = %until,
                            "launch backoff"
                        );
                        set.push(backoff);
                    }
                    result.map(|_| ())
                }
            };
            match written {
                Ok(()) => {}
                Err(e @ StoreError::Conflict { .. }) => {
                    tracing::warn!(nodepool = %key.nodepool, error = %Chain(&e), "launch backoff: lost a race; skipped");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(set)
    }
}
