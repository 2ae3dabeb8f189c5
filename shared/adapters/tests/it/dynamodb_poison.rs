//! A poison item (one that does not read as its record) is skipped by the store's lists,
//! counted and logged with its key, and the other records are returned: one bad item must
//! not stop provisioning until someone deletes it by hand. The item is written straight
//! into DynamoDB on the local stack (moto), as a hand edit or a newer version would.

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::{Result, ensure};
use aws_sdk_dynamodb::types::AttributeValue;
use carpool::model::CapacityType;
use carpool::ports::{LaunchRecord, LaunchState, StateStore, epoch_millis};
use carpool_adapters::dynamodb::DynamoStore;
use carpool_tests::{Stack, shared, unique};

fn launch(id: &str) -> LaunchRecord {
    LaunchRecord {
        id: id.into(),
        instance_id: None,
        nodepool: "general".into(),
        instance_type: "m5.large".into(),
        zone: "us-east-1a".into(),
        capacity_type: CapacityType::Spot,
        pods: vec!["web/web-0".into()],
        launched_at: epoch_millis(SystemTime::now()),
        state: LaunchState::InFlight,
        reserved_for: None,
        labels: BTreeMap::new(),
        wave: None,
        release_by: None,
        version: 0,
    }
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_poison_launch_item_is_skipped_and_the_other_launches_still_list() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let table = unique("carpool-state");
    let client = stack.dynamodb().await?;
    let cluster = stack.cluster()?.to_string();
    let store = DynamoStore::new(client.clone(), &table, &cluster);
    store.create_table_if_missing().await?;
    store.create_launch(&launch("run-1-0")).await?;
    store.create_launch(&launch("run-1-2")).await?;
    // Between them in key order: an item whose data is not JSON, and one whose JSON is
    // not a launch record.
    for (sk, data) in [
        ("LAUNCH#run-1-1a", "{not json"),
        ("LAUNCH#run-1-1b", r#"{"id": 7, "state": "Exploded"}"#),
    ] {
        client
            .put_item()
            .table_name(&table)
            .item("cluster", AttributeValue::S(cluster.clone()))
            .item("sk", AttributeValue::S(sk.into()))
            .item("data", AttributeValue::S(data.into()))
            .item("version", AttributeValue::N("0".into()))
            .send()
            .await?;
    }

    let launches = store.list_launches().await?;
    let ids: Vec<&str> = launches.iter().map(|l| l.id.as_str()).collect();
    ensure!(ids == ["run-1-0", "run-1-2"], "listed {ids:?}");
    ensure!(
        store.poison_items_skipped() == 2,
        "skipped {}",
        store.poison_items_skipped()
    );
    // The poison items stay where they are (for someone to read), and every list skips
    // them again.
    ensure!(store.list_launches().await?.len() == 2);
    ensure!(store.poison_items_skipped() == 4);
    Ok(())
}
