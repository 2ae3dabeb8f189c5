//! A faulty DynamoDB endpoint, made by a tiny HTTP server on 127.0.0.1 that answers from
//! a script: throttling is retried with backoff, a throttled call that then succeeds
//! returns its answer, throttling that lasts surfaces as `Throttled` when retries run
//! out, and a call that hangs is cut by the SDK's timeouts. Needs no stack.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Result, bail, ensure};
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_credential_types::Credentials;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use carpool::ports::{StateStore, StoreError};
use carpool_adapters::dynamodb::DynamoStore;
use carpool_adapters::sdk_timeouts::{sdk_timeouts, timeouts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The server stops after this many requests, or after this long without one.
const MAX_REQUESTS: usize = 20;
const IDLE: Duration = Duration::from_secs(10);
/// The client's attempts, first one included.
const ATTEMPTS: u32 = 3;

const THROTTLED: &str =
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Rate exceeded"}"#;
const EMPTY_QUERY: &str = r#"{"Count":0,"Items":[],"ScannedCount":0}"#;

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

/// How the server answers one request.
#[derive(Clone, Copy, Debug)]
enum Reply {
    /// A `ThrottlingException`.
    Throttle,
    /// An empty, successful Query.
    EmptyQuery,
    /// Nothing, ever: the connection stays open and silent.
    Hang,
}

/// Serves `script` on 127.0.0.1, one reply per request in order, then throttles, until it
/// has answered [`MAX_REQUESTS`] or sat idle for [`IDLE`]; returns its URL and the count
/// of requests it received.
async fn scripted_server(script: Vec<Reply>) -> Result<(String, Arc<AtomicUsize>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        let mut hung = Vec::new();
        while seen.load(Ordering::SeqCst) < MAX_REQUESTS {
            let Ok(Ok((mut stream, _))) = tokio::time::timeout(IDLE, listener.accept()).await else {
                return;
            };
            // One request per connection: the answer closes it.
            if !matches!(read_request(&mut stream).await, Ok(true)) {
                continue;
            }
            let n = seen.fetch_add(1, Ordering::SeqCst);
            let (status, error, body) = match script.get(n).copied().unwrap_or(Reply::Throttle) {
                Reply::Throttle => ("400 Bad Request", Some("ThrottlingException"), THROTTLED),
                Reply::EmptyQuery => ("200 OK", None, EMPTY_QUERY),
                Reply::Hang => {
                    // Kept open, never answered, until the server ends.
                    hung.push(stream);
                    continue;
                }
            };
            let error = error.map_or(String::new(), |e| format!("x-amzn-ErrorType: {e}\r\n"));
            let response = format!(
                "HTTP/1.1 {status}\r\n\
                 content-type: application/x-amz-json-1.0\r\n\
                 {error}\
                 x-amzn-RequestId: test-{n}\r\n\
                 content-length: {len}\r\n\
                 connection: close\r\n\r\n{body}",
                len = body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    });
    Ok((url, count))
}

/// A store on `url`, retrying `attempts` times in all, with `timeouts`.
fn store_on(url: String, attempts: u32, timeouts: TimeoutConfig) -> DynamoStore {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new("AKIDTEST", "secret", None, None, "test"))
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(attempts)
                .with_initial_backoff(Duration::from_millis(5))
                .with_max_backoff(Duration::from_millis(50)),
        )
        .timeout_config(timeouts)
        .build();
    DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(config), "carpool", "test")
}

#[tokio::test]
async fn a_throttling_endpoint_is_retried_and_surfaces_as_throttled() -> Result<()> {
    let (url, requests) = scripted_server(vec![]).await?;
    let store = store_on(url, ATTEMPTS, sdk_timeouts());

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

#[tokio::test]
async fn a_throttled_call_that_then_succeeds_returns_its_answer() -> Result<()> {
    let (url, requests) = scripted_server(vec![Reply::Throttle, Reply::Throttle, Reply::EmptyQuery]).await?;
    let store = store_on(url, ATTEMPTS, sdk_timeouts());
    let launches = tokio::time::timeout(Duration::from_secs(30), store.list_launches()).await??;
    ensure!(launches.is_empty());
    ensure!(requests.load(Ordering::SeqCst) == 3);
    Ok(())
}

#[tokio::test]
async fn a_hung_call_is_cut_by_its_attempt_timeout_and_retried() -> Result<()> {
    // The first attempt hangs; the SDK gives up on it after the attempt timeout, and the
    // retry gets the answer.
    let (url, requests) = scripted_server(vec![Reply::Hang, Reply::EmptyQuery]).await?;
    let store = store_on(
        url,
        ATTEMPTS,
        timeouts(Duration::from_millis(300), Duration::from_secs(5)),
    );
    let launches = tokio::time::timeout(Duration::from_secs(30), store.list_launches()).await??;
    ensure!(launches.is_empty());
    ensure!(requests.load(Ordering::SeqCst) == 2);
    Ok(())
}

#[tokio::test]
async fn a_call_that_always_hangs_fails_at_its_operation_timeout() -> Result<()> {
    let (url, _) = scripted_server(vec![Reply::Hang; MAX_REQUESTS]).await?;
    let store = store_on(
        url,
        ATTEMPTS,
        timeouts(Duration::from_millis(200), Duration::from_millis(500)),
    );
    // The outer timeout only keeps a broken test from hanging CI.
    match tokio::time::timeout(Duration::from_secs(30), store.list_launches()).await? {
        Err(StoreError::Api(e)) => ensure!(format!("{e:?}").contains("TimeoutError"), "{e:?}"),
        other => bail!("expected a timeout, got {other:?}"),
    }
    Ok(())
}

#[test]
fn every_aws_call_has_an_attempt_and_an_operation_timeout() {
    let t = sdk_timeouts();
    assert_eq!(
        t.operation_attempt_timeout(),
        Some(carpool_adapters::sdk_timeouts::ATTEMPT)
    );
    assert_eq!(t.operation_timeout(), Some(carpool_adapters::sdk_timeouts::OPERATION));
    assert!(t.connect_timeout().is_some());
}
