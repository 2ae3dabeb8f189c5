//! EKS access against the local stack: `DescribeCluster` on moto, and a client built by
//! `EksAccess` talking to the real apiserver with an EKS token, which the local apiserver
//! does not accept (it answers 401), and logs that never show credentials or tokens.
//!
//! Start the stack first (`infra/local/up`).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use carpool::ports::{Cluster, ClusterError};
use carpool_adapters::cluster_info::DEFAULT_SERVICE_CIDR;
use carpool_adapters::eks::{EksAccess, EksError, Endpoint};
use carpool_adapters::kube_cluster::KubeCluster;
use carpool_tests::Stack;
use kube::config::Kubeconfig;

/// No call may take longer than this: an auth failure must surface, not hang.
const CALL: Duration = Duration::from_secs(30);

const SECRET_KEY: &str = "SecretKeySentinel0123456789abcdefGHIJKLMN";
const SESSION_TOKEN: &str = "SessionTokenSentinelZYXWVUTSRQ9876543210";

/// The SDK configuration for moto, with credentials whose secrets are easy to find.
async fn sdk_config(stack: &Stack) -> Result<SdkConfig> {
    let credentials = Credentials::new(
        stack.get("AWS_ACCESS_KEY_ID")?,
        SECRET_KEY,
        Some(SESSION_TOKEN.into()),
        None,
        "carpool-eks-test",
    );
    Ok(aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(stack.aws_endpoint()?)
        .region(Region::new(stack.region()?.to_string()))
        .credentials_provider(credentials)
        .load()
        .await)
}

/// The local apiserver's URL and CA, from the admin kubeconfig of the stack.
fn local_apiserver(stack: &Stack) -> Result<Endpoint> {
    let path = stack.get("KUBECONFIG")?;
    let kubeconfig = Kubeconfig::read_from(path).with_context(|| format!("reading {path}"))?;
    let cluster = kubeconfig
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .context("kubeconfig without a cluster")?;
    let url = cluster.server.clone().context("cluster without a server")?;
    let ca = cluster
        .certificate_authority_data
        .as_deref()
        .context("cluster without embedded CA")?;
    Ok(Endpoint {
        url,
        ca_pem: STANDARD.decode(ca)?,
    })
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn describe_cluster_on_moto_gives_the_endpoint_and_a_ca_that_is_not_pem() -> Result<()> {
    let stack = Stack::load()?;
    let access = EksAccess::new(&sdk_config(&stack).await?, stack.cluster()?)?;
    let endpoint = access.describe().await?;
    // moto makes up `https://<random>.<random>.<region>.eks.amazonaws.com/`.
    println!("moto's endpoint: {}", endpoint.url);
    ensure!(
        endpoint.url.starts_with("https://")
            && endpoint
                .url
                .contains(&format!(".{}.eks.amazonaws.com", stack.region()?)),
        "{endpoint:?}"
    );
    // Its CA is random bytes, so a client cannot be configured from it: the override exists
    // for this.
    match access.kube_config(&endpoint) {
        Err(EksError::Cluster { detail, .. }) => println!("moto's CA: {detail}"),
        other => bail!("moto's CA should not parse: {other:?}"),
    }
    Ok(())
}

/// What nodes need, from moto's DescribeCluster: its endpoint, its CA as it was given
/// (base64), and a service CIDR (moto's, or the default when it names none).
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn cluster_info_from_describe_cluster_has_endpoint_ca_and_service_cidr() -> Result<()> {
    let stack = Stack::load()?;
    let access = EksAccess::new(&sdk_config(&stack).await?, stack.cluster()?)?;
    let endpoint = access.describe().await?;
    let info = access.cluster_info().await?;
    println!("moto's cluster info: {info:?}");
    ensure!(info.name == stack.cluster()?, "{info:?}");
    ensure!(info.endpoint == endpoint.url, "{info:?}");
    ensure!(
        STANDARD.decode(&info.ca_base64)? == endpoint.ca_pem,
        "the CA is DescribeCluster's"
    );
    let (address, bits) = info.service_cidr.split_once('/').context("not a CIDR")?;
    ensure!(
        address.parse::<std::net::IpAddr>().is_ok() && bits.parse::<u8>().is_ok(),
        "{}",
        info.service_cidr
    );
    Ok(())
}

/// With an endpoint override (tests, a proxy), the override's URL and CA and the configured
/// service CIDR, EKS's default unless set.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn cluster_info_with_an_override_takes_its_endpoint_and_the_configured_cidr() -> Result<()> {
    let stack = Stack::load()?;
    let local = local_apiserver(&stack)?;
    let access = EksAccess::new(&sdk_config(&stack).await?, stack.cluster()?)?.with_endpoint_override(local.clone());
    let info = access.cluster_info().await?;
    ensure!(info.endpoint == local.url, "{info:?}");
    ensure!(STANDARD.decode(&info.ca_base64)? == local.ca_pem);
    ensure!(info.service_cidr == DEFAULT_SERVICE_CIDR, "{info:?}");
    let info = access.with_service_cidr("172.20.0.0/16").cluster_info().await?;
    ensure!(info.service_cidr == "172.20.0.0/16", "{info:?}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn describe_cluster_of_an_unknown_cluster_fails_typed() -> Result<()> {
    let stack = Stack::load()?;
    let access = EksAccess::new(&sdk_config(&stack).await?, "no-such-cluster")?;
    match access.describe().await {
        Err(EksError::Describe { cluster, .. }) => ensure!(cluster == "no-such-cluster"),
        other => bail!("expected a Describe error, got {other:?}"),
    }
    Ok(())
}

/// The apiserver sees the bearer token (it answers 401: an unknown token; without one it
/// would take the request as `system:anonymous` and answer 403), and TLS with the given CA
/// worked.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_client_from_eks_access_sends_the_token_and_a_401_surfaces_as_unauthorized() -> Result<()> {
    let stack = Stack::load()?;
    let access =
        EksAccess::new(&sdk_config(&stack).await?, stack.cluster()?)?.with_endpoint_override(local_apiserver(&stack)?);
    let client = tokio::time::timeout(CALL, access.client()).await??;
    let cluster = KubeCluster::new(client);
    match tokio::time::timeout(CALL, cluster.nodes()).await? {
        Err(e @ ClusterError::Unauthorized { .. }) => {
            // 401 "Unauthorized", not 403 "forbidden ... system:anonymous".
            let detail = carpool::error_chain::Chain(&e).to_string();
            ensure!(detail.ends_with(": Unauthorized"), "{detail}");
            ensure!(!detail.contains("k8s-aws-v1."), "{detail}");
            Ok(())
        }
        other => bail!("expected Unauthorized, got {other:?}"),
    }
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything is logged, at every level, while the SDK calls moto and the kube client
/// calls the apiserver; none of it shows the secret key, the session token or an EKS token.
/// (A current-thread runtime: the subscriber is the thread's default, and every task of
/// the test, kube's request buffer included, runs on this thread.)
#[tokio::test(flavor = "current_thread")]
#[ignore = "needs local stack (infra/local/up)"]
async fn no_credentials_or_tokens_appear_in_logs() -> Result<()> {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let stack = Stack::load()?;
    let sdk = sdk_config(&stack).await?;
    let access = EksAccess::new(&sdk, stack.cluster()?)?;
    access.describe().await?;
    let access = access.with_endpoint_override(local_apiserver(&stack)?);
    let client = tokio::time::timeout(CALL, access.client()).await??;
    let result = tokio::time::timeout(CALL, KubeCluster::new(client).nodes()).await?;
    ensure!(matches!(result, Err(ClusterError::Unauthorized { .. })), "{result:?}");
    let token = access.tokens().token().await?;

    let logs = String::from_utf8(buffer.0.lock().unwrap().clone())?;
    ensure!(
        logs.contains("signed a new EKS token"),
        "the capture works: {} bytes of logs",
        logs.len()
    );
    for (name, secret) in [
        ("secret access key", SECRET_KEY),
        ("session token", SESSION_TOKEN),
        ("EKS token prefix", "k8s-aws-v1."),
        ("EKS token", token.value.as_str()),
    ] {
        if let Some(at) = logs.find(secret) {
            let line_start = logs[..at].rfind('\n').map_or(0, |i| i + 1);
            let context = logs[line_start..at].chars().take(200).collect::<String>();
            bail!("the {name} is in the logs, in a line starting: {}", context);
        }
    }
    // The token's body without its prefix must not be there either.
    let body = token.value.trim_start_matches("k8s-aws-v1.");
    ensure!(!logs.contains(&body[..40]), "the token's body is in the logs");

    // Debug of the configuration types redacts them too.
    let shown = format!("{access:?} {:?} {token:?}", access.tokens());
    for secret in [SECRET_KEY, SESSION_TOKEN, "k8s-aws-v1."] {
        ensure!(!shown.contains(secret), "a secret is in Debug output: {shown}");
    }
    Ok(())
}
