//! An EC2NodeClass's status as Karpenter's AWS provider writes it
//! (`pkg/apis/v1/ec2nodeclass_status.go`, filled by `pkg/controllers/nodeclass`): the
//! subnets, security groups and AMIs its selector terms resolve to, its instance profile,
//! and the conditions `SubnetsReady`, `SecurityGroupsReady`, `AMIsReady`,
//! `InstanceProfileReady`, `ValidationSucceeded` under `Ready`, each false with the reason
//! Karpenter gives when that part does not resolve.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::condition::{Condition, conditions};
use crate::model::node_class_reason::NodeClassReason;
use crate::model::{EC2NodeClass, ImageVariant, ResolvedImage, ResolvedNetwork};

/// What a class resolved to.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassResolution {
    /// Its subnets and security groups.
    pub network: ResolvedNetwork,
    /// Its AMIs.
    pub images: Vec<ResolvedImage>,
    /// Its instance profile, when one is known.
    pub instance_profile: Option<String>,
}

/// Why a class did not resolve: the typed reason when the class owns the error, and the
/// whole error's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassFailure {
    /// The class's own reason, if the error is the class's.
    pub reason: Option<NodeClassReason>,
    /// The error, as logged.
    pub message: String,
}

impl ClassFailure {
    /// The condition that fails, with Karpenter's reason for it.
    pub fn condition(&self) -> Condition {
        let (kind, reason) = match &self.reason {
            Some(NodeClassReason::NoSubnet | NodeClassReason::NoSubnetInZone { .. }) => {
                ("SubnetsReady", "SubnetsNotFound")
            }
            Some(NodeClassReason::NoSecurityGroup) => ("SecurityGroupsReady", "SecurityGroupsNotFound"),
            Some(NodeClassReason::RoleNotFound { .. }) => ("InstanceProfileReady", "InstanceProfileNotFound"),
            Some(
                NodeClassReason::EmptySsmParameter { .. }
                | NodeClassReason::SsmParameterNotFound { .. }
                | NodeClassReason::WindowsAlias { .. }
                | NodeClassReason::WindowsFamily { .. }
                | NodeClassReason::NoImage { .. }
                | NodeClassReason::NoImageForTypes { .. },
            ) => ("AMIsReady", "AMINotFound"),
            Some(NodeClassReason::CapacityReservationSelector { .. }) => {
                ("CapacityReservationsReady", "CapacityReservationsNotResolved")
            }
            Some(_) => ("ValidationSucceeded", "ValidationFailed"),
            // Not the class's error (EC2 throttled, access denied): it could not be
            // resolved this time.
            None => ("ValidationSucceeded", "ResolutionFailed"),
        };
        Condition::failed(kind, reason, self.message.clone())
    }
}

/// The status of `class` given what it resolved to (or why it did not), and its current
/// status. A class that did not resolve keeps the subnets, groups and AMIs its status
/// lists, as Karpenter keeps the last ones it resolved; only its conditions change.
pub fn nodeclass_status(
    class: &EC2NodeClass,
    resolved: &Result<ClassResolution, ClassFailure>,
    now: SystemTime,
) -> Value {
    let previous = class.status.as_ref();
    let order = [
        "SubnetsReady",
        "SecurityGroupsReady",
        "AMIsReady",
        "InstanceProfileReady",
        "ValidationSucceeded",
    ];
    let mut wanted: Vec<Condition> = order.iter().map(|k| Condition::ok(k)).collect();
    // Karpenter adds this condition with its reserved-capacity support; Carpool, for a
    // class that selects capacity reservations.
    if !class.spec.capacity_reservation_selector_terms.is_empty() {
        wanted.push(Condition::ok("CapacityReservationsReady"));
    }
    let mut status = serde_json::Map::new();
    match resolved {
        Ok(r) => {
            status.insert(
                "subnets".into(),
                r.network
                    .subnets
                    .iter()
                    .map(|s| json!({"id": s.id, "zone": s.zone}))
                    .collect(),
            );
            status.insert(
                "securityGroups".into(),
                r.network.security_groups.iter().map(|g| json!({"id": g})).collect(),
            );
            status.insert("amis".into(), r.images.iter().map(ami).collect());
            if let Some(profile) = &r.instance_profile {
                status.insert("instanceProfile".into(), json!(profile));
            }
        }
        Err(failure) => {
            let failed = failure.condition();
            if let Some(c) = wanted.iter_mut().find(|c| c.kind == failed.kind) {
                *c = failed;
            }
            for key in ["subnets", "securityGroups", "amis", "instanceProfile"] {
                if let Some(v) = previous.and_then(|p| p.get(key)) {
                    status.insert(key.into(), v.clone());
                }
            }
        }
    }
    status.insert(
        "conditions".into(),
        conditions(
            &wanted,
            previous.and_then(|p| p.get("conditions")),
            class.metadata.generation,
            now,
        ),
    );
    Value::Object(status)
}

/// An AMI as `status.amis` lists it: its id and the requirements of the types it boots
/// (its architecture; GPU or accelerator types when it is an image of one such variant),
/// which [`crate::decide::provisioning::ami_requirements::images_from_status`] reads back.
fn ami(image: &ResolvedImage) -> Value {
    let mut requirements = Vec::new();
    if let Some(arch) = image.arch {
        requirements.push(json!({"key": crate::model::well_known::ARCH, "operator": "In", "values": [arch.label()]}));
    }
    if let [variant] = image.variants.as_slice() {
        let (gpu, accelerator) = match variant {
            ImageVariant::Standard => ("DoesNotExist", "DoesNotExist"),
            ImageVariant::Nvidia => ("Exists", "DoesNotExist"),
            ImageVariant::Neuron => ("DoesNotExist", "Exists"),
        };
        requirements.push(json!({"key": "karpenter.k8s.aws/instance-gpu-count", "operator": gpu}));
        requirements.push(json!({"key": "karpenter.k8s.aws/instance-accelerator-count", "operator": accelerator}));
    }
    json!({"id": image.id, "requirements": requirements})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::provisioning::ami_requirements::images_from_status;
    use crate::fixtures::EC2NodeClassBuilder;
    use crate::model::{Arch, ResolvedSubnet};

    fn resolution() -> ClassResolution {
        ClassResolution {
            network: ResolvedNetwork {
                subnets: vec![ResolvedSubnet {
                    id: "subnet-a".into(),
                    zone: "us-east-1a".into(),
                    available_ips: None,
                }],
                security_groups: vec!["sg-1".into()],
            },
            images: vec![
                ResolvedImage::new("ami-x86", Arch::Amd64, &[ImageVariant::Standard]),
                ResolvedImage::new("ami-gpu", Arch::Amd64, &[ImageVariant::Nvidia]),
                ResolvedImage::new("ami-arm", Arch::Arm64, &[ImageVariant::Neuron]),
            ],
            instance_profile: Some("carpool_demo_profile".into()),
        }
    }

    #[test]
    fn a_resolved_class_lists_what_it_resolved_and_is_ready() {
        let class = EC2NodeClassBuilder::standard().typed().unwrap();
        let s = nodeclass_status(&class, &Ok(resolution()), SystemTime::UNIX_EPOCH);
        assert_eq!(s["subnets"], json!([{"id": "subnet-a", "zone": "us-east-1a"}]));
        assert_eq!(s["securityGroups"], json!([{"id": "sg-1"}]));
        assert_eq!(s["instanceProfile"], "carpool_demo_profile");
        let ready = s["conditions"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(ready["type"], "Ready");
        assert_eq!(ready["status"], "True");
    }

    #[test]
    fn the_amis_written_read_back_as_the_images_resolved() {
        let mut class = EC2NodeClassBuilder::standard().typed().unwrap();
        class.status = Some(nodeclass_status(&class, &Ok(resolution()), SystemTime::UNIX_EPOCH));
        assert_eq!(images_from_status(&class), Some(resolution().images));
    }

    #[test]
    fn a_bad_security_group_selector_is_not_ready_with_karpenters_reason() {
        let mut class = EC2NodeClassBuilder::standard().typed().unwrap();
        class.status = Some(nodeclass_status(&class, &Ok(resolution()), SystemTime::UNIX_EPOCH));
        let failure = ClassFailure {
            reason: Some(NodeClassReason::NoSecurityGroup),
            message: "EC2NodeClass default selects no security group".into(),
        };
        let s = nodeclass_status(&class, &Err(failure), SystemTime::UNIX_EPOCH);
        let conditions = s["conditions"].as_array().unwrap();
        let sg = conditions.iter().find(|c| c["type"] == "SecurityGroupsReady").unwrap();
        assert_eq!(sg["status"], "False");
        assert_eq!(sg["reason"], "SecurityGroupsNotFound");
        let ready = conditions.last().unwrap();
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "SecurityGroupsNotFound");
        assert_eq!(ready["message"], "EC2NodeClass default selects no security group");
        // What it resolved last is kept.
        assert_eq!(s["subnets"], json!([{"id": "subnet-a", "zone": "us-east-1a"}]));
    }

    /// aws/karpenter-provider-aws `ConditionTypeCapacityReservationsReady`: a class with a
    /// malformed capacity reservation selector term is not Ready, with the term and why.
    #[test]
    fn a_malformed_capacity_reservation_term_is_not_ready_with_why() {
        let mut class = EC2NodeClassBuilder::standard().typed().unwrap();
        class.spec.capacity_reservation_selector_terms = vec![json!({"id": "sg-1"})];
        let reason = class.capacity_reservation_terms().unwrap_err();
        let failure = ClassFailure {
            message: format!("EC2NodeClass default {reason}"),
            reason: Some(reason),
        };
        let s = nodeclass_status(&class, &Err(failure), SystemTime::UNIX_EPOCH);
        let conditions = s["conditions"].as_array().unwrap();
        let cr = conditions
            .iter()
            .find(|c| c["type"] == "CapacityReservationsReady")
            .unwrap();
        assert_eq!(cr["status"], "False");
        let ready = conditions.last().unwrap();
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "CapacityReservationsNotResolved");
        assert!(
            ready["message"]
                .as_str()
                .unwrap()
                .contains("spec.capacityReservationSelectorTerms[0]: id \"sg-1\" is not a capacity reservation id"),
            "{ready}"
        );
    }
}
