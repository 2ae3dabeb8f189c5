//! The replayed HTTP client of the adapter tests that need no stack: canned AWS answers,
//! in order, and the requests seen. Used by [`ec2_replayed`](crate::ec2_replayed) and
//! [`ami_replayed`](crate::ami_replayed).
//!
//! Written over `aws-smithy-runtime-api`'s `HttpConnector` rather than `aws-smithy-mocks`
//! or `aws-smithy-http-client`'s `StaticReplayClient`: both turn on the `test-util` feature
//! of `aws-smithy-http-client`, which every SDK crate builds on, so the test build would
//! compile aws-sdk-ec2 a second time (minutes and gigabytes).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use aws_config::{BehaviorVersion, Region};
use aws_credential_types::Credentials;
use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector, http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::http::Response;
use aws_smithy_types::body::SdkBody;
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::ec2::{Ec2Clients, Ec2Cloud};

/// A request the replay client saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub uri: String,
    pub target: Option<String>,
    pub body: String,
}

/// A canned answer: status, content type, body.
pub type Answer = (u16, &'static str, String);

/// Answers each request with the next canned answer, and records it.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    answers: Arc<Mutex<VecDeque<Answer>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Replay {
    /// Answers of status 200.
    pub fn new(answers: Vec<(&'static str, String)>) -> Self {
        Self::with_status(answers.into_iter().map(|(t, body)| (200, t, body)).collect())
    }

    /// Answers of any status.
    pub fn with_status(answers: Vec<Answer>) -> Self {
        Replay {
            answers: Arc::new(Mutex::new(answers.into())),
            seen: Arc::default(),
        }
    }

    pub fn client(&self) -> SharedHttpClient {
        let replay = self.clone();
        http_client_fn(move |_, _| SharedHttpConnector::new(replay.clone()))
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn left(&self) -> usize {
        self.answers.lock().unwrap().len()
    }
}

impl HttpConnector for Replay {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        self.seen.lock().unwrap().push(Seen {
            uri: request.uri().to_string(),
            target: request.headers().get("x-amz-target").map(str::to_string),
            body: String::from_utf8_lossy(request.body().bytes().unwrap_or_default()).into_owned(),
        });
        let (status, content_type, body) = self.answers.lock().unwrap().pop_front().unwrap_or((
            500,
            "text/plain",
            "the replay ran out of answers".to_string(),
        ));
        let response = http::Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(SdkBody::from(body))
            .unwrap();
        HttpConnectorFuture::ready(Ok(Response::try_from(response).unwrap()))
    }
}

pub fn credentials() -> Credentials {
    Credentials::new("AKIDTEST", "secret", None, None, "replay")
}

/// An `Ec2Cloud` for `cluster` in `region` whose EC2, SSM and Pricing calls go to the
/// replays.
pub fn cloud_of(region: &str, cluster: ClusterInfo, ec2: &Replay, ssm: &Replay, pricing: &Replay) -> Ec2Cloud {
    let ec2 = aws_sdk_ec2::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .credentials_provider(credentials())
        .http_client(ec2.client())
        .build();
    let ssm = aws_sdk_ssm::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .credentials_provider(credentials())
        .http_client(ssm.client())
        .build();
    let pricing = aws_sdk_pricing::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(credentials())
        .http_client(pricing.client())
        .build();
    Ec2Cloud::new(
        Ec2Clients {
            ec2: aws_sdk_ec2::Client::from_conf(ec2),
            ssm: aws_sdk_ssm::Client::from_conf(ssm),
            pricing: aws_sdk_pricing::Client::from_conf(pricing),
            // No replayed test launches a class whose role needs a profile of Carpool's; a
            // call would get the empty replay's 500, never the network.
            iam: aws_sdk_iam::Client::from_conf(
                aws_sdk_iam::Config::builder()
                    .behavior_version(BehaviorVersion::latest())
                    .region(Region::new(region.to_string()))
                    .credentials_provider(credentials())
                    .http_client(Replay::default().client())
                    .build(),
            ),
        },
        cluster,
        "/carpool/ami",
    )
}
