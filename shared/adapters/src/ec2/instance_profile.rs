//! The instance profile of a launch. `spec.instanceProfile` is used as it is. Carpool does
//! not create instance profiles (no `iam:CreateInstanceProfile`, for least privilege):
//! the deployment creates one for the node role and configures the pair
//! ([`NodeRole`]), so a class whose `spec.role` is that role gets that profile, and any
//! other role is an error.

use carpool::model::EC2NodeClass;
use carpool::ports::{CloudError, ConfiguredNodeRole, NodeClassReason};

/// The node role the deployment made an instance profile for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRole {
    /// The IAM role name (an ARN is accepted and compared by its name).
    pub role: String,
    /// The instance profile holding it.
    pub instance_profile: String,
}

/// The role's name: the last path segment of an ARN, or the name itself.
fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

/// The instance profile for a class: its `instanceProfile`, else the configured profile if
/// its `role` is the configured role, else none when it names neither.
pub fn instance_profile(
    node_class: &EC2NodeClass,
    configured: Option<&NodeRole>,
) -> Result<Option<String>, CloudError> {
    let spec = &node_class.spec;
    if let Some(profile) = &spec.instance_profile {
        return Ok(Some(profile.clone()));
    }
    let Some(role) = &spec.role else {
        return Ok(None);
    };
    match configured {
        Some(c) if role_name(&c.role) == role_name(role) => Ok(Some(c.instance_profile.clone())),
        _ => Err(CloudError::NodeClass {
            node_class: node_class.name().to_string(),
            reason: NodeClassReason::RoleWithoutInstanceProfile {
                role: role.clone(),
                configured: configured.map(|c| ConfiguredNodeRole {
                    role: c.role.clone(),
                    instance_profile: c.instance_profile.clone(),
                }),
            },
            source: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use carpool::fixtures::EC2NodeClassBuilder;

    use super::*;

    fn class(spec: serde_json::Value) -> EC2NodeClass {
        EC2NodeClassBuilder::new("gpu").spec(spec).typed().unwrap()
    }

    fn configured() -> NodeRole {
        NodeRole {
            role: "CarpoolNodeRole".into(),
            instance_profile: "CarpoolNodeProfile".into(),
        }
    }

    #[test]
    fn an_instance_profile_is_used_as_is() {
        let c = class(serde_json::json!({ "instanceProfile": "MyProfile", "role": "Other" }));
        assert_eq!(instance_profile(&c, None).unwrap().as_deref(), Some("MyProfile"));
        assert_eq!(
            instance_profile(&c, Some(&configured())).unwrap().as_deref(),
            Some("MyProfile")
        );
    }

    #[test]
    fn the_configured_role_gets_the_configured_profile() {
        let c = class(serde_json::json!({ "role": "CarpoolNodeRole" }));
        assert_eq!(
            instance_profile(&c, Some(&configured())).unwrap().as_deref(),
            Some("CarpoolNodeProfile")
        );
        let arn = class(serde_json::json!({ "role": "arn:aws:iam::123456789012:role/CarpoolNodeRole" }));
        assert_eq!(
            instance_profile(&arn, Some(&configured())).unwrap().as_deref(),
            Some("CarpoolNodeProfile")
        );
        assert_eq!(
            instance_profile(&class(serde_json::json!({})), Some(&configured())).unwrap(),
            None
        );
    }

    #[test]
    fn another_role_is_an_error_naming_the_class_and_the_fix() {
        let c = class(serde_json::json!({ "role": "KarpenterNodeRole-demo" }));
        for configured in [Some(configured()), None] {
            match instance_profile(&c, configured.as_ref()) {
                Err(
                    e @ CloudError::NodeClass {
                        reason: NodeClassReason::RoleWithoutInstanceProfile { .. },
                        ..
                    },
                ) => {
                    let msg = e.to_string();
                    assert!(msg.contains("EC2NodeClass gpu"), "{msg}");
                    assert!(msg.contains("spec.instanceProfile"), "{msg}");
                    assert!(msg.contains("KarpenterNodeRole-demo"), "{msg}");
                }
                other => panic!("expected a NodeClass error, got {other:?}"),
            }
        }
    }
}
