//! The harness that plays the kubelet: a background task that registers a Node for each
//! running EC2 instance of the cluster, and deletes it when the instance terminates.
//!
//! Each poll it lists the instances tagged `carpool.sh/cluster=<cluster>` (and the
//! optional extra tag of [`Config::only_tagged`], so tests sharing a stack each get their
//! own harness) that are running, shutting down or terminated, and the Nodes:
//!
//! - a running instance without a Node gets one ([`crate::node::for_instance`]) once it has
//!   been seen running for [`Config::registration_delay`] (the simulated boot), unless it
//!   is tagged `carpool.sh/never-register=true`;
//! - a shutting-down or terminated instance loses its Node, as the cloud node lifecycle
//!   controller would delete it;
//! - a Node this harness registered whose instance is no longer listed at all (stopped,
//!   or gone after a moto reset) is deleted too.
//!
//! A Node is matched to its instance by `spec.providerID`, so Nodes registered by an
//! earlier harness are recognised. Errors do not stop the task; they are collected in the
//! [`Report`] that [`Harness::stop`] returns, and printed.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::instance::{self, Instance};
use crate::node;
use crate::stack::Stack;

/// What the harness watches and how it behaves.
#[derive(Clone, Debug)]
pub struct Config {
    /// The `carpool.sh/cluster` tag value.
    pub cluster: String,
    /// The region, for the `topology.kubernetes.io/region` label.
    pub region: String,
    /// How long an instance runs before its Node registers (simulated boot).
    pub registration_delay: Duration,
    /// How often moto and the apiserver are polled.
    pub poll_interval: Duration,
    /// Only instances that also carry this tag (key, value).
    pub only_tagged: Option<(String, String)>,
}

impl Config {
    /// The stack's cluster and region; no delay; a poll every 500 ms; every instance.
    pub fn from_stack(stack: &Stack) -> Result<Self> {
        Ok(Config {
            cluster: stack.cluster()?.to_string(),
            region: stack.region()?.to_string(),
            registration_delay: Duration::ZERO,
            poll_interval: Duration::from_millis(500),
            only_tagged: None,
        })
    }

    /// Sets the simulated boot time.
    pub fn registration_delay(mut self, delay: Duration) -> Self {
        self.registration_delay = delay;
        self
    }

    /// Watches only the instances that also carry the tag `key=value`.
    pub fn only_tagged(mut self, key: &str, value: &str) -> Self {
        self.only_tagged = Some((key.to_string(), value.to_string()));
        self
    }
}

/// What a harness did while it ran.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The Nodes it registered, by name, in order.
    pub registered: Vec<String>,
    /// The Nodes it deleted, by name, in order.
    pub deleted: Vec<String>,
    /// Distinct errors seen (a poll that failed, an instance it could not register).
    pub errors: Vec<String>,
}

impl Report {
    fn error(&mut self, e: &anyhow::Error) {
        let text = format!("{e:#}");
        if !self.errors.contains(&text) {
            eprintln!("harness: {text}");
            self.errors.push(text);
        }
    }
}

/// A running harness. Dropping it aborts the task; [`Harness::stop`] ends it cleanly.
pub struct Harness {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Report>>,
}

impl Harness {
    /// Starts the harness as a tokio task.
    pub fn start(config: Config, ec2: aws_sdk_ec2::Client, kube: kube::Client) -> Harness {
        let (stop, mut stopped) = oneshot::channel();
        let mut kubelet = Kubelet {
            nodes: Api::all(kube),
            ec2,
            first_seen: HashMap::new(),
            registered: HashMap::new(),
            report: Report::default(),
            config,
        };
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = kubelet.sync().await {
                    kubelet.report.error(&e);
                }
                tokio::select! {
                    _ = &mut stopped => return kubelet.report,
                    () = tokio::time::sleep(kubelet.config.poll_interval) => {}
                }
            }
        });
        Harness {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Starts a harness on the stack (its own clients) with `config`.
    pub async fn start_on(stack: &Stack, config: Config) -> Result<Harness> {
        Ok(Harness::start(config, stack.ec2().await?, stack.kube_client().await?))
    }

    /// Stops the task after its current poll and returns what it did.
    pub async fn stop(mut self) -> Result<Report> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = self.task.take().context("harness already stopped")?;
        task.await.context("the harness task panicked")
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The state of the polling loop.
struct Kubelet {
    config: Config,
    ec2: aws_sdk_ec2::Client,
    nodes: Api<Node>,
    /// When each instance was first seen running, for the registration delay.
    first_seen: HashMap<String, Instant>,
    /// Instance id -> Node name, for the Nodes this harness registered.
    registered: HashMap<String, String>,
    report: Report,
}

impl Kubelet {
    /// One poll: register what booted, delete what terminated or vanished.
    async fn sync(&mut self) -> Result<()> {
        let instances = instance::list(&self.ec2, &self.config.cluster, self.config.only_tagged.as_ref()).await?;
        let nodes = self.nodes.list(&ListParams::default()).await.context("listing Nodes")?;
        let node_of: HashMap<String, String> = nodes
            .items
            .iter()
            .filter_map(|n| {
                let id = instance::instance_id_of(n.spec.as_ref()?.provider_id.as_deref()?)?;
                Some((id.to_string(), n.metadata.name.clone()?))
            })
            .collect();

        for i in &instances {
            let node = node_of.get(&i.id);
            if i.is_terminating() {
                if let Some(name) = node {
                    self.delete(name).await?;
                }
            } else if node.is_none()
                && !i.never_registers()
                && let Err(e) = self.register_when_booted(i).await
            {
                self.report.error(&e);
            }
        }

        let listed: HashSet<&str> = instances.iter().map(|i| i.id.as_str()).collect();
        let vanished: Vec<String> = self
            .registered
            .iter()
            .filter(|(id, _)| !listed.contains(id.as_str()) && node_of.contains_key(*id))
            .map(|(_, name)| name.clone())
            .collect();
        for name in vanished {
            self.delete(&name).await?;
        }
        Ok(())
    }

    async fn register_when_booted(&mut self, i: &Instance) -> Result<()> {
        let seen = *self.first_seen.entry(i.id.clone()).or_insert_with(Instant::now);
        if seen.elapsed() < self.config.registration_delay {
            return Ok(());
        }
        let mut node = node::for_instance(i, &self.config.region)?;
        // What nodeadm would pass the kubelet: the labels and taints of the user data.
        if let Some(text) = crate::user_data::read(&self.ec2, &i.id).await? {
            node::apply_kubelet_flags(&mut node, &crate::user_data::kubelet_flags(&text));
        }
        let name = i.node_name();
        match self.nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {
                eprintln!("harness: registered Node {name} for {}", i.id);
                self.report.registered.push(name.clone());
            }
            // Registered meanwhile (by an earlier harness): it is there, which is the goal.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating Node {name} for {}", i.id)),
        }
        self.registered.insert(i.id.clone(), name);
        Ok(())
    }

    /// Deletes the Node of a terminated instance, as the cloud node lifecycle controller
    /// does, and strips Carpool's termination finalizer from it: in these tests no
    /// interruption sweep runs to remove it once the instance is gone.
    async fn delete(&mut self, name: &str) -> Result<()> {
        let strip =
            serde_json::json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["carpool.sh/termination"]}});
        match self
            .nodes
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Strategic(strip),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("removing the finalizer of Node {name}")),
        }
        match self.nodes.delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                eprintln!("harness: deleted Node {name}");
                self.report.deleted.push(name.to_string());
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting Node {name}")),
        }
        self.registered.retain(|_, n| n != name);
        Ok(())
    }
}
