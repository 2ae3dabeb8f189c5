//! The scene of a function's end-to-end test: what one test sets up on the local stack,
//! torn down at the end whatever happened.
//!
//! Each scene has a cluster name of its own (so its EC2 tags, its harness and its DynamoDB
//! partition are its own), a namespace, a NodePool and an EC2NodeClass of that name; the
//! pods of its Deployments select its NodePool. The three functions' `e2e` tests share it:
//! what only one function's tests need (its handler, an SQS queue, a clock run ahead)
//! stays in that test, beside a `Scene` that wraps this one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};
use carpool::catalog::Catalog;
use carpool::fixtures::{EC2NodeClassBuilder, NodePoolBuilder};
use carpool::ports::Cloud;
use carpool::run::config::Config;
use carpool::run::provision::{Provisioner, RunReport, Settings};
use carpool_adapters::clock::TokioClock;
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::dynamodb::DynamoStore;
use carpool_adapters::ec2::{Ec2Clients, Ec2Cloud};
use carpool_adapters::kube_cluster::KubeCluster;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::harness::Config as HarnessConfig;
use crate::{Harness, Stack, unique};

/// A resource of the apiserver by group, version, kind and plural.
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Karpenter's NodePool.
pub fn nodepools() -> ApiResource {
    resource("karpenter.sh", "v1", "NodePool", "nodepools")
}

/// Karpenter's EC2NodeClass.
pub fn nodeclasses() -> ApiResource {
    resource("karpenter.k8s.aws", "v1", "EC2NodeClass", "ec2nodeclasses")
}

/// What one test set up.
pub struct Scene {
    pub stack: Stack,
    pub kube: kube::Client,
    /// The cluster name, and the name of the namespace, the NodePool and the EC2NodeClass.
    pub name: String,
    /// The DynamoDB table of the runs' state.
    pub table: String,
}

impl Scene {
    /// A scene whose NodePool allows spot and on-demand.
    pub async fn new(prefix: &str) -> Result<Self> {
        Self::with_pool(prefix, |pool| {
            pool.requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])
                .build()
        })
        .await
    }

    /// A scene whose NodePool is `pool` made of the scene's builder: it uses the scene's
    /// EC2NodeClass, labels its nodes `e2e=<name>`, and allows current (generation 5 and
    /// later) amd64 types of the c, m and r categories; `pool` adds the rest (at least the
    /// capacity types) and builds it.
    pub async fn with_pool(prefix: &str, pool: impl FnOnce(NodePoolBuilder) -> Value) -> Result<Self> {
        let stack = Stack::load()?;
        let kube = stack.kube_client().await?;
        let name = unique(prefix);
        let scene = Scene {
            table: format!("{name}-state"),
            stack,
            kube,
            name,
        };
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": scene.name}});
        Api::<Namespace>::all(scene.kube.clone())
            .create(&PostParams::default(), &serde_json::from_value(ns)?)
            .await?;
        let pool = pool(
            NodePoolBuilder::new(&scene.name)
                .node_class(&scene.name)
                .label("e2e", &scene.name)
                .requirement("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"])
                .requirement("karpenter.k8s.aws/instance-generation", "Gt", &["4"])
                .requirement("kubernetes.io/arch", "In", &["amd64"]),
        );
        let class = EC2NodeClassBuilder::new(&scene.name)
            .role("CarpoolNodeRole")
            .discovery("carpool-local")
            .al2023()
            .build();
        for (r, object) in [(nodeclasses(), class), (nodepools(), pool)] {
            Api::<DynamicObject>::all_with(scene.kube.clone(), &r)
                .create(&PostParams::default(), &serde_json::from_value(object)?)
                .await?;
        }
        Ok(scene)
    }

    /// The functions' configuration for this scene.
    pub fn config(&self) -> Result<Config> {
        self.config_with(|_| None)
    }

    /// [`Scene::config`] with the variables `vars` gives beyond the cluster, the table and
    /// the region.
    pub fn config_with(&self, vars: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut config = Config::from_vars(|k| match k {
            "CARPOOL_CLUSTER_NAME" => Some(self.name.clone()),
            "CARPOOL_TABLE_NAME" => Some(self.table.clone()),
            "AWS_REGION" => Some("us-east-1".into()),
            _ => vars(k),
        })?;
        config.ami_ssm_parameter = self.stack.get("CARPOOL_AMI_SSM_PARAMETER")?.to_string();
        // moto prices every spot offering at 0.00001 USD, which would make the biggest
        // types look cheapest: plan on the embedded prices instead.
        config.live_prices = false;
        Ok(config)
    }

    /// The EC2 adapter on moto, for this scene's cluster.
    pub async fn cloud(&self) -> Result<Ec2Cloud> {
        let sdk = self.stack.aws_config().await?;
        let info = ClusterInfo::new(
            &self.name,
            self.stack.get("CARPOOL_KUBE_APISERVER")?,
            "Y2E=",
            "10.100.0.0/16",
        );
        Ok(Ec2Cloud::new(
            Ec2Clients::new(&sdk),
            info,
            self.stack.get("CARPOOL_AMI_SSM_PARAMETER")?,
        )
        .with_node_role("CarpoolNodeRole", "CarpoolNodeProfile"))
    }

    /// The DynamoDB store on moto, its table created if missing.
    pub async fn store(&self) -> Result<DynamoStore> {
        let store = DynamoStore::new(self.stack.dynamodb().await?, &self.table, &self.name);
        store.create_table_if_missing().await?;
        Ok(store)
    }

    /// Creates a security group named after this scene and `suffix` in the stack's VPC,
    /// and points this scene's EC2NodeClass at it alone; returns its id.
    pub async fn move_class_to_new_security_group(&self, suffix: &str) -> Result<String> {
        let ec2 = aws_sdk_ec2::Client::new(&self.stack.aws_config().await?);
        let id = ec2
            .create_security_group()
            .group_name(format!("{}-{suffix}", self.name))
            .description("a security group an EC2NodeClass moves to")
            .vpc_id(self.stack.get("CARPOOL_VPC_ID")?)
            .send()
            .await?
            .group_id
            .context("CreateSecurityGroup returned no id")?;
        let patch = json!({"spec": {"securityGroupSelectorTerms": [{"id": id}]}});
        Api::<DynamicObject>::all_with(self.kube.clone(), &nodeclasses())
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(id)
    }

    /// A harness playing the kubelet for this scene's instances.
    pub async fn harness(&self) -> Result<Harness> {
        let mut config = HarnessConfig::from_stack(&self.stack)?;
        config.cluster = self.name.clone();
        Harness::start_on(&self.stack, config).await
    }

    /// A Deployment of `replicas` pods selecting this scene's NodePool (and tolerating
    /// kwok's taint), each requesting `cpu` and `memory`; a test edits it before
    /// [`Scene::create_deployment`].
    pub fn deployment(&self, app: &str, replicas: i32, cpu: &str, memory: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": app, "namespace": self.name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
              "template": {"metadata": {"labels": {"app": app}}, "spec": {
                "nodeSelector": {"karpenter.sh/nodepool": self.name},
                "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}
        })
    }

    /// Creates `deployment` in this scene's namespace.
    pub async fn create_deployment(&self, deployment: Value) -> Result<()> {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.kube.clone(),
            &self.name,
            &resource("apps", "v1", "Deployment", "deployments"),
        );
        api.create(&PostParams::default(), &serde_json::from_value(deployment)?)
            .await?;
        Ok(())
    }

    /// The pods of this scene's namespace.
    pub async fn pods(&self) -> Result<Vec<Pod>> {
        Ok(Api::<Pod>::namespaced(self.kube.clone(), &self.name)
            .list(&ListParams::default())
            .await?
            .items)
    }

    /// Provisions for the pending pods: the provisioner's run, watching `watch`.
    pub async fn provision(&self, watch: Duration) -> Result<RunReport> {
        let cloud = self.cloud().await?;
        let cluster = KubeCluster::new(self.kube.clone());
        let store = self.store().await?;
        let region = Catalog::embedded()?.region("us-east-1")?;
        let settings = Settings {
            watch,
            // Time to release the launch wave once the harness's nodes are Ready.
            release_limit: watch + Duration::from_secs(30),
            ..Settings::from_config(&self.config()?, watch)
        };
        let mut p = Provisioner::new(&cloud, &cluster, &store, &TokioClock, settings, &unique("prov"));
        Ok(p.run(&region).await?)
    }

    /// Watches the PDB `name` until stopped: the fewest healthy pods it reported, and the
    /// times it had fewer healthy pods than it desires.
    pub fn watch_pdb(&self, name: &str) -> PdbWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let fewest = Arc::new(AtomicI32::new(i32::MAX));
        let violations = Arc::new(AtomicI32::new(0));
        let pdbs = Api::<PodDisruptionBudget>::namespaced(self.kube.clone(), &self.name);
        let (s, f, v, name) = (stop.clone(), fewest.clone(), violations.clone(), name.to_string());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::SeqCst) {
                if let Ok(pdb) = pdbs.get(&name).await
                    && let Some(status) = pdb.status
                {
                    f.fetch_min(status.current_healthy, Ordering::SeqCst);
                    if status.current_healthy < status.desired_healthy {
                        v.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        (stop, fewest, violations, task)
    }

    /// Deletes the namespace, the NodePool and the EC2NodeClass, and terminates the
    /// scene's instances.
    pub async fn cleanup(&self) -> Result<()> {
        let _ = Api::<Namespace>::all(self.kube.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
        for r in [nodepools(), nodeclasses()] {
            let _ = Api::<DynamicObject>::all_with(self.kube.clone(), &r)
                .delete(&self.name, &DeleteParams::default())
                .await;
        }
        let cloud = self.cloud().await?;
        for i in cloud.list().await? {
            cloud.terminate(&i.id).await?;
        }
        Ok(())
    }

    /// Cleans up and stops the harness, if any, whatever `result` is; then answers
    /// `result`, or the cleanup's error.
    pub async fn finish<T>(&self, harness: impl Into<Option<Harness>>, result: Result<T>) -> Result<T> {
        let cleaned = self.cleanup().await;
        if let Some(h) = harness.into() {
            // Give the harness a moment to delete the Nodes of the terminated instances.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let _ = h.stop().await;
        }
        let value = result?;
        cleaned?;
        Ok(value)
    }
}

/// What [`Scene::watch_pdb`] answers: set the flag to stop the task; then read the fewest
/// healthy pods and the violations.
pub type PdbWatch = (
    Arc<AtomicBool>,
    Arc<AtomicI32>,
    Arc<AtomicI32>,
    tokio::task::JoinHandle<()>,
);
