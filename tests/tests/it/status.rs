//! Issue 28, "What `kubectl get` shows", on the local stack: one provisioner run with the
//! real adapters (moto's EC2, the apiserver) writes the scene's EC2NodeClass status with
//! the subnets, security groups and AMIs it resolved, and its NodePool's; a class whose
//! security group selector selects nothing shows `Ready=False` with Karpenter's reason
//! (aws/karpenter-provider-aws `pkg/controllers/nodeclass` `SecurityGroup.Reconcile`:
//! `SecurityGroupsNotFound`), and its NodePool `NodeClassReady=False`
//! (kubernetes-sigs/karpenter `pkg/controllers/nodepool/readiness`). Run:
//! `cargo test -p carpool-tests --test it -- --include-ignored status::`.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use carpool_tests::scene::{Scene, nodeclasses, nodepools};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

async fn status_of(scene: &Scene, resource: &kube::api::ApiResource) -> Result<Value> {
    let object = Api::<DynamicObject>::all_with(scene.kube.clone(), resource)
        .get(&scene.name)
        .await?;
    Ok(object.data.get("status").cloned().unwrap_or(Value::Null))
}

fn condition<'a>(status: &'a Value, kind: &str) -> Result<&'a Value> {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .with_context(|| format!("no {kind} condition in {status}"))
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn kubectl_get_shows_what_the_class_resolved_to_and_why_it_is_not_ready() -> Result<()> {
    let scene = Scene::new("status").await?;
    let result = async {
        scene.provision(Duration::ZERO).await?;
        let class = status_of(&scene, &nodeclasses()).await?;
        let subnet = scene
            .stack
            .get("CARPOOL_SUBNET_IDS")?
            .split(',')
            .next()
            .context("the stack has subnets")?
            .to_string();
        let group = scene.stack.get("CARPOOL_SECURITY_GROUP_ID")?;
        let subnets: Vec<&str> = class["subnets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["id"].as_str())
            .collect();
        ensure!(
            subnets.contains(&subnet.as_str()),
            "the stack's subnet {subnet} is listed: {class}"
        );
        ensure!(
            class["securityGroups"] == json!([{"id": group}]),
            "the stack's security group is listed: {class}"
        );
        ensure!(
            class["amis"].as_array().is_some_and(|a| !a.is_empty()),
            "the AMIs are listed: {class}"
        );
        ensure!(condition(&class, "Ready")?["status"] == "True", "{class}");
        let pool = status_of(&scene, &nodepools()).await?;
        ensure!(condition(&pool, "Ready")?["status"] == "True", "{pool}");
        ensure!(pool["nodes"] == 0 && pool["resources"]["cpu"] == "0", "{pool}");

        // The user's security group selector now selects nothing.
        let patch = json!({"spec": {"securityGroupSelectorTerms": [{"tags": {"carpool.sh/no-such-tag": "none"}}]}});
        Api::<DynamicObject>::all_with(scene.kube.clone(), &nodeclasses())
            .patch(&scene.name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        scene.provision(Duration::ZERO).await?;
        let class = status_of(&scene, &nodeclasses()).await?;
        let groups = condition(&class, "SecurityGroupsReady")?;
        ensure!(
            groups["status"] == "False" && groups["reason"] == "SecurityGroupsNotFound",
            "{class}"
        );
        let ready = condition(&class, "Ready")?;
        ensure!(
            ready["status"] == "False"
                && ready["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("selects no security group")),
            "{class}"
        );
        let pool = status_of(&scene, &nodepools()).await?;
        let class_ready = condition(&pool, "NodeClassReady")?;
        ensure!(
            class_ready["status"] == "False" && class_ready["reason"] == "SecurityGroupsNotFound",
            "{pool}"
        );
        Ok(())
    }
    .await;
    scene.finish(None, result).await
}
