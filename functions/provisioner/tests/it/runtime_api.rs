//! A fake Lambda Runtime API on 127.0.0.1, so a function's real binary runs as Lambda runs
//! it: the binary's runtime client (`lambda_runtime`, set `AWS_LAMBDA_RUNTIME_API` to
//! [`RuntimeApi::address`]) asks `GET /2018-06-01/runtime/invocation/next` for work and
//! posts the result to `.../invocation/<id>/response` or `.../invocation/<id>/error`.
//!
//! Each queued [`Invocation`] answers one `/next`, with the headers Lambda sends. A `/next`
//! when the queue is empty is held open and never answered, as Lambda freezes an idle
//! function; the test then kills the process. Every request is reported as a [`Call`], with
//! the instant it arrived.
//!
//! A minimal HTTP/1.1 server written for this (keep-alive, `Content-Length` or chunked
//! request bodies): hyper's server half is not in the dependency tree.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

const PREFIX: &str = "/2018-06-01/runtime";

/// One invocation to hand out.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// `Lambda-Runtime-Aws-Request-Id`.
    pub request_id: String,
    /// The event.
    pub payload: Vec<u8>,
    /// `Lambda-Runtime-Deadline-Ms` is this long after the event is handed out.
    pub timeout: Duration,
    /// `Lambda-Runtime-Invoked-Function-Arn`.
    pub function_arn: String,
}

/// A request the function made.
#[derive(Clone, Debug)]
pub enum Call {
    /// `GET .../invocation/next`, answered with this request id, or held (`None`).
    Next { at: Instant, served: Option<String> },
    /// `POST .../invocation/<id>/response`.
    Response {
        at: Instant,
        request_id: String,
        body: Vec<u8>,
    },
    /// `POST .../invocation/<id>/error`.
    Error { request_id: String, body: Vec<u8> },
    /// `POST .../init/error`: the function failed before its first `/next`.
    InitError { body: Vec<u8> },
    /// Anything else (answered 404).
    Other { method: String, path: String },
}

/// The server; stopped (with every connection it holds) when dropped.
pub struct RuntimeApi {
    address: String,
    calls: mpsc::UnboundedReceiver<Call>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl RuntimeApi {
    /// Listens on a free port of 127.0.0.1 and hands out `invocations` in order.
    pub async fn start(invocations: Vec<Invocation>) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let queue = Arc::new(Mutex::new(VecDeque::from(invocations)));
        let (tx, calls) = mpsc::unbounded_channel();
        let server = tokio::spawn(async move {
            // Dropping the JoinSet (when this task is aborted) aborts every connection.
            let mut connections = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let (queue, tx) = (queue.clone(), tx.clone());
                connections.spawn(async move {
                    if let Err(e) = serve(stream, &queue, &tx).await {
                        eprintln!("runtime api: connection: {e:#}");
                    }
                });
            }
        });
        Ok(RuntimeApi { address, calls, server })
    }

    /// `127.0.0.1:<port>`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The next request the function makes, if one comes within `timeout`.
    pub async fn call(&mut self, timeout: Duration) -> Option<Call> {
        tokio::time::timeout(timeout, self.calls.recv()).await.ok().flatten()
    }
}

/// A request: method, path, body.
struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

/// Reads one request; `None` when the client closed the connection.
async fn read_request(reader: &mut BufReader<TcpStream>) -> Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        bail!("bad request line {line:?}");
    };
    let (method, path) = (method.to_string(), path.to_string());
    let (mut length, mut chunked) = (0usize, false);
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            bail!("connection closed in the headers");
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().context("content-length")?;
            } else if name.eq_ignore_ascii_case("transfer-encoding") && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line).await?;
            let size_text = line.trim_end().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size_text, 16).with_context(|| format!("chunk size {line:?}"))?;
            let mut chunk = vec![0; size + 2]; // with its CRLF
            reader.read_exact(&mut chunk).await?;
            if size == 0 {
                // The CRLF that ends the body was read with the last chunk (no trailers).
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        body.resize(length, 0);
        reader.read_exact(&mut body).await?;
    }
    Ok(Some(Request { method, path, body }))
}

fn response(status: &str, headers: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

fn epoch_ms(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

async fn serve(
    stream: TcpStream,
    queue: &Mutex<VecDeque<Invocation>>,
    calls: &mpsc::UnboundedSender<Call>,
) -> Result<()> {
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader).await? {
        let at = Instant::now();
        let path = request.path.strip_prefix(PREFIX).unwrap_or(&request.path);
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let (call, reply) = match (request.method.as_str(), segments.as_slice()) {
            ("GET", ["invocation", "next"]) => {
                let next = queue
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .pop_front();
                let Some(invocation) = next else {
                    // Held: Lambda would freeze the function here.
                    let _ = calls.send(Call::Next { at, served: None });
                    std::future::pending::<()>().await;
                    return Ok(());
                };
                let deadline = epoch_ms(SystemTime::now() + invocation.timeout);
                let headers = [
                    ("Lambda-Runtime-Aws-Request-Id", invocation.request_id.clone()),
                    ("Lambda-Runtime-Deadline-Ms", deadline.to_string()),
                    ("Lambda-Runtime-Invoked-Function-Arn", invocation.function_arn.clone()),
                    (
                        "Lambda-Runtime-Trace-Id",
                        "Root=1-00000000-000000000000000000000000;Sampled=0".to_string(),
                    ),
                ];
                (
                    Call::Next {
                        at,
                        served: Some(invocation.request_id.clone()),
                    },
                    response("200 OK", &headers, &invocation.payload),
                )
            }
            ("POST", ["invocation", id, kind @ ("response" | "error")]) => {
                let (request_id, body) = (id.to_string(), request.body);
                let call = if *kind == "response" {
                    Call::Response { at, request_id, body }
                } else {
                    Call::Error { request_id, body }
                };
                (call, response("202 Accepted", &[], b"{\"status\":\"OK\"}"))
            }
            ("POST", ["init", "error"]) => (
                Call::InitError { body: request.body },
                response("202 Accepted", &[], b"{\"status\":\"OK\"}"),
            ),
            _ => (
                Call::Other {
                    method: request.method.clone(),
                    path: request.path.clone(),
                },
                response("404 Not Found", &[], b"{}"),
            ),
        };
        let _ = calls.send(call);
        let stream = reader.get_mut();
        stream.write_all(&reply).await?;
        stream.flush().await?;
    }
    Ok(())
}
