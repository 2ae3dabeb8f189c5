//! The Cloud contract, as one suite every implementation runs: the fake in this crate's
//! tests, the EC2 adapter against moto.

use crate::ports::{Cloud, CloudError, InstanceState, LaunchRequest};

/// An instance id no cloud has.
pub const UNKNOWN_INSTANCE: &str = "i-0123456789abcdef0";

/// Runs the Cloud contract (see [`Cloud`]) against `cloud` with a request it can serve
/// (its EC2NodeClass resolving in the cloud). Panics on the first breach, naming it. It
/// launches one instance and terminates it.
pub async fn cloud_contract<C: Cloud>(cloud: &C, request: &LaunchRequest) {
    let network = match cloud.network(&request.node_class).await {
        Ok(n) => n,
        Err(e) => panic!("network resolves a class that can launch: {e}"),
    };
    assert!(
        network.zones().contains(&request.zone),
        "network lists the request's zone among the class's subnet zones: {network:?}"
    );
    assert!(
        !network.security_groups.is_empty(),
        "and the class's security groups: {network:?}"
    );

    let launched = cloud.launch(request).await;
    let instance = match launched {
        Ok(i) => i,
        Err(e) => panic!("a launch with capacity succeeds: {e}"),
    };
    assert!(
        request.instance_types.contains(&instance.instance_type),
        "the instance is of a requested type: {instance:?}"
    );
    assert_eq!(instance.zone, request.zone, "the instance is in the requested zone");
    assert_eq!(
        instance.capacity_type, request.capacity_type,
        "and of the requested capacity type"
    );
    assert_eq!(instance.nodepool, request.nodepool, "it carries its NodePool");
    assert_eq!(instance.launch_id, request.launch_id, "and its launch id");
    assert_eq!(
        instance.deployment.as_deref(),
        Some(request.deployment.as_str()),
        "and its deployment"
    );
    assert!(instance.launched_at.is_some(), "and its launch time");
    assert_ne!(instance.state, InstanceState::Terminated);

    let got = cloud.get(&instance.id).await;
    assert!(matches!(&got, Ok(i) if i.id == instance.id), "get finds it: {got:?}");
    let in_class_subnet = |s: &String| network.subnets.iter().any(|n| &n.id == s && n.zone == request.zone);
    assert!(
        matches!(&got, Ok(i) if i.network.subnet.as_ref().is_some_and(in_class_subnet)
            && (i.network.security_groups.is_empty() || i.network.security_groups == network.security_groups)),
        "it was launched in one of the class's subnets of its zone, with the class's security groups when \
         they are reported (moto 5.2 reports none on the instance): {got:?}, class {network:?}"
    );
    let listed = cloud.list().await;
    assert!(
        matches!(&listed, Ok(l) if l.iter().any(|i| i.id == instance.id
            && i.launch_id == request.launch_id
            && i.deployment.as_deref() == Some(request.deployment.as_str())
            && i.launched_at.is_some())),
        "list has it, with its launch-id and deployment tags and its launch time, as read back: {listed:?}"
    );

    let first = cloud.terminate(&instance.id).await;
    assert!(first.is_ok(), "terminate succeeds: {first:?}");
    let again = cloud.terminate(&instance.id).await;
    assert!(again.is_ok(), "terminating it again succeeds: {again:?}");
    let unknown = cloud.terminate(UNKNOWN_INSTANCE).await;
    assert!(unknown.is_ok(), "terminating an unknown instance succeeds: {unknown:?}");
    let after = cloud.list().await;
    assert!(
        matches!(&after, Ok(l) if l.iter().all(|i| i.id != instance.id || i.state != InstanceState::Running)),
        "a terminated instance is no longer running in the list: {after:?}"
    );
    let missing = cloud.get(UNKNOWN_INSTANCE).await;
    assert!(
        matches!(&missing, Err(CloudError::NotFound { id, .. }) if id == UNKNOWN_INSTANCE),
        "get of an unknown instance is NotFound: {missing:?}"
    );
}
