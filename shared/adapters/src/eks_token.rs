//! The bearer token EKS accepts, made as `aws eks get-token` makes it: a presigned STS
//! `GetCallerIdentity` URL that also signs the `x-k8s-aws-id` header (the cluster name),
//! base64url-encoded without padding, prefixed with `k8s-aws-v1.`. The apiserver's
//! authenticator (aws-iam-authenticator) calls the URL to learn who the caller is.
//!
//! Hand-written because no maintained crate makes this token; the signing itself is
//! `aws-sigv4`'s. A token is valid for 15 minutes from its signing time (the presigned
//! URL says 60 s, which the authenticator ignores in favour of its own 15-minute window).

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign};
use aws_sigv4::sign::v4;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The prefix of an EKS token.
pub const TOKEN_PREFIX: &str = "k8s-aws-v1.";
/// The header naming the cluster.
pub const CLUSTER_ID_HEADER: &str = "x-k8s-aws-id";
/// How long EKS honours a token.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);

/// A token could not be made.
#[derive(Debug, thiserror::Error)]
#[error("making the EKS token: {0}")]
pub struct TokenError(String);

/// A token and when it stops being accepted.
#[derive(Clone)]
pub struct Token {
    /// `k8s-aws-v1.…`: a secret; never log it.
    pub value: String,
    /// When EKS stops accepting it.
    pub expires_at: SystemTime,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("value", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Makes the token for `cluster` in `region`, signed at `now`.
///
/// aws-sigv4 (1.6) logs the canonical request at TRACE level, redacting sensitive headers
/// but not query parameters, and a presigned URL carries the session token as the
/// `X-Amz-Security-Token` parameter. Signing is synchronous, so it runs in a scope with no
/// log subscriber: no caller can leak the token into its logs (the test
/// `no_credentials_or_tokens_appear_in_logs` caught this).
pub fn token(credentials: &Credentials, cluster: &str, region: &str, now: SystemTime) -> Result<Token, TokenError> {
    tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
        sign_token(credentials, cluster, region, now)
    })
}

fn sign_token(credentials: &Credentials, cluster: &str, region: &str, now: SystemTime) -> Result<Token, TokenError> {
    let url = format!("https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15");
    let identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(60));
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| TokenError(e.to_string()))?
        .into();
    let headers = [(CLUSTER_ID_HEADER, cluster)];
    let request = SignableRequest::new("GET", &url, headers.into_iter(), SignableBody::Bytes(&[]))
        .map_err(|e| TokenError(e.to_string()))?;
    let (instructions, _signature) = sign(request, &params)
        .map_err(|e| TokenError(e.to_string()))?
        .into_parts();
    let mut signed = http::Request::builder()
        .uri(&url)
        .body(())
        .map_err(|e| TokenError(e.to_string()))?;
    instructions.apply_to_request_http1x(&mut signed);
    let presigned = signed.uri().to_string();
    Ok(Token {
        value: format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(presigned)),
        expires_at: now + TOKEN_LIFETIME,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The presigned URL inside a token.
    fn url_of(token: &str) -> String {
        let b64 = token.strip_prefix(TOKEN_PREFIX).unwrap();
        String::from_utf8(URL_SAFE_NO_PAD.decode(b64).unwrap()).unwrap()
    }

    fn query(url: &str) -> std::collections::BTreeMap<String, String> {
        url.split_once('?')
            .unwrap()
            .1
            .split('&')
            .map(|kv| kv.split_once('=').unwrap())
            .map(|(k, v)| (k.into(), v.into()))
            .collect()
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn the_token_has_the_documented_format() {
        let creds = Credentials::new("AKIDEXAMPLE", "secret", None, None, "test");
        let t = token(&creds, "prod", "eu-west-1", at(1_800_000_000)).unwrap();
        assert!(t.value.starts_with("k8s-aws-v1."));
        assert!(
            !t.value.contains('=') && !t.value.contains('+') && !t.value.contains('/'),
            "base64url without padding"
        );
        let url = url_of(&t.value);
        assert!(url.starts_with("https://sts.eu-west-1.amazonaws.com/?"), "{url}");
        let q = query(&url);
        assert_eq!(q["Action"], "GetCallerIdentity");
        assert_eq!(q["Version"], "2011-06-15");
        assert_eq!(q["X-Amz-Algorithm"], "AWS4-HMAC-SHA256");
        assert_eq!(q["X-Amz-Expires"], "60");
        assert_eq!(
            q["X-Amz-SignedHeaders"], "host%3Bx-k8s-aws-id",
            "the cluster header is signed"
        );
        assert_eq!(t.expires_at, at(1_800_000_000) + TOKEN_LIFETIME);
    }

    /// Reference vector from botocore's presigner, as `aws eks get-token` uses it, with
    /// the clock fixed at 2026-11-30T12:00:00Z (`tests/vectors/eks_token_vector.py`).
    #[test]
    fn the_signature_matches_the_aws_cli_for_a_known_vector() {
        let creds = Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            None,
            "test",
        );
        let t = token(&creds, "my-cluster", "us-east-1", at(1_796_040_000)).unwrap();
        let q = query(&url_of(&t.value));
        assert_eq!(q["X-Amz-Date"], "20261130T120000Z");
        assert_eq!(
            q["X-Amz-Credential"],
            "AKIDEXAMPLE%2F20261130%2Fus-east-1%2Fsts%2Faws4_request"
        );
        assert_eq!(
            q["X-Amz-Signature"],
            "67126dec45d8ce0d341d13f55ce57bad2806f59f8d7dea4a1390bc7edaac7cca"
        );
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let creds = Credentials::new("AKIDEXAMPLE", "secret", Some("session-token".into()), None, "test");
        let t = token(&creds, "prod", "us-east-1", at(1_800_000_000)).unwrap();
        let shown = format!("{t:?}");
        assert!(
            !shown.contains(&t.value) && !shown.contains("k8s-aws-v1.") && shown.contains("redacted"),
            "{shown}"
        );
    }
}
