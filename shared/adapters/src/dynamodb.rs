//! The `StateStore` on DynamoDB: one table, partition key `cluster` (the cluster name),
//! sort key `sk` with a prefix per kind (`LEASE#`, `LAUNCH#`, `NODE#`, `DISRUPT#`, `ICE#`,
//! `EVENT#`, `BACKOFF#`). Each item holds its record as JSON in `data`, a `version` for conditional
//! updates, and `expires_at` (epoch seconds) for the kinds with a TTL, which is the table's
//! TTL attribute. DynamoDB deletes expired items lazily, so reads check `expires_at` too.
//!
//! Every write that could race carries a condition; a failed condition is
//! `StoreError::Conflict`. Throttling is retried by the SDK with backoff and surfaces as
//! `StoreError::Throttled` when retries run out.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use carpool::ports::{
    Backoff, DisruptionRecord, LaunchRecord, Lease, NodeRecord, StateStore, StoreError, UnavailableOffering,
    epoch_millis, sort_key,
};
use carpool::run::provision::metrics::poison_item_metrics;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The TTL attribute of the table.
pub const TTL_ATTRIBUTE: &str = "expires_at";

/// The state store of one cluster in one table.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: Client,
    table: String,
    cluster: String,
    /// Items skipped because they do not read, since the store was built.
    poison: Arc<AtomicU64>,
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn epoch_secs(t: SystemTime) -> i64 {
    epoch_millis(t) / 1000
}

/// Maps an SDK error: failed conditions are conflicts, throttling is throttling.
fn map_err<E, R>(key: &str, e: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let code = e.code().unwrap_or_default().to_string();
    match code.as_str() {
        "ConditionalCheckFailedException" => StoreError::Conflict {
            key: key.into(),
            detail: "condition failed".into(),
        },
        "ThrottlingException" | "ProvisionedThroughputExceededException" | "RequestLimitExceeded" => {
            StoreError::Throttled {
                what: format!("{key}: {code}"),
                source: Box::new(e),
            }
        }
        _ => StoreError::Api(Box::new(e)),
    }
}

fn to_json<T: Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Api(Box::new(e)))
}

fn from_item<T: DeserializeOwned>(item: &HashMap<String, AttributeValue>) -> Result<T, StoreError> {
    let data = item
        .get("data")
        .and_then(|v| v.as_s().ok())
        .ok_or_else(|| StoreError::Api("item without data".into()))?;
    let mut value: serde_json::Value = serde_json::from_str(data).map_err(|e| StoreError::Api(Box::new(e)))?;
    if let Some(version) = item
        .get("version")
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        value["version"] = version.into();
    }
    serde_json::from_value(value).map_err(|e| StoreError::Api(Box::new(e)))
}

impl DynamoStore {
    /// A store for `cluster` in `table`.
    pub fn new(client: Client, table: impl Into<String>, cluster: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: table.into(),
            cluster: cluster.into(),
            poison: Arc::default(),
        }
    }

    /// Items that lists skipped because they do not read (poison items), since the store
    /// was built.
    pub fn poison_items_skipped(&self) -> u64 {
        self.poison.load(Ordering::Relaxed)
    }

    /// The records of `items` that read. An item that does not (a hand edit, a record
    /// written by a newer version, a truncated write) is skipped, with an error log naming
    /// its key and the `PoisonItems` metric, so that one bad item does not stop every run
    /// until someone deletes it. What skipping costs: a launch record skipped is not
    /// counted in flight, so its pods may be launched for once more; its instance is
    /// followed up by its tags as any other.
    fn readable<T: DeserializeOwned>(&self, items: &[HashMap<String, AttributeValue>]) -> Vec<T> {
        let mut out = Vec::with_capacity(items.len());
        let mut skipped = 0;
        for item in items {
            match from_item(item) {
                Ok(record) => out.push(record),
                Err(e) => {
                    skipped += 1;
                    let key = item.get("sk").and_then(|v| v.as_s().ok()).map_or("?", String::as_str);
                    tracing::error!(
                        cluster = %self.cluster,
                        key,
                        error = %carpool::error_chain::Chain(&e),
                        "a state item does not read; skipped (delete or fix it)"
                    );
                }
            }
        }
        if skipped > 0 {
            self.poison.fetch_add(skipped as u64, Ordering::Relaxed);
            // EMF goes to stdout as a raw line; CloudWatch turns it into the metric.
            println!(
                "{}",
                poison_item_metrics(&self.cluster, epoch_millis(SystemTime::now()), skipped)
            );
        }
        out
    }

    /// Creates the table with its TTL, if it does not exist (for tests and local runs; the
    /// SAM template creates the real one).
    pub async fn create_table_if_missing(&self) -> Result<(), StoreError> {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TimeToLiveSpecification,
        };
        let exists = self
            .client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
            .is_ok();
        if exists {
            return Ok(());
        }
        let attr = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
        };
        let key = |name: &str, kind| KeySchemaElement::builder().attribute_name(name).key_type(kind).build();
        let built = (|| {
            Ok::<_, aws_sdk_dynamodb::error::BuildError>((
                attr("cluster")?,
                attr("sk")?,
                key("cluster", KeyType::Hash)?,
                key("sk", KeyType::Range)?,
                TimeToLiveSpecification::builder()
                    .attribute_name(TTL_ATTRIBUTE)
                    .enabled(true)
                    .build()?,
            ))
        })()
        .map_err(|e| StoreError::Api(Box::new(e)))?;
        let (a1, a2, k1, k2, ttl) = built;
        self.client
            .create_table()
            .table_name(&self.table)
            .attribute_definitions(a1)
            .attribute_definitions(a2)
            .key_schema(k1)
            .key_schema(k2)
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await
            .map_err(|e| map_err(&self.table, e))?;
        self.client
            .update_time_to_live()
            .table_name(&self.table)
            .time_to_live_specification(ttl)
            .send()
            .await
            .map_err(|e| map_err(&self.table, e))?;
        Ok(())
    }

    fn key(&self, sk: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([("cluster".to_string(), s(&self.cluster)), ("sk".to_string(), s(sk))])
    }

    async fn create<T: Serialize + DeserializeOwned>(&self, sk: String, record: &T) -> Result<T, StoreError> {
        let mut item = self.key(&sk);
        item.insert("data".into(), s(to_json(record)?));
        item.insert("version".into(), n(1));
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item.clone()))
            .condition_expression("attribute_not_exists(sk)")
            .send()
            .await
            .map_err(|e| map_err(&sk, e))?;
        from_item(&item)
    }

    async fn update<T: Serialize + DeserializeOwned>(
        &self,
        sk: String,
        record: &T,
        version: u64,
    ) -> Result<T, StoreError> {
        let mut item = self.key(&sk);
        item.insert("data".into(), s(to_json(record)?));
        item.insert("version".into(), n(version + 1));
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item.clone()))
            .condition_expression("version = :expected")
            .expression_attribute_values(":expected", n(version))
            .send()
            .await
            .map_err(|e| map_err(&sk, e))?;
        from_item(&item)
    }

    /// Every item under a prefix, across pages.
    async fn query(&self, prefix: &str) -> Result<Vec<HashMap<String, AttributeValue>>, StoreError> {
        let mut out = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("#c = :cluster AND begins_with(sk, :prefix)")
                .expression_attribute_names("#c", "cluster")
                .expression_attribute_values(":cluster", s(&self.cluster))
                .expression_attribute_values(":prefix", s(prefix))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| map_err(prefix, e))?;
            out.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }

    async fn list<T: DeserializeOwned>(&self, prefix: &str) -> Result<Vec<T>, StoreError> {
        Ok(self.readable(&self.query(prefix).await?))
    }

    async fn delete(&self, sk: String) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key(&sk)))
            .send()
            .await
            .map_err(|e| map_err(&sk, e))?;
        Ok(())
    }

    async fn put_lease(
        &self,
        lease: &Lease,
        condition: &str,
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<Lease, StoreError> {
        let sk = sort_key::lease(&lease.job);
        let mut item = self.key(&sk);
        item.insert("data".into(), s(to_json(lease)?));
        item.insert("owner".into(), s(&lease.owner));
        item.insert(TTL_ATTRIBUTE.into(), n(lease.expires_at / 1000));
        item.insert("expires_ms".into(), n(lease.expires_at));
        let mut req = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .expression_attribute_names("#o", "owner");
        for (k, v) in values {
            req = req.expression_attribute_values(k, v);
        }
        req.send().await.map_err(|e| map_err(&sk, e))?;
        Ok(lease.clone())
    }
}

impl StateStore for DynamoStore {
    async fn acquire_lease(&self, job: &str, owner: &str, now: SystemTime, ttl: Duration) -> Result<Lease, StoreError> {
        let lease = Lease {
            job: job.into(),
            owner: owner.into(),
            expires_at: epoch_millis(now + ttl),
        };
        self.put_lease(
            &lease,
            "attribute_not_exists(sk) OR #o = :owner OR expires_ms <= :now",
            vec![(":owner", s(owner)), (":now", n(epoch_millis(now)))],
        )
        .await
        .map_err(|e| match e {
            StoreError::Conflict { key, .. } => StoreError::Conflict {
                key,
                detail: "held by another runner".into(),
            },
            other => other,
        })
    }

    async fn renew_lease(&self, lease: &Lease, now: SystemTime, ttl: Duration) -> Result<Lease, StoreError> {
        let renewed = Lease {
            expires_at: epoch_millis(now + ttl),
            ..lease.clone()
        };
        self.put_lease(&renewed, "#o = :owner", vec![(":owner", s(&lease.owner))])
            .await
    }

    async fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        let sk = sort_key::lease(&lease.job);
        self.client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key(&sk)))
            .condition_expression("attribute_not_exists(sk) OR #o = :owner")
            .expression_attribute_names("#o", "owner")
            .expression_attribute_values(":owner", s(&lease.owner))
            .send()
            .await
            .map_err(|e| map_err(&sk, e))?;
        Ok(())
    }

    async fn create_launch(&self, record: &LaunchRecord) -> Result<LaunchRecord, StoreError> {
        self.create(sort_key::launch(&record.id), record).await
    }

    async fn update_launch(&self, record: &LaunchRecord) -> Result<LaunchRecord, StoreError> {
        self.update(sort_key::launch(&record.id), record, record.version).await
    }

    async fn list_launches(&self) -> Result<Vec<LaunchRecord>, StoreError> {
        self.list(sort_key::LAUNCHES).await
    }

    async fn delete_launch(&self, id: &str) -> Result<(), StoreError> {
        self.delete(sort_key::launch(id)).await
    }

    async fn create_node(&self, record: &NodeRecord) -> Result<NodeRecord, StoreError> {
        self.create(sort_key::node(&record.instance_id), record).await
    }

    async fn list_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.list(sort_key::NODES).await
    }

    async fn delete_node(&self, instance_id: &str) -> Result<(), StoreError> {
        self.delete(sort_key::node(instance_id)).await
    }

    async fn create_disruption(&self, record: &DisruptionRecord) -> Result<DisruptionRecord, StoreError> {
        self.create(sort_key::disruption(&record.instance_id), record).await
    }

    async fn update_disruption(&self, record: &DisruptionRecord) -> Result<DisruptionRecord, StoreError> {
        self.update(sort_key::disruption(&record.instance_id), record, record.version)
            .await
    }

    async fn list_disruptions(&self) -> Result<Vec<DisruptionRecord>, StoreError> {
        self.list(sort_key::DISRUPTIONS).await
    }

    async fn delete_disruption(&self, instance_id: &str) -> Result<(), StoreError> {
        self.delete(sort_key::disruption(instance_id)).await
    }

    async fn mark_unavailable(&self, o: &UnavailableOffering) -> Result<(), StoreError> {
        let sk = sort_key::unavailable(o);
        let mut item = self.key(&sk);
        item.insert("data".into(), s(to_json(o)?));
        item.insert(TTL_ATTRIBUTE.into(), n(o.until / 1000));
        item.insert("expires_ms".into(), n(o.until));
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| map_err(&sk, e))?;
        Ok(())
    }

    async fn unavailable_offerings(&self, now: SystemTime) -> Result<Vec<UnavailableOffering>, StoreError> {
        let now_ms = epoch_millis(now);
        let live: Vec<_> = self
            .query(sort_key::UNAVAILABLE)
            .await?
            .into_iter()
            .filter(|i| {
                i.get("expires_ms")
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_none_or(|e| e > now_ms)
            })
            .collect();
        Ok(self.readable(&live))
    }

    async fn create_backoff(&self, backoff: &Backoff) -> Result<Backoff, StoreError> {
        self.create(sort_key::backoff(&backoff.nodepool, &backoff.node_class), backoff)
            .await
    }

    async fn update_backoff(&self, backoff: &Backoff) -> Result<Backoff, StoreError> {
        self.update(
            sort_key::backoff(&backoff.nodepool, &backoff.node_class),
            backoff,
            backoff.version,
        )
        .await
    }

    async fn list_backoffs(&self) -> Result<Vec<Backoff>, StoreError> {
        self.list(sort_key::BACKOFFS).await
    }

    async fn delete_backoff(&self, nodepool: &str, node_class: &str) -> Result<(), StoreError> {
        self.delete(sort_key::backoff(nodepool, node_class)).await
    }

    async fn event_recorded(&self, id: &str, now: SystemTime) -> Result<bool, StoreError> {
        let sk = sort_key::event(id);
        let answer = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key(&sk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_err(&sk, e))?;
        // DynamoDB deletes expired items lazily: an item past its TTL is not recorded.
        let now_secs = epoch_secs(now);
        Ok(answer.item.is_some_and(|item| {
            item.get(TTL_ATTRIBUTE)
                .and_then(|v| v.as_n().ok())
                .and_then(|v| v.parse::<i64>().ok())
                .is_none_or(|expires| expires > now_secs)
        }))
    }

    async fn record_event(&self, id: &str, now: SystemTime, ttl: Duration) -> Result<bool, StoreError> {
        let sk = sort_key::event(id);
        let mut item = self.key(&sk);
        item.insert("data".into(), s(to_json(&serde_json::json!({"id": id}))?));
        item.insert(TTL_ATTRIBUTE.into(), n(epoch_secs(now + ttl)));
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(sk) OR expires_at <= :now")
            .expression_attribute_values(":now", n(epoch_secs(now)))
            .send()
            .await;
        match result.map_err(|e| map_err(&sk, e)) {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_is_read_back_with_its_stored_version() {
        let item = HashMap::from([
            ("data".to_string(), s(r#"{"job":"p","owner":"o","expires_at":5}"#)),
            ("version".to_string(), n(3)),
        ]);
        let lease: Lease = from_item(&item).unwrap();
        assert_eq!(lease.owner, "o");
    }
}
