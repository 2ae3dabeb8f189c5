//! Access to an EKS cluster's Kubernetes API: the endpoint and CA from `DescribeCluster`
//! (or an override), and a `kube::Client` that authenticates with an EKS bearer token
//! (see [`crate::eks_token`]) and refreshes it before it runs out; and what nodes need to
//! join the cluster ([`ClusterInfo`]).
//!
//! How the token reaches the requests: a tower layer ([`BearerLayer`]) on the client's
//! service sets `Authorization: Bearer <token>` on each request from a cached token, and
//! signs a new one when less than [`REFRESH_MARGIN`] of it remains. The alternative, a new
//! client whenever the token gets old, would make every holder of a client (the ports,
//! the handlers) check its age and swap it; the layer keeps one client for the life of a
//! Lambda container. kube's own `AuthInfo` cannot do this: its refreshable tokens come
//! from an exec plugin or a file, and a Lambda has no `aws` binary to exec.
//!
//! The refresh happens in the layer's `poll_ready`, which may wait (credentials may come
//! from the network); `call` then uses the token ready. A failed refresh does not fail
//! `poll_ready`, which would close kube's request buffer for good: the error is handed to
//! the next request instead, and the refresh is tried again on the request after it.
//!
//! Neither the token nor the credentials are ever logged; the header is marked sensitive.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use aws_config::SdkConfig;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use carpool::ports::Clock;
use http::header::AUTHORIZATION;
use http::{HeaderValue, Request};
use tower_layer::Layer;
use tower_service::Service;

use crate::clock::TokioClock;
use crate::cluster_info::{ClusterInfo, DEFAULT_SERVICE_CIDR};
use crate::eks_token::{self, Token};

/// A token is signed again when less than this much of its life remains.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);
/// How long the client waits to connect to the apiserver.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the client waits for an answer. Lambdas run for minutes at most, and every
/// call Carpool makes is a short request; a watch must ask the apiserver for a
/// `timeoutSeconds` below this.
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the client waits to send a request.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// EKS access failed.
#[derive(Debug, thiserror::Error)]
pub enum EksError {
    /// `DescribeCluster` failed.
    #[error("describing EKS cluster {cluster}")]
    Describe {
        /// The cluster.
        cluster: String,
        /// The SDK's error.
        #[source]
        source: BoxError,
    },
    /// The cluster has no endpoint or CA yet (it is still being created), or one is invalid.
    #[error("EKS cluster {cluster}: {detail}")]
    Cluster {
        /// The cluster.
        cluster: String,
        /// What is missing or wrong.
        detail: String,
    },
    /// The SDK configuration lacks something this needs.
    #[error("AWS configuration: {0}")]
    Config(String),
    /// The credentials could not be loaded.
    #[error("loading AWS credentials")]
    Credentials(#[source] aws_credential_types::provider::error::CredentialsError),
    /// The token could not be signed.
    #[error("signing the EKS token")]
    Token(#[source] eks_token::TokenError),
    /// The kube client could not be built.
    #[error("building the kube client")]
    Kube(#[source] kube::Error),
}

/// Where the apiserver is and how to trust it.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The apiserver's URL, e.g. `https://ABC.gr7.eu-west-1.eks.amazonaws.com`.
    pub url: String,
    /// The cluster CA's certificate(s), PEM.
    pub ca_pem: Vec<u8>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("ca_pem_bytes", &self.ca_pem.len())
            .finish()
    }
}

/// Tokens for one cluster: the cached one while it has more than [`REFRESH_MARGIN`] left,
/// else a new one signed with fresh credentials. Clones share the cache.
#[derive(Clone)]
pub struct TokenSource {
    cluster: String,
    region: String,
    credentials: SharedCredentialsProvider,
    clock: Arc<dyn Clock>,
    cached: Arc<Mutex<Option<Token>>>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("cluster", &self.cluster)
            .field("region", &self.region)
            .field("credentials", &"<provider>")
            .field("token", &"<redacted>")
            .finish()
    }
}

impl TokenSource {
    /// Tokens for `cluster` in `region`, signed with credentials from `credentials` at the
    /// time `clock` gives.
    pub fn new(
        cluster: impl Into<String>,
        region: impl Into<String>,
        credentials: impl ProvideCredentials + 'static,
        clock: Arc<dyn Clock>,
    ) -> Self {
        TokenSource {
            cluster: cluster.into(),
            region: region.into(),
            credentials: SharedCredentialsProvider::new(credentials),
            clock,
            cached: Arc::new(Mutex::new(None)),
        }
    }

    /// The cached token, if more than [`REFRESH_MARGIN`] of it remains.
    pub fn cached(&self) -> Option<Token> {
        let now = self.clock.now();
        let guard = self.cached.lock().ok()?;
        guard
            .as_ref()
            .filter(|t| {
                t.expires_at
                    .duration_since(now)
                    .is_ok_and(|left| left >= REFRESH_MARGIN)
            })
            .cloned()
    }

    /// A token with more than [`REFRESH_MARGIN`] left: the cached one, or a new one.
    pub async fn token(&self) -> Result<Token, EksError> {
        match self.cached() {
            Some(t) => Ok(t),
            None => self.refresh().await,
        }
    }

    /// Signs a new token with fresh credentials and caches it. It expires after
    /// [`eks_token::TOKEN_LIFETIME`], or when the credentials do if that is sooner.
    /// Two concurrent refreshes both sign; the later one stays cached, which is harmless.
    pub async fn refresh(&self) -> Result<Token, EksError> {
        let credentials = self
            .credentials
            .provide_credentials()
            .await
            .map_err(EksError::Credentials)?;
        let now = self.clock.now();
        // `eks_token::token` signs without a log subscriber: aws-sigv4 would log the session
        // token of the presigned URL at TRACE level.
        let mut token = eks_token::token(&credentials, &self.cluster, &self.region, now).map_err(EksError::Token)?;
        if let Some(expiry) = credentials.expiry() {
            token.expires_at = token.expires_at.min(expiry);
        }
        tracing::debug!(cluster = %self.cluster, expires_at = ?token.expires_at, "signed a new EKS token");
        if let Ok(mut guard) = self.cached.lock() {
            *guard = Some(token.clone());
        }
        Ok(token)
    }
}

/// The `Authorization` header of a token, marked sensitive.
fn bearer_header(token: &Token) -> Result<HeaderValue, EksError> {
    let mut value = HeaderValue::try_from(format!("Bearer {}", token.value))
        .map_err(|_| EksError::Config("the token is not a valid header value".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

/// A tower layer that sets `Authorization: Bearer <EKS token>` on every request.
#[derive(Clone, Debug)]
pub struct BearerLayer {
    tokens: TokenSource,
}

impl BearerLayer {
    /// The layer over `tokens`.
    pub fn new(tokens: TokenSource) -> Self {
        BearerLayer { tokens }
    }
}

impl<S> Layer<S> for BearerLayer {
    type Service = Bearer<S>;

    fn layer(&self, inner: S) -> Bearer<S> {
        Bearer {
            inner,
            tokens: self.tokens.clone(),
            refreshing: None,
            ready: None,
        }
    }
}

type Refresh = Pin<Box<dyn Future<Output = Result<Token, EksError>> + Send>>;

/// The service of [`BearerLayer`].
pub struct Bearer<S> {
    inner: S,
    tokens: TokenSource,
    refreshing: Option<Refresh>,
    /// What the next `call` uses: the header, or why there is none.
    ready: Option<Result<HeaderValue, EksError>>,
}

impl<S> std::fmt::Debug for Bearer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bearer")
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<Request<B>> for Bearer<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.ready.is_none() {
            if self.refreshing.is_none() {
                if let Some(token) = self.tokens.cached() {
                    self.ready = Some(bearer_header(&token));
                } else {
                    let tokens = self.tokens.clone();
                    self.refreshing = Some(Box::pin(async move { tokens.refresh().await }));
                }
            }
            if let Some(refresh) = self.refreshing.as_mut() {
                let result = ready!(refresh.as_mut().poll(cx));
                self.refreshing = None;
                self.ready = Some(result.and_then(|t| bearer_header(&t)));
            }
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        match self.ready.take() {
            Some(Ok(header)) => {
                request.headers_mut().insert(AUTHORIZATION, header);
                let response = self.inner.call(request);
                Box::pin(async move { response.await.map_err(Into::into) })
            }
            Some(Err(e)) => Box::pin(std::future::ready(Err(e.into()))),
            None => Box::pin(std::future::ready(Err("called before poll_ready".into()))),
        }
    }
}

/// The service CIDR of a cluster's network config: IPv4, else IPv6, else `fallback`.
fn service_cidr<'a>(
    network: Option<&'a aws_sdk_eks::types::KubernetesNetworkConfigResponse>,
    fallback: &'a str,
) -> &'a str {
    network
        .and_then(|n| n.service_ipv4_cidr().or_else(|| n.service_ipv6_cidr()))
        .unwrap_or(fallback)
}

/// Access to one EKS cluster: where its apiserver is, and clients for it.
#[derive(Clone, Debug)]
pub struct EksAccess {
    cluster: String,
    eks: aws_sdk_eks::Client,
    tokens: TokenSource,
    endpoint_override: Option<Endpoint>,
    service_cidr: String,
}

impl EksAccess {
    /// Access to `cluster` with the SDK configuration's region and credential chain.
    pub fn new(sdk: &SdkConfig, cluster: impl Into<String>) -> Result<Self, EksError> {
        let cluster = cluster.into();
        let region = sdk
            .region()
            .ok_or_else(|| EksError::Config("no region".into()))?
            .to_string();
        let credentials = sdk
            .credentials_provider()
            .ok_or_else(|| EksError::Config("no credentials provider".into()))?;
        let tokens = TokenSource::new(cluster.clone(), region, credentials, Arc::new(TokioClock));
        Ok(EksAccess {
            eks: aws_sdk_eks::Client::new(sdk),
            cluster,
            tokens,
            endpoint_override: None,
            service_cidr: DEFAULT_SERVICE_CIDR.to_string(),
        })
    }

    /// Uses `endpoint` instead of what `DescribeCluster` says (tests, private endpoints
    /// reached through a proxy; moto's CA is random bytes).
    pub fn with_endpoint_override(mut self, endpoint: Endpoint) -> Self {
        self.endpoint_override = Some(endpoint);
        self
    }

    /// The service CIDR [`EksAccess::cluster_info`] gives when `DescribeCluster` names none
    /// or the endpoint is overridden (default [`DEFAULT_SERVICE_CIDR`], EKS's own default).
    pub fn with_service_cidr(mut self, cidr: impl Into<String>) -> Self {
        self.service_cidr = cidr.into();
        self
    }

    /// The token source the clients use.
    pub fn tokens(&self) -> &TokenSource {
        &self.tokens
    }

    /// The cluster as `DescribeCluster` gives it.
    async fn describe_cluster(&self) -> Result<aws_sdk_eks::types::Cluster, EksError> {
        let out = self
            .eks
            .describe_cluster()
            .name(&self.cluster)
            .send()
            .await
            .map_err(|e| EksError::Describe {
                cluster: self.cluster.clone(),
                source: Box::new(e),
            })?;
        out.cluster.ok_or_else(|| self.missing("cluster"))
    }

    fn missing(&self, what: &str) -> EksError {
        EksError::Cluster {
            cluster: self.cluster.clone(),
            detail: format!("no {what} (is the cluster still being created?)"),
        }
    }

    /// The endpoint URL and the base64 CA of a described cluster.
    fn endpoint_and_ca<'c>(&self, cluster: &'c aws_sdk_eks::types::Cluster) -> Result<(&'c str, &'c str), EksError> {
        let url = cluster.endpoint().ok_or_else(|| self.missing("endpoint"))?;
        let ca = cluster
            .certificate_authority()
            .and_then(|c| c.data())
            .ok_or_else(|| self.missing("certificate authority"))?;
        Ok((url, ca.trim()))
    }

    /// The apiserver's endpoint and CA, as `DescribeCluster` gives them (not the override).
    pub async fn describe(&self) -> Result<Endpoint, EksError> {
        let cluster = self.describe_cluster().await?;
        let (url, ca) = self.endpoint_and_ca(&cluster)?;
        let ca_pem = STANDARD.decode(ca).map_err(|e| EksError::Cluster {
            cluster: self.cluster.clone(),
            detail: format!("certificate authority is not base64: {e}"),
        })?;
        Ok(Endpoint {
            url: url.to_string(),
            ca_pem,
        })
    }

    /// What nodes need to join the cluster. With an endpoint override: its URL and CA,
    /// and the configured service CIDR ([`EksAccess::with_service_cidr`]). Otherwise
    /// `DescribeCluster`'s endpoint, CA and `kubernetesNetworkConfig.serviceIpv4Cidr`
    /// (or `serviceIpv6Cidr` for an IPv6 cluster), the configured CIDR if it names none,
    /// and the control plane's Kubernetes `version`.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, EksError> {
        if let Some(e) = &self.endpoint_override {
            return Ok(ClusterInfo::new(
                &self.cluster,
                &e.url,
                STANDARD.encode(&e.ca_pem),
                &self.service_cidr,
            ));
        }
        let cluster = self.describe_cluster().await?;
        let (url, ca) = self.endpoint_and_ca(&cluster)?;
        let cidr = service_cidr(cluster.kubernetes_network_config(), &self.service_cidr);
        let info = ClusterInfo::new(&self.cluster, url, ca, cidr);
        Ok(match cluster.version() {
            Some(v) => info.with_kubernetes_version(v),
            None => info,
        })
    }

    /// The endpoint clients use: the override, else `DescribeCluster`'s.
    pub async fn endpoint(&self) -> Result<Endpoint, EksError> {
        match &self.endpoint_override {
            Some(e) => Ok(e.clone()),
            None => self.describe().await,
        }
    }

    /// The kube configuration for `endpoint`: its CA, no retries (kube 5 otherwise retries
    /// 429, 503 and 504 for minutes, and a 429 is how the Eviction API says a PDB blocks),
    /// and the timeouts above. It has no credentials; [`BearerLayer`] adds them.
    pub fn kube_config(&self, endpoint: &Endpoint) -> Result<kube::Config, EksError> {
        let bad = |detail: String| EksError::Cluster {
            cluster: self.cluster.clone(),
            detail,
        };
        let url = endpoint
            .url
            .parse::<http::Uri>()
            .map_err(|e| bad(format!("endpoint {}: {e}", endpoint.url)))?;
        let certs = pem::parse_many(&endpoint.ca_pem)
            .map_err(|e| bad(format!("certificate authority is not PEM: {e}")))?
            .into_iter()
            .filter(|p| p.tag() == "CERTIFICATE")
            .map(pem::Pem::into_contents)
            .collect::<Vec<_>>();
        if certs.is_empty() {
            return Err(bad("certificate authority holds no certificate".into()));
        }
        let mut config = kube::Config::new(url);
        config.root_cert = Some(certs);
        config.default_retry = false;
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.read_timeout = Some(READ_TIMEOUT);
        config.write_timeout = Some(WRITE_TIMEOUT);
        Ok(config)
    }

    /// A client for the cluster whose requests carry a fresh EKS token. Build it once per
    /// Lambda container; it refreshes its token itself. Needs a tokio runtime.
    pub async fn client(&self) -> Result<kube::Client, EksError> {
        let endpoint = self.endpoint().await?;
        let config = self.kube_config(&endpoint)?;
        let builder = kube::client::ClientBuilder::try_from(config).map_err(EksError::Kube)?;
        Ok(builder.with_layer(&BearerLayer::new(self.tokens.clone())).build())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::SystemTime;

    use aws_credential_types::Credentials;
    use aws_credential_types::provider::future;
    use carpool::fakes::FakeClock;

    /// Credentials that count how often they are asked for.
    #[derive(Debug)]
    struct Counting {
        calls: Arc<AtomicUsize>,
        expiry: Option<SystemTime>,
    }

    impl ProvideCredentials for Counting {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            self.calls.fetch_add(1, Ordering::SeqCst);
            future::ProvideCredentials::ready(Ok(Credentials::new(
                "AKIDEXAMPLE",
                "secret-key",
                Some("session".into()),
                self.expiry,
                "test",
            )))
        }
    }

    fn start() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn source(expiry: Option<SystemTime>) -> (TokenSource, Arc<FakeClock>, Arc<AtomicUsize>) {
        let clock = Arc::new(FakeClock::at(start()));
        let calls = Arc::new(AtomicUsize::new(0));
        let creds = Counting {
            calls: calls.clone(),
            expiry,
        };
        (
            TokenSource::new("prod", "eu-west-1", creds, clock.clone()),
            clock,
            calls,
        )
    }

    const MIN: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_fresh_token_is_reused_and_one_near_expiry_replaced() {
        let (tokens, clock, calls) = source(None);
        assert!(tokens.cached().is_none());
        let first = tokens.token().await.unwrap();
        assert_eq!(first.expires_at, start() + 15 * MIN);
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        clock.advance(9 * MIN); // 6 minutes left
        let again = tokens.token().await.unwrap();
        assert_eq!(again.value, first.value, "reused");
        assert_eq!(calls.load(Ordering::SeqCst), 1, "no new credentials");

        clock.advance(2 * MIN); // 4 minutes left
        let next = tokens.token().await.unwrap();
        assert_ne!(next.value, first.value, "replaced");
        assert_eq!(next.expires_at, start() + 26 * MIN);
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        clock.advance(20 * MIN); // long expired
        let later = tokens.token().await.unwrap();
        assert_eq!(later.expires_at, start() + 46 * MIN);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_token_expires_no_later_than_its_credentials() {
        let (tokens, clock, calls) = source(Some(start() + 8 * MIN));
        let first = tokens.token().await.unwrap();
        assert_eq!(first.expires_at, start() + 8 * MIN);
        clock.advance(4 * MIN); // 4 minutes left of the credentials
        tokens.token().await.unwrap();
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "refreshed before the credentials ran out"
        );
    }

    /// An inner service that records the Authorization header it was given.
    #[derive(Clone, Default)]
    struct Record(Arc<Mutex<Vec<Option<String>>>>);

    impl Service<Request<()>> for Record {
        type Response = ();
        type Error = BoxError;
        type Future = std::future::Ready<Result<(), BoxError>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: Request<()>) -> Self::Future {
            let header = req
                .headers()
                .get(AUTHORIZATION)
                .map(|v| v.to_str().unwrap().to_string());
            self.0.lock().unwrap().push(header);
            std::future::ready(Ok(()))
        }
    }

    async fn send(svc: &mut Bearer<Record>) -> Result<(), BoxError> {
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await?;
        svc.call(Request::new(())).await
    }

    #[tokio::test]
    async fn the_layer_sets_the_bearer_header_and_refreshes_it() {
        let (tokens, clock, calls) = source(None);
        let record = Record::default();
        let mut svc = BearerLayer::new(tokens).layer(record.clone());
        send(&mut svc).await.unwrap();
        send(&mut svc).await.unwrap();
        clock.advance(11 * MIN);
        send(&mut svc).await.unwrap();
        let seen = record.0.lock().unwrap().clone();
        assert_eq!(seen.len(), 3);
        let headers: Vec<String> = seen.into_iter().map(Option::unwrap).collect();
        assert!(headers[0].starts_with("Bearer k8s-aws-v1."), "bearer token sent");
        assert_eq!(headers[0], headers[1], "cached");
        assert_ne!(headers[1], headers[2], "refreshed");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn the_service_cidr_is_ipv4_else_ipv6_else_the_fallback() {
        use aws_sdk_eks::types::KubernetesNetworkConfigResponse as Network;
        let v4 = Network::builder().service_ipv4_cidr("172.20.0.0/16").build();
        let v6 = Network::builder().service_ipv6_cidr("fd00:1234::/108").build();
        assert_eq!(service_cidr(Some(&v4), "10.100.0.0/16"), "172.20.0.0/16");
        assert_eq!(service_cidr(Some(&v6), "10.100.0.0/16"), "fd00:1234::/108");
        assert_eq!(
            service_cidr(Some(&Network::builder().build()), "10.100.0.0/16"),
            "10.100.0.0/16"
        );
        assert_eq!(service_cidr(None, "10.100.0.0/16"), "10.100.0.0/16");
    }

    #[test]
    fn debug_output_redacts_secrets() {
        let (tokens, _, _) = source(None);
        let shown = format!("{tokens:?} {:?}", BearerLayer::new(tokens.clone()));
        assert!(!shown.contains("secret-key") && !shown.contains("session"), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }
}
