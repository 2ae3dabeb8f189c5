//! EKS authentication on the local stack: the apiserver's token webhook
//! (`infra/local/token-webhook.py`) accepts the tokens `carpool_adapters::eks_token` makes
//! for a cluster moto knows, maps moto's caller to the user `carpool` in the group
//! `carpool:controller`, and refuses everything else with 401.

use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use aws_sdk_ec2::config::Credentials;
use carpool_adapters::eks::{EksAccess, Endpoint};
use carpool_adapters::eks_token;
use carpool_tests::{Stack, shared, unique};
use http::HeaderValue;
use http::header::AUTHORIZATION;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::{Api, PostParams};

/// EKS access to the stack's apiserver for `cluster`, through the endpoint override.
async fn access(stack: &Stack, cluster: &str) -> Result<(EksAccess, Endpoint)> {
    let sdk = stack.aws_config().await?;
    let ca_file = match stack.get("CARPOOL_KUBE_CA_FILE") {
        Ok(f) => f.to_string(),
        Err(_) => format!("{}/pki/ca.crt", stack.get("CARPOOL_STACK_STATE")?),
    };
    let endpoint = Endpoint {
        url: stack.get("CARPOOL_KUBE_APISERVER")?.to_string(),
        ca_pem: std::fs::read(&ca_file).with_context(|| ca_file.clone())?,
    };
    let access = EksAccess::new(&sdk, cluster)?.with_endpoint_override(endpoint.clone());
    Ok((access, endpoint))
}

/// Who the apiserver says the caller is (a SelfSubjectReview, which any authenticated
/// user may create).
async fn whoami(client: kube::Client) -> Result<(String, Vec<String>), kube::Error> {
    let review = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    Ok((user.username.unwrap_or_default(), user.groups.unwrap_or_default()))
}

/// A client that sends `Authorization: Bearer <token>` and nothing else.
async fn with_token(stack: &Stack, token: &str) -> Result<kube::Client> {
    let (access, endpoint) = access(stack, stack.cluster()?).await?;
    let mut config = access.kube_config(&endpoint)?;
    config
        .headers
        .push((AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {token}"))?));
    Ok(kube::Client::try_from(config)?)
}

/// Asserts the apiserver refuses `token` with 401.
async fn refused(stack: &Stack, what: &str, token: &str) -> Result<()> {
    match whoami(with_token(stack, token).await?).await {
        Err(kube::Error::Api(status)) if status.code == 401 => Ok(()),
        Err(e) => bail!("{what}: expected 401, got {e}"),
        Ok(user) => bail!("{what}: accepted as {user:?}"),
    }
}

fn stack_credentials(stack: &Stack) -> Result<Credentials> {
    Ok(Credentials::new(
        stack.get("AWS_ACCESS_KEY_ID")?,
        stack.get("AWS_SECRET_ACCESS_KEY")?,
        None,
        None,
        "eks-auth-test",
    ))
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn an_eks_token_for_the_stacks_cluster_maps_to_the_carpool_controller_group() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let (access, _) = access(&stack, stack.cluster()?).await?;
    let (user, groups) = whoami(access.client().await?).await?;
    ensure!(user == "carpool", "user {user:?}");
    ensure!(
        groups.iter().any(|g| g == "carpool:controller") && groups.iter().any(|g| g == "system:authenticated"),
        "groups {groups:?}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn the_webhook_refuses_garbage_other_clusters_old_tokens_and_bad_signatures() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let region = stack.region()?.to_string();
    let creds = stack_credentials(&stack)?;
    let now = SystemTime::now();

    refused(&stack, "garbage", "k8s-aws-v1.garbage").await?;
    refused(&stack, "not an EKS token", "some-opaque-token").await?;

    // Well signed, but for a cluster moto does not know: the authenticator of the stack's
    // cluster must not accept it (on EKS, STS would find the signature wrong for the
    // authenticator's x-k8s-aws-id).
    let other = eks_token::token(&creds, &unique("no-such-cluster"), &region, now)?;
    refused(&stack, "a token for another cluster", &other.value).await?;

    // Signed 20 minutes ago: EKS accepts a token for 15.
    let old = eks_token::token(&creds, stack.cluster()?, &region, now - Duration::from_secs(20 * 60))?;
    refused(&stack, "a 20-minute-old token", &old.value).await?;

    // The stack's access key with the wrong secret: the signature does not verify.
    let forged = Credentials::new(stack.get("AWS_ACCESS_KEY_ID")?, "not-the-secret", None, None, "forged");
    let forged = eks_token::token(&forged, stack.cluster()?, &region, now)?;
    refused(&stack, "a token with a bad signature", &forged.value).await?;

    // And the admin's client certificate still works.
    let (user, groups) = whoami(stack.kube_client().await?).await?;
    ensure!(
        groups.iter().any(|g| g == "system:masters"),
        "admin is {user:?} in {groups:?}"
    );
    Ok(())
}
