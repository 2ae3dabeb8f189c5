//! Issue 30, on the local stack: capacity reservations on moto's EC2, as the stack's
//! `infra/local/moto-server` adds them (moto 5.2.5 has none). The class's selector terms
//! resolve the reservation, a reserved launch targets it (read back from the launch
//! template moto stores and from the instance DescribeInstances reports), and a launch into
//! a full reservation is `InsufficientCapacity` naming the reserved offering.
//!
//! What Karpenter does (aws/karpenter-provider-aws): `pkg/providers/capacityreservation`
//! `DefaultProvider.List` and `QueriesFromSelectorTerms` (one DescribeCapacityReservations
//! per id, or per tags/owner/match-criteria term, active ones only);
//! `pkg/providers/launchtemplate/types.go` `CreateLaunchTemplateInputBuilder.Build`
//! (`CapacityReservationSpecification`: `capacity-reservations-only` with the reservation
//! as the target); `pkg/providers/instance/types.go` `NewInstance` (an instance in a
//! reservation it was targeted at only is `reserved`); `pkg/errors`
//! `IsReservationCapacityExceeded`.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, bail, ensure};
use carpool::fixtures::EC2NodeClassBuilder;
use carpool::model::{CapacityType, EC2NodeClass, ReservationTarget, ReservationType};
use carpool::ports::{Cloud, CloudError, LaunchRequest, NodeClassReason, OfferingKey};
use carpool_adapters::cluster_info::ClusterInfo;
use carpool_adapters::ec2::{Ec2Clients, Ec2Cloud};
use carpool_tests::{Stack, shared, unique};
use serde_json::json;

fn node_class(name: &str, terms: serde_json::Value) -> Result<EC2NodeClass> {
    Ok(EC2NodeClassBuilder::new(name)
        .subnet_discovery("carpool-local")
        .security_group_discovery("*")
        .al2023()
        .set("capacityReservationSelectorTerms", terms)
        .typed()?)
}

fn reserved_request(zone: &str, class: EC2NodeClass, target: &ReservationTarget) -> LaunchRequest {
    let mut labels = BTreeMap::from([("karpenter.sh/nodepool".to_string(), "general".to_string())]);
    labels.extend(target.labels());
    labels.insert("karpenter.sh/capacity-type".into(), "reserved".into());
    LaunchRequest {
        launch_id: unique("launch"),
        deployment: "carpool-test".into(),
        nodepool: "general".into(),
        node_class: class,
        instance_types: vec!["m5.xlarge".into()],
        zone: zone.into(),
        capacity_type: CapacityType::Reserved,
        labels,
        taints: vec![],
        startup_taints: vec![],
    }
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn a_reserved_launch_targets_its_reservation_and_a_full_one_is_out_of_capacity() -> Result<()> {
    let _stack = shared().await;
    let stack = Stack::load()?;
    let config = stack.aws_config().await?;
    let cloud = Ec2Cloud::new(
        Ec2Clients::new(&config),
        ClusterInfo::new(
            unique("resv"),
            "https://apiserver.example:6443",
            "Y2E=",
            "172.20.0.0/16",
        ),
        stack.get("CARPOOL_AMI_SSM_PARAMETER")?,
    );
    let ec2 = cloud.ec2().clone();
    let zone = format!("{}a", stack.region()?);
    let tag = unique("cr");
    let id = carpool_tests::capacity_reservation::create(
        &stack,
        &carpool_tests::capacity_reservation::Reserve {
            instance_type: "m5.xlarge",
            zone: &zone,
            count: 2,
            tags: &[("carpool-test", &tag)],
            block: false,
            end: None,
        },
    )
    .await?;

    // Selected by tag, and by id: the same reservation, with its room.
    for terms in [json!([{"tags": {"carpool-test": tag}}]), json!([{"id": id}])] {
        let found = cloud.capacity_reservations(&node_class("reserved", terms)?).await?;
        ensure!(found.len() == 1, "{found:?}");
        let r = &found[0];
        ensure!(r.id == id && r.instance_type == "m5.xlarge" && r.zone == zone, "{r:?}");
        ensure!(
            r.available == 2 && r.reservation_type == ReservationType::Default,
            "{r:?}"
        );
    }
    // A malformed term is the class's.
    match cloud
        .capacity_reservations(&node_class("bad", json!([{"id": id, "ownerID": "123456789012"}]))?)
        .await
    {
        Err(CloudError::NodeClass {
            reason: NodeClassReason::CapacityReservationSelector { .. },
            ..
        }) => {}
        other => bail!("expected the class's error, got {other:?}"),
    }

    let class = node_class("reserved", json!([{"id": id}]))?;
    let target = ReservationTarget {
        id: id.clone(),
        reservation_type: ReservationType::Default,
    };
    let mut launched = Vec::new();
    for _ in 0..2 {
        let request = reserved_request(&zone, class.clone(), &target);
        let instance = cloud.launch(&request).await?;
        ensure!(instance.capacity_type == CapacityType::Reserved, "{instance:?}");
        // The launch template targets the reservation alone.
        let name = cloud.template_content(&request).await?.name();
        let versions = ec2
            .describe_launch_template_versions()
            .launch_template_name(&name)
            .send()
            .await?;
        let spec = versions
            .launch_template_versions()
            .first()
            .and_then(|v| v.launch_template_data())
            .and_then(|d| d.capacity_reservation_specification())
            .context("the template has a capacity reservation specification")?;
        ensure!(
            spec.capacity_reservation_preference().map(|p| p.as_str()) == Some("capacity-reservations-only")
                && spec
                    .capacity_reservation_target()
                    .and_then(|t| t.capacity_reservation_id())
                    == Some(id.as_str()),
            "{spec:?}"
        );
        // The instance is in the reservation, as DescribeInstances reports it, and reads
        // back as reserved.
        let described = ec2.describe_instances().instance_ids(&instance.id).send().await?;
        let i = described
            .reservations()
            .first()
            .and_then(|r| r.instances().first())
            .context("the instance")?;
        ensure!(i.capacity_reservation_id() == Some(id.as_str()), "{i:?}");
        ensure!(cloud.get(&instance.id).await?.capacity_type == CapacityType::Reserved);
        launched.push(instance.id);
    }
    let left = cloud.capacity_reservations(&class).await?;
    ensure!(left.first().map(|r| r.available) == Some(0), "{left:?}");

    // Full: ReservationCapacityExceeded names the reserved offering.
    match cloud.launch(&reserved_request(&zone, class.clone(), &target)).await {
        Err(CloudError::InsufficientCapacity { offerings }) => ensure!(
            offerings
                == [OfferingKey {
                    instance_type: "m5.xlarge".into(),
                    zone: zone.clone(),
                    capacity_type: CapacityType::Reserved,
                }],
            "{offerings:?}"
        ),
        other => bail!("expected InsufficientCapacity, got {other:?}"),
    }
    // A terminated instance gives its place back.
    cloud.terminate(&launched[0]).await?;
    let left = cloud.capacity_reservations(&class).await?;
    ensure!(left.first().map(|r| r.available) == Some(1), "{left:?}");
    cloud.terminate(&launched[1]).await?;
    Ok(())
}
