//! An in-memory state store with the DynamoDB adapter's conditional semantics.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Injected;
use crate::ports::{
    Backoff, DisruptionRecord, LaunchRecord, Lease, NodeRecord, StateStore, StoreError, UnavailableOffering,
    epoch_millis, sort_key,
};

/// One stored item: its JSON and, for TTL'd kinds, its expiry.
#[derive(Clone, Debug)]
struct Item {
    json: serde_json::Value,
    expires_at: Option<i64>,
}

/// A state store in memory. Keys follow the table's sort keys (`LEASE#job`,
/// `LAUNCH#id`, ...). It records every call, and can be told to fail the next calls.
#[derive(Debug, Default)]
pub struct FakeStore {
    items: Mutex<BTreeMap<String, Item>>,
    calls: Mutex<Vec<String>>,
    fail_next: Mutex<Vec<StoreErrorKind>>,
    /// Calls to fail once each, by a prefix of `method key`.
    fail_on: Mutex<Vec<(String, StoreErrorKind)>>,
    /// The call (a prefix of `method key`) at which the store dies, as a crashed run sees
    /// it: that call and every later one fail, until [`FakeStore::revive`].
    crash_at: Mutex<Option<String>>,
    dead: Mutex<bool>,
}

/// An error to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// `StoreError::Throttled`.
    Throttled,
    /// `StoreError::Api`.
    Api,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn to_json<T: Serialize>(v: &T) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(v).map_err(|e| StoreError::Api(Box::new(e)))
}

fn from_json<T: DeserializeOwned>(v: &serde_json::Value) -> Result<T, StoreError> {
    serde_json::from_value(v.clone()).map_err(|e| StoreError::Api(Box::new(e)))
}

impl FakeStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The calls made so far, as `method key`.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.calls).clone()
    }

    /// Dies at the first call starting with `call` (e.g. `"create LAUNCH#"`): that call and
    /// every later one fail, so the run stops there with its state as far as it got, as a
    /// crash or a Lambda timeout leaves it. [`FakeStore::revive`] brings it back (the next
    /// run).
    pub fn crash_at(&self, call: &str) {
        *lock(&self.crash_at) = Some(call.to_string());
    }

    /// Ends a crash: calls succeed again, and no crash is armed.
    pub fn revive(&self) {
        *lock(&self.dead) = false;
        *lock(&self.crash_at) = None;
    }

    /// Makes the next call fail with `kind` (several queue up).
    pub fn fail_next(&self, kind: StoreErrorKind) {
        lock(&self.fail_next).push(kind);
    }

    /// Makes the next call whose `method key` (as [`FakeStore::calls`] lists it) starts
    /// with `call` fail with `kind`, the other calls unchanged (several queue up; each
    /// fails once).
    pub fn fail_on(&self, call: &str, kind: StoreErrorKind) {
        lock(&self.fail_on).push((call.to_string(), kind));
    }

    fn enter(&self, call: String) -> Result<MutexGuard<'_, BTreeMap<String, Item>>, StoreError> {
        lock(&self.calls).push(call.clone());
        {
            let mut dead = lock(&self.dead);
            if lock(&self.crash_at)
                .as_ref()
                .is_some_and(|c| call.starts_with(c.as_str()))
            {
                *dead = true;
                *lock(&self.crash_at) = None;
            }
            if *dead {
                return Err(StoreError::Api(format!("crashed before {call}").into()));
            }
        }
        let targeted = {
            let mut targeted = lock(&self.fail_on);
            let at = targeted.iter().position(|(c, _)| call.starts_with(c.as_str()));
            at.map(|i| targeted.remove(i).1)
        };
        let mut failures = lock(&self.fail_next);
        let failure = targeted.or_else(|| (!failures.is_empty()).then(|| failures.remove(0)));
        if let Some(kind) = failure {
            return Err(match kind {
                StoreErrorKind::Throttled => StoreError::Throttled {
                    what: call,
                    source: Injected::boxed(),
                },
                StoreErrorKind::Api => StoreError::Api(format!("injected failure on {call}").into()),
            });
        }
        Ok(lock(&self.items))
    }

    fn create<T: Serialize + DeserializeOwned>(&self, key: String, record: &T) -> Result<T, StoreError> {
        let mut items = self.enter(format!("create {key}"))?;
        if items.contains_key(&key) {
            return Err(StoreError::Conflict {
                key,
                detail: "already exists".into(),
            });
        }
        let mut json = to_json(record)?;
        json["version"] = 1.into();
        items.insert(
            key,
            Item {
                json: json.clone(),
                expires_at: None,
            },
        );
        from_json(&json)
    }

    fn update<T: Serialize + DeserializeOwned>(&self, key: String, record: &T, version: u64) -> Result<T, StoreError> {
        let mut items = self.enter(format!("update {key}"))?;
        let Some(stored) = items.get(&key) else {
            return Err(StoreError::Conflict {
                key,
                detail: "does not exist".into(),
            });
        };
        let stored_version = stored.json["version"].as_u64().unwrap_or(0);
        if stored_version != version {
            return Err(StoreError::Conflict {
                key,
                detail: format!("version is {stored_version}, not {version}"),
            });
        }
        let mut json = to_json(record)?;
        json["version"] = (version + 1).into();
        items.insert(
            key,
            Item {
                json: json.clone(),
                expires_at: None,
            },
        );
        from_json(&json)
    }

    fn list<T: DeserializeOwned>(&self, prefix: &str) -> Result<Vec<T>, StoreError> {
        let items = self.enter(format!("list {prefix}"))?;
        items
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, i)| from_json(&i.json))
            .collect()
    }

    fn delete(&self, key: String) -> Result<(), StoreError> {
        let mut items = self.enter(format!("delete {key}"))?;
        items.remove(&key);
        Ok(())
    }
}

impl StateStore for FakeStore {
    async fn acquire_lease(&self, job: &str, owner: &str, now: SystemTime, ttl: Duration) -> Result<Lease, StoreError> {
        let key = sort_key::lease(job);
        let mut items = self.enter(format!("acquire {key}"))?;
        let now_ms = epoch_millis(now);
        if let Some(held) = items.get(&key) {
            let held: Lease = from_json(&held.json)?;
            if held.owner != owner && held.expires_at > now_ms {
                return Err(StoreError::Conflict {
                    key,
                    detail: format!("held by {} until {}", held.owner, held.expires_at),
                });
            }
        }
        let lease = Lease {
            job: job.into(),
            owner: owner.into(),
            expires_at: epoch_millis(now + ttl),
        };
        items.insert(
            key,
            Item {
                json: to_json(&lease)?,
                expires_at: Some(lease.expires_at),
            },
        );
        Ok(lease)
    }

    async fn renew_lease(&self, lease: &Lease, now: SystemTime, ttl: Duration) -> Result<Lease, StoreError> {
        let key = sort_key::lease(&lease.job);
        let mut items = self.enter(format!("renew {key}"))?;
        let held: Option<Lease> = items.get(&key).map(|i| from_json(&i.json)).transpose()?;
        match held {
            Some(h) if h.owner == lease.owner => {
                let renewed = Lease {
                    expires_at: epoch_millis(now + ttl),
                    ..h
                };
                items.insert(
                    key,
                    Item {
                        json: to_json(&renewed)?,
                        expires_at: Some(renewed.expires_at),
                    },
                );
                Ok(renewed)
            }
            Some(h) => Err(StoreError::Conflict {
                key,
                detail: format!("held by {}", h.owner),
            }),
            None => Err(StoreError::Conflict {
                key,
                detail: "not held".into(),
            }),
        }
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let key = sort_key::lease(&lease.job);
        let mut items = self.enter(format!("release {key}"))?;
        let held: Option<Lease> = items.get(&key).map(|i| from_json(&i.json)).transpose()?;
        match held {
            Some(h) if h.owner == lease.owner => {
                items.remove(&key);
                Ok(())
            }
            Some(h) => Err(StoreError::Conflict {
                key,
                detail: format!("held by {}", h.owner),
            }),
            None => Ok(()),
        }
    }

    async fn create_launch(&self, record: &LaunchRecord) -> Result<LaunchRecord, StoreError> {
        self.create(sort_key::launch(&record.id), record)
    }

    async fn update_launch(&self, record: &LaunchRecord) -> Result<LaunchRecord, StoreError> {
        self.update(sort_key::launch(&record.id), record, record.version)
    }

    async fn list_launches(&self) -> Result<Vec<LaunchRecord>, StoreError> {
        self.list(sort_key::LAUNCHES)
    }

    async fn delete_launch(&self, id: &str) -> Result<(), StoreError> {
        self.delete(sort_key::launch(id))
    }

    async fn create_node(&self, record: &NodeRecord) -> Result<NodeRecord, StoreError> {
        self.create(sort_key::node(&record.instance_id), record)
    }

    async fn list_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.list(sort_key::NODES)
    }

    async fn delete_node(&self, instance_id: &str) -> Result<(), StoreError> {
        self.delete(sort_key::node(instance_id))
    }

    async fn create_disruption(&self, record: &DisruptionRecord) -> Result<DisruptionRecord, StoreError> {
        self.create(sort_key::disruption(&record.instance_id), record)
    }

    async fn update_disruption(&self, record: &DisruptionRecord) -> Result<DisruptionRecord, StoreError> {
        self.update(sort_key::disruption(&record.instance_id), record, record.version)
    }

    async fn list_disruptions(&self) -> Result<Vec<DisruptionRecord>, StoreError> {
        self.list(sort_key::DISRUPTIONS)
    }

    async fn delete_disruption(&self, instance_id: &str) -> Result<(), StoreError> {
        self.delete(sort_key::disruption(instance_id))
    }

    async fn mark_unavailable(&self, o: &UnavailableOffering) -> Result<(), StoreError> {
        let key = sort_key::unavailable(o);
        let mut items = self.enter(format!("put {key}"))?;
        items.insert(
            key,
            Item {
                json: to_json(o)?,
                expires_at: Some(o.until),
            },
        );
        Ok(())
    }

    async fn unavailable_offerings(&self, now: SystemTime) -> Result<Vec<UnavailableOffering>, StoreError> {
        let now_ms = epoch_millis(now);
        let items = self.enter("list ICE#".into())?;
        items
            .range(sort_key::UNAVAILABLE.to_string()..)
            .take_while(|(k, _)| k.starts_with(sort_key::UNAVAILABLE))
            .filter(|(_, i)| i.expires_at.is_none_or(|e| e > now_ms))
            .map(|(_, i)| from_json(&i.json))
            .collect()
    }

    async fn create_backoff(&self, backoff: &Backoff) -> Result<Backoff, StoreError> {
        self.create(sort_key::backoff(&backoff.nodepool, &backoff.node_class), backoff)
    }

    async fn update_backoff(&self, backoff: &Backoff) -> Result<Backoff, StoreError> {
        self.update(
            sort_key::backoff(&backoff.nodepool, &backoff.node_class),
            backoff,
            backoff.version,
        )
    }

    async fn list_backoffs(&self) -> Result<Vec<Backoff>, StoreError> {
        self.list(sort_key::BACKOFFS)
    }

    async fn delete_backoff(&self, nodepool: &str, node_class: &str) -> Result<(), StoreError> {
        self.delete(sort_key::backoff(nodepool, node_class))
    }

    async fn event_recorded(&self, id: &str, now: SystemTime) -> Result<bool, StoreError> {
        let key = sort_key::event(id);
        let items = self.enter(format!("get {key}"))?;
        let now_ms = epoch_millis(now);
        Ok(items.get(&key).is_some_and(|i| i.expires_at.is_none_or(|e| e > now_ms)))
    }

    async fn record_event(&self, id: &str, now: SystemTime, ttl: Duration) -> Result<bool, StoreError> {
        let key = sort_key::event(id);
        let mut items = self.enter(format!("put {key}"))?;
        let now_ms = epoch_millis(now);
        if items.get(&key).is_some_and(|i| i.expires_at.is_none_or(|e| e > now_ms)) {
            return Ok(false);
        }
        items.insert(
            key,
            Item {
                json: serde_json::json!({"id": id}),
                expires_at: Some(epoch_millis(now + ttl)),
            },
        );
        Ok(true)
    }
}
