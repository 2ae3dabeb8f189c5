//! The StateStore contract, as one suite every implementation runs: the fake in this
//! crate's tests, the DynamoDB adapter against the local endpoint.

use std::time::{Duration, SystemTime};

use crate::model::CapacityType;
use crate::ports::{
    Backoff, DisruptionRecord, DisruptionStep, FailureReason, LaunchRecord, LaunchState, StateStore, StoreError,
    UnavailableOffering, epoch_millis,
};

fn is_conflict<T: std::fmt::Debug>(r: &Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Conflict { .. }))
}

fn launch(id: &str, now: SystemTime) -> LaunchRecord {
    LaunchRecord {
        wave: None,
        release_by: None,
        id: id.into(),
        instance_id: None,
        nodepool: "default".into(),
        instance_type: "m7g.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::Spot,
        pods: vec!["default/web-1".into()],
        launched_at: epoch_millis(now),
        state: LaunchState::InFlight,
        reserved_for: None,
        labels: Default::default(),
        version: 0,
    }
}

/// Runs the StateStore contract (see [`StateStore`]) against `store`. `unique` keeps the
/// keys of one run apart from earlier runs on a shared store. Panics on the first breach,
/// naming it.
pub async fn store_contract<S: StateStore>(store: &S, unique: &str, now: SystemTime) {
    let ttl = Duration::from_secs(60);
    let job = format!("provisioner-{unique}");

    // Leases.
    let a = store.acquire_lease(&job, "run-a", now, ttl).await;
    assert!(a.is_ok(), "a free lease is acquired: {a:?}");
    let b = store
        .acquire_lease(&job, "run-b", now + Duration::from_secs(1), ttl)
        .await;
    assert!(is_conflict(&b), "a held lease is a conflict for another owner: {b:?}");
    let again = store
        .acquire_lease(&job, "run-a", now + Duration::from_secs(2), ttl)
        .await;
    assert!(again.is_ok(), "the holder may acquire again: {again:?}");
    let Ok(held) = again else { return };
    let renewed = store.renew_lease(&held, now + Duration::from_secs(30), ttl).await;
    assert!(
        matches!(&renewed, Ok(l) if l.expires_at > held.expires_at),
        "the holder renews: {renewed:?}"
    );
    let stolen = store
        .renew_lease(
            &crate::ports::Lease {
                owner: "run-b".into(),
                ..held.clone()
            },
            now,
            ttl,
        )
        .await;
    assert!(is_conflict(&stolen), "another owner cannot renew: {stolen:?}");
    let after_expiry = store
        .acquire_lease(&job, "run-b", now + Duration::from_secs(200), ttl)
        .await;
    assert!(after_expiry.is_ok(), "an expired lease is taken over: {after_expiry:?}");
    let late_release = store.release_lease(&held).await;
    assert!(
        is_conflict(&late_release),
        "the old holder cannot release a lease taken over: {late_release:?}"
    );
    if let Ok(b_lease) = after_expiry {
        let released = store.release_lease(&b_lease).await;
        assert!(released.is_ok(), "the holder releases: {released:?}");
        let free = store
            .acquire_lease(&job, "run-c", now + Duration::from_secs(201), ttl)
            .await;
        assert!(free.is_ok(), "a released lease is free: {free:?}");
    }

    // Launch records: create once, update by version, delete idempotently.
    let id = format!("launch-{unique}");
    let created = store.create_launch(&launch(&id, now)).await;
    assert!(
        matches!(&created, Ok(r) if r.version == 1),
        "a new launch is version 1: {created:?}"
    );
    let duplicate = store.create_launch(&launch(&id, now)).await;
    assert!(is_conflict(&duplicate), "a launch is recorded once: {duplicate:?}");
    let Ok(v1) = created else { return };
    let registered = LaunchRecord {
        state: LaunchState::Registered {
            node: "ip-10-0-0-1".into(),
        },
        ..v1.clone()
    };
    let v2 = store.update_launch(&registered).await;
    assert!(
        matches!(&v2, Ok(r) if r.version == 2),
        "an update bumps the version: {v2:?}"
    );
    let stale = store.update_launch(&registered).await;
    assert!(
        is_conflict(&stale),
        "an update from a stale version is a conflict: {stale:?}"
    );
    let listed = store.list_launches().await;
    assert!(
        matches!(&listed, Ok(l) if l.iter().any(|r| r.id == id && matches!(r.state, LaunchState::Registered { .. }))),
        "the list shows the update: {listed:?}"
    );
    assert!(store.delete_launch(&id).await.is_ok());
    assert!(
        store.delete_launch(&id).await.is_ok(),
        "deleting a missing launch succeeds"
    );
    assert!(matches!(store.list_launches().await, Ok(l) if !l.iter().any(|r| r.id == id)));

    // Disruptions: one per instance, advanced by version.
    let instance = format!("i-{unique}");
    let d = DisruptionRecord {
        instance_id: instance.clone(),
        node: "ip-10-0-0-2".into(),
        reason: "empty".into(),
        step: DisruptionStep::Tainted,
        replacements: vec![],
        started_at: epoch_millis(now),
        updated_at: epoch_millis(now),
        event_id: format!("event-{unique}"),
        nodepool: Some("default".into()),
        drain_deadline: epoch_millis(now + Duration::from_secs(90)),
        hard_deadline: true,
        wait_for_replacement: false,
        terminate_by: None,
        burst: None,
        evicted: vec![crate::ports::PodRef {
            namespace: "web".into(),
            name: "web-0".into(),
            uid: Some("uid-0".into()),
        }],
        held_by: Some("run-1".into()),
        held_until: epoch_millis(now + Duration::from_secs(30)),
        version: 0,
    };
    let d1 = store.create_disruption(&d).await;
    assert!(
        matches!(&d1, Ok(r) if *r == DisruptionRecord { version: 1, ..d.clone() }),
        "a disruption reads back whole: {d1:?}"
    );
    assert!(
        is_conflict(&store.create_disruption(&d).await),
        "one disruption per instance"
    );
    if let Ok(d1) = d1 {
        let next = DisruptionRecord {
            step: DisruptionStep::Draining,
            ..d1.clone()
        };
        assert!(
            matches!(store.update_disruption(&next).await, Ok(r) if r.version == 2 && r.step == DisruptionStep::Draining)
        );
        assert!(
            is_conflict(&store.update_disruption(&next).await),
            "two runs cannot both advance it"
        );
    }
    assert!(store.delete_disruption(&instance).await.is_ok());

    // Unavailable offerings expire.
    let ice = UnavailableOffering {
        instance_type: format!("c7g.{unique}"),
        zone: "us-east-1b".into(),
        capacity_type: CapacityType::Spot,
        until: epoch_millis(now + Duration::from_secs(180)),
        reclaimed: false,
    };
    let reclaimed = UnavailableOffering {
        until: epoch_millis(now + Duration::from_secs(3600)),
        reclaimed: true,
        ..ice.clone()
    };
    assert!(store.mark_unavailable(&ice).await.is_ok());
    assert!(store.mark_unavailable(&reclaimed).await.is_ok());
    let soon = store.unavailable_offerings(now + Duration::from_secs(60)).await;
    assert!(
        matches!(&soon, Ok(l) if l.contains(&ice) && l.contains(&reclaimed)),
        "still unavailable within its TTL, and a reclaimed record of the same offering beside it: {soon:?}"
    );
    let later = store.unavailable_offerings(now + Duration::from_secs(181)).await;
    assert!(
        matches!(&later, Ok(l) if !l.contains(&ice) && l.contains(&reclaimed)),
        "available again after its TTL, the reclaimed record kept for its own: {later:?}"
    );

    // Events are handled once.
    let event = format!("event-{unique}");
    assert!(
        matches!(store.event_recorded(&event, now).await, Ok(false)),
        "an event never recorded is not"
    );
    assert!(
        matches!(
            store.record_event(&event, now, Duration::from_secs(3600)).await,
            Ok(true)
        ),
        "a new event is new"
    );
    assert!(
        matches!(
            store.record_event(&event, now, Duration::from_secs(3600)).await,
            Ok(false)
        ),
        "a seen event is not"
    );
    assert!(
        matches!(store.event_recorded(&event, now).await, Ok(true)),
        "a recorded event is known"
    );
    assert!(
        matches!(
            store.event_recorded(&event, now + Duration::from_secs(3601)).await,
            Ok(false)
        ),
        "and forgotten after its TTL"
    );

    // Backoffs: one per NodePool and EC2NodeClass, advanced by version, windows over kept.
    let pool = format!("pool-{unique}");
    let backoff = Backoff {
        nodepool: pool.clone(),
        node_class: "bad-sg".into(),
        failures: 1,
        registration_failures: 0,
        windows: 1,
        reason: FailureReason::Launch {
            error: "EC2NodeClass bad-sg selects no security group".into(),
        },
        until: epoch_millis(now + Duration::from_secs(60)),
        version: 0,
    };
    let b1 = store.create_backoff(&backoff).await;
    assert!(
        matches!(&b1, Ok(b) if b.version == 1),
        "a new backoff is version 1: {b1:?}"
    );
    assert!(
        is_conflict(&store.create_backoff(&backoff).await),
        "one backoff per NodePool and EC2NodeClass"
    );
    let other_class = Backoff {
        node_class: "other".into(),
        ..backoff.clone()
    };
    assert!(
        store.create_backoff(&other_class).await.is_ok(),
        "the same NodePool with another class is another backoff"
    );
    if let Ok(b1) = b1 {
        let next = Backoff {
            failures: 2,
            windows: 2,
            reason: FailureReason::NotRegistered {
                instance_id: Some("i-0abc".into()),
                detail: "the node did not register within 900s".into(),
            },
            until: epoch_millis(now - Duration::from_secs(1)),
            ..b1.clone()
        };
        let b2 = store.update_backoff(&next).await;
        assert!(
            matches!(&b2, Ok(b) if b.version == 2 && b.failures == 2),
            "an update bumps the version: {b2:?}"
        );
        assert!(
            is_conflict(&store.update_backoff(&next).await),
            "an update from a stale version is a conflict"
        );
        let listed = store.list_backoffs().await;
        assert!(
            matches!(&listed, Ok(l) if l.iter().any(|b| b.nodepool == pool && b.node_class == "bad-sg"
                && b.failures == 2 && b.reason == next.reason)),
            "the list shows the update, its window over included: {listed:?}"
        );
    }
    assert!(store.delete_backoff(&pool, "bad-sg").await.is_ok());
    assert!(
        store.delete_backoff(&pool, "bad-sg").await.is_ok(),
        "deleting a missing backoff succeeds"
    );
    let left = store.list_backoffs().await;
    assert!(
        matches!(&left, Ok(l) if !l.iter().any(|b| b.nodepool == pool && b.node_class == "bad-sg")
            && l.iter().any(|b| b.nodepool == pool && b.node_class == "other")),
        "a delete removes that pair only: {left:?}"
    );
    assert!(store.delete_backoff(&pool, "other").await.is_ok());
}
