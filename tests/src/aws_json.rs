//! Calls to moto's AWS JSON-protocol APIs (EventBridge, SQS) over plain HTTP, without
//! their SDK crates: the tests need a handful of calls (PutRule, PutTargets, PutEvents,
//! CreateQueue, SendMessage, ReceiveMessage), and each SDK crate costs minutes to build.
//! moto does not check signatures: the `Authorization` header only names the service
//! (its credential scope), which is how moto's single server routes the call.

use anyhow::{Context, Result, bail};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::stack::Stack;

/// One call: `service` is the signing name (`events`, `sqs`), `target` the
/// `X-Amz-Target` (`AWSEvents.PutRule`, `AmazonSQS.ReceiveMessage`).
pub async fn call(stack: &Stack, service: &str, target: &str, body: &Value) -> Result<Value> {
    let endpoint = stack.aws_endpoint()?;
    let host = endpoint
        .strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .with_context(|| format!("AWS_ENDPOINT_URL {endpoint}: expected http://host:port"))?;
    let region = stack.region()?;
    let content_type = if service == "sqs" {
        "application/x-amz-json-1.0"
    } else {
        "application/x-amz-json-1.1"
    };
    let payload = body.to_string();
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\nX-Amz-Target: {target}\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/{region}/{service}/aws4_request, \
         SignedHeaders=host, Signature=0\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{payload}",
        payload.len()
    );
    let mut conn = TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to moto at {host}"))?;
    conn.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").context("an HTTP answer")?;
    let status = head.lines().next().unwrap_or_default().to_string();
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)?
    } else {
        body.to_string()
    };
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("{target} answered {status}: {body}");
    }
    if body.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&body).with_context(|| format!("{target} answered {body:?}"))
}

fn dechunk(body: &str) -> Result<String> {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n").context("a chunk size")?;
        let size = usize::from_str_radix(size.trim(), 16).context("a hex chunk size")?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(after.get(..size).context("a whole chunk")?);
        rest = after.get(size + 2..).unwrap_or_default();
    }
}
