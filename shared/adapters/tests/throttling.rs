//! A faulty endpoint is retried with backoff and surfaces as `Throttled` when retries run
//! out: a tiny HTTP server on 127.0.0.1 answers every DynamoDB call with a
//! `ThrottlingException`, and the store's call must fail typed after several attempts.
//! Needs no stack.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Result, bail, ensure};
use aws_config::{BehaviorVersion, Region};
use aws_credential_types::Credentials;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use carpool::ports::{StateStore, StoreError};
use carpool_adapters::dynamodb::DynamoStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The server stops after this many requests, or after this long without one.
const MAX_REQUESTS: usize = 20;
const IDLE: Duration = Duration::from_secs(10);
/// The client's attempts, first one included.
const ATTEMPTS: u32 = 3;

const BODY: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate exceeded"}"#;

/// Reads one HTTP request (headers, then a body of `content-length` bytes). False when the
/// client closed the connection first.
async fn read_request(stream: &mut TcpStream) -> Result<bool> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(false);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let headers = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let length: usize = headers
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(Ok(0), |v| v.trim().parse())?;
    while buf.len() < header_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(false);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(true)
}

/// Serves throttling errors on 127.0.0.1 until it has answered [`MAX_REQUESTS`] or sat
/// idle for [`IDLE`]; returns its URL and the count of requests it answered.
async fn throttling_server() -> Result<(String, Arc<AtomicUsize>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while seen.load(Ordering::SeqCst) < MAX_REQUESTS {
            let Ok(Ok((mut stream, _))) = tokio::time::timeout(IDLE, listener.accept()).await else {
                return;
            };
            // One request per connection: the answer closes it.
            if !matches!(read_request(&mut stream).await, Ok(true)) {
                continue;
            }
            seen.fetch_add(1, Ordering::SeqCst);
            let response = format!(
                "HTTP/1.1 400 Bad Request\r\n\
                 content-type: application/x-amz-json-1.0\r\n\
                 x-amzn-ErrorType: ThrottlingException\r\n\
                 x-amzn-RequestId: test-{n}\r\n\
                 content-length: {len}\r\n\
                 connection: close\r\n\r\n{BODY}",
                n = seen.load(Ordering::SeqCst),
                len = BODY.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    });
    Ok((url, count))
}

#[tokio::test]
async fn a_throttling_endpoint_is_retried_and_surfaces_as_throttled() -> Result<()> {
    let (url, requests) = throttling_server().await?;
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new("AKIDTEST", "secret", None, None, "test"))
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(ATTEMPTS)
                .with_initial_backoff(Duration::from_millis(5))
                .with_max_backoff(Duration::from_millis(50)),
        )
        .build();
    let store = DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(config), "carpool", "test");

    let result = tokio::time::timeout(Duration::from_secs(30), store.list_launches()).await?;
    match result {
        Err(StoreError::Throttled { what, .. }) => ensure!(what.contains("ThrottlingException"), "{what}"),
        other => bail!("expected Throttled, got {other:?}"),
    }
    let seen = requests.load(Ordering::SeqCst);
    ensure!(
        seen == ATTEMPTS as usize,
        "the server saw {seen} requests, expected {ATTEMPTS} (retried)"
    );
    Ok(())
}
