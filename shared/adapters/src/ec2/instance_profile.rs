//! The instance profile of a launch, as Karpenter chooses and makes it
//! (`pkg/providers/instanceprofile/instanceprofile.go` and
//! `pkg/controllers/nodeclass/instanceprofile.go` in aws/karpenter-provider-aws):
//!
//! - `spec.instanceProfile` is used as it is, with no IAM call.
//! - `spec.role` naming the role the deployment made a profile for ([`NodeRole`]) uses that
//!   profile, with no IAM call.
//! - Any other `spec.role` gets a profile Carpool makes: named
//!   `carpool_<cluster>_<hash of cluster, region, class and role>` ([`profile_name`]),
//!   tagged with the cluster, the class and the deployment ([`ManagedProfile::tags`]),
//!   created on the class's first launch with that role, the role added to it, and reused
//!   afterwards (looked up with GetInstanceProfile; known for [`super::LOOKUP_TTL`] once
//!   seen). A role that IAM does not know is the class's own error
//!   ([`NodeClassReason::RoleNotFound`]), remembered for a minute
//!   ([`super::lookups::ROLE_NOT_FOUND_TTL`]), as Karpenter's `RoleNotFoundErrorCache` is.
//!
//! Karpenter names a new profile each time a class's role changes (a random suffix kept in
//! the class's status) and leaves the old one to the nodes that use it until its garbage
//! collection deletes it. Carpool keeps no status, so the role is part of the name: a new
//! role is a new profile, the old one stays with the nodes launched with it, and nothing
//! removes a role from a profile. Carpool does not delete the profiles it made (no
//! `iam:DeleteInstanceProfile`); a class's profiles are left when the class goes.

use std::collections::BTreeMap;

use aws_sdk_iam::error::ProvideErrorMetadata;
use aws_sdk_iam::types::Tag;
use carpool::model::EC2NodeClass;
use carpool::ports::{CloudError, NodeClassReason};

use super::errors::map_sdk_err;
use super::fleet::{CLUSTER_TAG, merged_tags};
use super::lookups::Lookups;

/// How the names of the profiles Carpool makes start; the IAM policy allows creating and
/// changing only `instance-profile/carpool_<cluster>_*`.
pub const PROFILE_PREFIX: &str = "carpool_";
/// The tag naming the EC2NodeClass a profile was made for (Karpenter's is
/// `karpenter.k8s.aws/ec2nodeclass`).
pub const NODECLASS_TAG: &str = "carpool.sh/ec2nodeclass";
/// The tag naming the deployment (`CARPOOL_DEPLOYMENT`, else the cluster) that made a
/// profile.
pub const MANAGED_BY_TAG: &str = "carpool.sh/managed-by";

/// The longest instance profile name IAM accepts.
const MAX_PROFILE_NAME: usize = 128;

/// The node role the deployment made an instance profile for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRole {
    /// The IAM role name (an ARN is accepted and compared by its name).
    pub role: String,
    /// The instance profile holding it.
    pub instance_profile: String,
}

/// Where a class's instance profile comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileChoice {
    /// The class names neither a role nor a profile: the template has none.
    None,
    /// A profile used as named: the class's `instanceProfile`, or the configured node
    /// role's.
    Named(String),
    /// The class's `role` (as written), for which Carpool makes or reuses its own profile.
    Managed {
        /// The class's `spec.role`.
        role: String,
    },
}

/// The role's name: the last path segment of an ARN, or the name itself
/// (AddRoleToInstanceProfile takes names without paths, as Karpenter's `ensureRole` notes).
pub fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

/// Where the instance profile of a class comes from: its `instanceProfile`, else the
/// configured profile if its `role` is the configured role, else a profile of Carpool's for
/// its role, else none when it names neither.
pub fn choice(node_class: &EC2NodeClass, configured: Option<&NodeRole>) -> ProfileChoice {
    let spec = &node_class.spec;
    if let Some(profile) = &spec.instance_profile {
        return ProfileChoice::Named(profile.clone());
    }
    let Some(role) = &spec.role else {
        return ProfileChoice::None;
    };
    match configured {
        Some(c) if role_name(&c.role) == role_name(role) => ProfileChoice::Named(c.instance_profile.clone()),
        _ => ProfileChoice::Managed { role: role.clone() },
    }
}

/// The name of the profile Carpool makes for `role` of class `node_class` in `cluster`
/// and `region`: `carpool_<cluster>_<16 hex digits>`, the digits FNV-1a 64 of the four
/// (Karpenter: `<cluster>_<hash of region, class and a random id>`). Characters IAM does not
/// allow in a name are left out of the cluster part, which is cut so the name fits 128.
pub fn profile_name(cluster: &str, region: &str, node_class: &str, role: &str) -> String {
    let hash = carpool::model::content_hash::fnv1a64(
        format!("{cluster}\n{region}\n{node_class}\n{}", role_name(role)).as_bytes(),
    );
    let room = MAX_PROFILE_NAME - PROFILE_PREFIX.len() - 1 - 16;
    let cluster: String = cluster
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(*c))
        .take(room)
        .collect();
    format!("{PROFILE_PREFIX}{cluster}_{hash:016x}")
}

/// The profile Carpool makes for one class's role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedProfile {
    /// Its name ([`profile_name`]).
    pub name: String,
    /// The class's `spec.role`, as written.
    pub role: String,
    /// The EC2NodeClass's name.
    pub node_class: String,
    /// Its tags: the class's `spec.tags`, overlaid with Carpool's (cluster, class,
    /// managed-by), which win; Karpenter also tags its profiles with the class's tags.
    pub tags: BTreeMap<String, String>,
}

impl ManagedProfile {
    /// The profile for `role` of `node_class`, made by `managed_by` (the deployment, else
    /// the cluster).
    pub fn new(cluster: &str, region: &str, node_class: &EC2NodeClass, role: &str, managed_by: &str) -> Self {
        let class = node_class.name();
        ManagedProfile {
            name: profile_name(cluster, region, class, role),
            role: role.to_string(),
            node_class: class.to_string(),
            tags: merged_tags(
                &node_class.spec.tags,
                [
                    (CLUSTER_TAG, cluster),
                    (NODECLASS_TAG, class),
                    (MANAGED_BY_TAG, managed_by),
                ],
            ),
        }
    }

    /// The role's name, as IAM takes it.
    pub fn role_name(&self) -> &str {
        role_name(&self.role)
    }

    fn role_not_found(&self, source: Option<carpool::ports::BoxError>) -> CloudError {
        CloudError::NodeClass {
            node_class: self.node_class.clone(),
            reason: NodeClassReason::RoleNotFound {
                role: self.role.clone(),
            },
            source,
        }
    }
}

/// What a profile holds, by role name; `None` when IAM says it does not exist.
async fn held_roles(iam: &aws_sdk_iam::Client, name: &str) -> Result<Option<Vec<String>>, CloudError> {
    match iam.get_instance_profile().instance_profile_name(name).send().await {
        Ok(out) => Ok(Some(
            out.instance_profile()
                .map(|p| p.roles().iter().map(|r| r.role_name().to_string()).collect())
                .unwrap_or_default(),
        )),
        Err(e) if e.code() == Some("NoSuchEntity") => Ok(None),
        Err(e) => Err(map_sdk_err("GetInstanceProfile", e)),
    }
}

/// A profile holding a role that is not the one its name was made for: changed by hand.
fn held_by_another(profile: &ManagedProfile, held: &[String]) -> CloudError {
    CloudError::Api(
        format!(
            "instance profile {} holds role {}, not {}: it was changed outside Carpool, which names \
             its profiles by role and does not replace their roles",
            profile.name,
            held.join(", "),
            profile.role_name()
        )
        .into(),
    )
}

/// Creates the profile, tagged; one that exists already (made by a concurrent launch) is
/// fine.
async fn create(iam: &aws_sdk_iam::Client, profile: &ManagedProfile) -> Result<(), CloudError> {
    let tags = profile
        .tags
        .iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CloudError::Api(Box::new(e)))?;
    match iam
        .create_instance_profile()
        .instance_profile_name(&profile.name)
        .set_tags(Some(tags))
        .send()
        .await
    {
        Ok(_) => {
            tracing::info!(
                instance_profile = %profile.name, role = %profile.role, node_class = %profile.node_class,
                "created an instance profile for the class's role"
            );
            Ok(())
        }
        Err(e) if e.code() == Some("EntityAlreadyExists") => Ok(()),
        Err(e) => Err(map_sdk_err("CreateInstanceProfile", e)),
    }
}

/// Adds the role to the (empty) profile. IAM's `NoSuchEntity` names the role or the profile
/// in its message: only the role's is the class's error (Karpenter's
/// `IsRoleNotFoundError` tells them apart the same way).
async fn add_role(iam: &aws_sdk_iam::Client, lookups: &Lookups, profile: &ManagedProfile) -> Result<(), CloudError> {
    let added = iam
        .add_role_to_instance_profile()
        .instance_profile_name(&profile.name)
        .role_name(profile.role_name())
        .send()
        .await;
    match added {
        Ok(_) => Ok(()),
        Err(e)
            if e.code() == Some("NoSuchEntity")
                && !e
                    .message()
                    .unwrap_or_default()
                    .to_lowercase()
                    .contains("instance profile") =>
        {
            let message = e.message().unwrap_or("no such role").to_string();
            lookups.missing_roles.put(profile.role_name().to_string(), message);
            Err(profile.role_not_found(Some(Box::new(e))))
        }
        // A profile holds one role: a concurrent launch added it first. Ours, or not?
        Err(e) if e.code() == Some("LimitExceeded") => match held_roles(iam, &profile.name).await? {
            Some(held) if held.iter().any(|r| r == profile.role_name()) => Ok(()),
            Some(held) => Err(held_by_another(profile, &held)),
            None => Err(map_sdk_err("AddRoleToInstanceProfile", e)),
        },
        Err(e) => Err(map_sdk_err("AddRoleToInstanceProfile", e)),
    }
}

/// The name of `profile`, made if it does not exist and holding its role: from the lookups
/// when known, else GetInstanceProfile, then CreateInstanceProfile (with its tags) when IAM
/// does not know it and AddRoleToInstanceProfile when it holds no role, as Karpenter's
/// `DefaultProvider.Create` does.
pub async fn ensure(
    iam: &aws_sdk_iam::Client,
    lookups: &Lookups,
    profile: &ManagedProfile,
) -> Result<String, CloudError> {
    if lookups.instance_profiles.get(&profile.name).is_some() {
        return Ok(profile.name.clone());
    }
    if let Some(message) = lookups.missing_roles.get(&profile.role_name().to_string()) {
        return Err(profile.role_not_found(Some(message.into())));
    }
    let held = match held_roles(iam, &profile.name).await? {
        Some(held) => held,
        None => {
            create(iam, profile).await?;
            Vec::new()
        }
    };
    match held.as_slice() {
        [] => add_role(iam, lookups, profile).await?,
        [one] if one == profile.role_name() => {}
        _ => return Err(held_by_another(profile, &held)),
    }
    lookups.instance_profiles.put(profile.name.clone(), ());
    Ok(profile.name.clone())
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
        assert_eq!(choice(&c, None), ProfileChoice::Named("MyProfile".into()));
        assert_eq!(
            choice(&c, Some(&configured())),
            ProfileChoice::Named("MyProfile".into())
        );
    }

    #[test]
    fn the_configured_role_gets_the_configured_profile() {
        let c = class(serde_json::json!({ "role": "CarpoolNodeRole" }));
        assert_eq!(
            choice(&c, Some(&configured())),
            ProfileChoice::Named("CarpoolNodeProfile".into())
        );
        let arn = class(serde_json::json!({ "role": "arn:aws:iam::123456789012:role/CarpoolNodeRole" }));
        assert_eq!(
            choice(&arn, Some(&configured())),
            ProfileChoice::Named("CarpoolNodeProfile".into())
        );
        assert_eq!(
            choice(&class(serde_json::json!({})), Some(&configured())),
            ProfileChoice::None
        );
    }

    #[test]
    fn another_role_gets_a_profile_of_carpools() {
        let c = class(serde_json::json!({ "role": "KarpenterNodeRole-demo" }));
        for configured in [Some(configured()), None] {
            assert_eq!(
                choice(&c, configured.as_ref()),
                ProfileChoice::Managed {
                    role: "KarpenterNodeRole-demo".into()
                }
            );
        }
    }

    /// Karpenter's `InstanceProfileName` is `<cluster>_<hash>` of the region and class
    /// (`pkg/apis/v1/ec2nodeclass.go`); Carpool's adds its prefix (the IAM policy's scope)
    /// and the role (no status to keep a random suffix in).
    #[test]
    fn the_profile_name_follows_cluster_region_class_and_role() {
        let name = profile_name("demo", "us-east-1", "gpu", "NodeRole");
        assert!(
            name.starts_with("carpool_demo_") && name.len() == "carpool_demo_".len() + 16,
            "{name}"
        );
        assert_eq!(name, profile_name("demo", "us-east-1", "gpu", "NodeRole"));
        assert_eq!(
            name,
            profile_name("demo", "us-east-1", "gpu", "arn:aws:iam::1:role/path/NodeRole"),
            "an ARN names the same role"
        );
        let others = [
            profile_name("demo2", "us-east-1", "gpu", "NodeRole"),
            profile_name("demo", "eu-west-1", "gpu", "NodeRole"),
            profile_name("demo", "us-east-1", "cpu", "NodeRole"),
            profile_name("demo", "us-east-1", "gpu", "OtherRole"),
        ];
        assert!(others.iter().all(|o| *o != name), "{others:?}");
        let long = profile_name(&"c".repeat(200), "us-east-1", "gpu", "NodeRole");
        assert_eq!(long.len(), MAX_PROFILE_NAME);
        let odd = profile_name("a b/c", "us-east-1", "gpu", "NodeRole");
        assert!(odd.starts_with("carpool_abc_"), "{odd}");
    }

    #[test]
    fn the_profile_is_tagged_with_the_cluster_class_and_deployment_over_the_class_tags() {
        let c = class(serde_json::json!({
            "role": "NodeRole",
            "tags": { "team": "ml", "carpool.sh/cluster": "spoofed", "carpool.sh/ec2nodeclass": "x" }
        }));
        let p = ManagedProfile::new("demo", "us-east-1", &c, "NodeRole", "carpool-prod");
        assert_eq!(p.name, profile_name("demo", "us-east-1", "gpu", "NodeRole"));
        assert_eq!(p.role_name(), "NodeRole");
        let tags: Vec<(&str, &str)> = p.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            tags,
            vec![
                ("carpool.sh/cluster", "demo"),
                ("carpool.sh/ec2nodeclass", "gpu"),
                ("carpool.sh/managed-by", "carpool-prod"),
                ("team", "ml"),
            ]
        );
        let e = p.role_not_found(None);
        let msg = e.to_string();
        assert!(msg.contains("EC2NodeClass gpu") && msg.contains("NodeRole"), "{msg}");
    }
}
