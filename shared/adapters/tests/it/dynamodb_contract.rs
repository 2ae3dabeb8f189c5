//! The StateStore contract against DynamoDB on the local stack (moto).

use std::time::SystemTime;

use anyhow::Result;
use carpool::fakes::store_contract;
use carpool_adapters::dynamodb::DynamoStore;
use carpool_tests::{Stack, shared, unique};

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn the_dynamodb_store_keeps_the_state_store_contract() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let table = unique("carpool-state");
    let store = DynamoStore::new(stack.dynamodb().await?, &table, stack.cluster()?);
    store.create_table_if_missing().await?;
    store_contract(&store, &unique("run"), SystemTime::now()).await;
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn two_clusters_in_one_table_do_not_see_each_other() -> Result<()> {
    use carpool::ports::StateStore;
    let _stack = shared().await;
    let stack = Stack::load()?;
    let table = unique("carpool-state");
    let client = stack.dynamodb().await?;
    let a = DynamoStore::new(client.clone(), &table, "cluster-a");
    let b = DynamoStore::new(client, &table, "cluster-b");
    a.create_table_if_missing().await?;
    let now = SystemTime::now();
    let ttl = std::time::Duration::from_secs(60);
    a.acquire_lease("provisioner", "run-a", now, ttl).await?;
    b.acquire_lease("provisioner", "run-b", now, ttl).await?;
    Ok(())
}
