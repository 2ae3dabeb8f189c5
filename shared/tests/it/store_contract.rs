//! The StateStore contract against the in-memory fake.

use std::time::{Duration, SystemTime};

use carpool::fakes::{FakeStore, store_contract};
use carpool::ports::{StateStore, StoreError};

#[test]
fn the_fake_store_keeps_the_state_store_contract() {
    let store = FakeStore::new();
    pollster::block_on(store_contract(
        &store,
        "fake",
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    assert!(
        store.calls().iter().any(|c| c.starts_with("acquire LEASE#")),
        "calls are recorded"
    );
}

#[test]
fn injected_throttling_surfaces_as_throttled() {
    let store = FakeStore::new();
    store.fail_next(carpool::fakes::StoreErrorKind::Throttled);
    let r = pollster::block_on(store.list_launches());
    assert!(matches!(r, Err(StoreError::Throttled { .. })), "{r:?}");
    assert!(pollster::block_on(store.list_launches()).is_ok(), "one-shot");
}
