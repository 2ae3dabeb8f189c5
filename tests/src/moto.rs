//! Resetting moto between tests, and seeding it again.
//!
//! `POST /moto-api/reset` clears every service's state, the seed included (VPC, subnets,
//! security group, EKS cluster, AMI parameter). [`reset_and_seed`] runs `infra/local/seed`
//! afterwards, which recreates them under new ids and rewrites the seed block of the env
//! file; it returns the [`Stack`] read again. A reset is seen by every test that shares
//! the stack: take [`crate::exclusive`] around it.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::stack::Stack;

/// Clears moto's state: `POST <AWS_ENDPOINT_URL>/moto-api/reset`.
pub async fn reset(stack: &Stack) -> Result<()> {
    let endpoint = stack.aws_endpoint()?;
    let host = endpoint
        .strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .with_context(|| format!("AWS_ENDPOINT_URL {endpoint}: expected http://host:port"))?;
    let mut conn = TcpStream::connect(host)
        .await
        .with_context(|| format!("connecting to moto at {host}"))?;
    let request =
        format!("POST /moto-api/reset HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).await?;
    let status = answer.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("moto reset answered {status:?}");
    }
    Ok(())
}

/// Runs `infra/local/seed` against the stack and reads the env file again.
pub async fn seed(stack: &Stack) -> Result<Stack> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../infra/local/seed");
    let state_dir = stack
        .path()
        .parent()
        .context("env file without a directory")?
        .to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&script)
            .env("CARPOOL_STATE", &state_dir)
            .output()
            .with_context(|| format!("running {}", script.display()))
    })
    .await??;
    if !out.status.success() {
        bail!(
            "infra/local/seed failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Stack::load_from(stack.path())
}

/// [`reset`], then [`seed`].
pub async fn reset_and_seed(stack: &Stack) -> Result<Stack> {
    reset(stack).await?;
    seed(stack).await
}
