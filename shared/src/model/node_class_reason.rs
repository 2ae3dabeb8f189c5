//! Why an EC2NodeClass cannot launch: its reasons as types.

/// The role a deployment made an instance profile for, as a [`NodeClassReason`] names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfiguredNodeRole {
    /// The IAM role.
    pub role: String,
    /// Its instance profile.
    pub instance_profile: String,
}

/// What is wrong with an EC2NodeClass that keeps it from launching. The message follows
/// the class's name (`EC2NodeClass <name> <reason>`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeClassReason {
    /// Its subnet selector terms select no subnet in the zone asked for.
    #[error("selects no subnet in {zone}")]
    NoSubnetInZone {
        /// The zone.
        zone: String,
    },
    /// Its security group selector terms select no security group.
    #[error("selects no security group")]
    NoSecurityGroup,
    /// It sets a `spec.role` that is not the deployment's node role, and no
    /// `spec.instanceProfile`: Carpool does not create instance profiles.
    #[error(
        "sets spec.role {role:?}, but Carpool does not create instance profiles and was deployed {}; set \
         spec.instanceProfile, or deploy Carpool with node role {role:?}",
        match configured {
            Some(c) => format!("with node role {:?} (instance profile {:?})", c.role, c.instance_profile),
            None => "without a node role".to_string(),
        }
    )]
    RoleWithoutInstanceProfile {
        /// The class's `spec.role`.
        role: String,
        /// The deployment's node role, if it has one.
        configured: Option<ConfiguredNodeRole>,
    },
    /// The SSM parameter that names its AMI has no value.
    #[error("reads its AMI from SSM parameter {parameter}, which has no value")]
    EmptySsmParameter {
        /// The parameter's name.
        parameter: String,
    },
    /// The SSM parameter that names its AMI does not exist (SSM answers
    /// `ParameterNotFound`: a typo, or a parameter in another Region or account).
    #[error("reads its AMI from SSM parameter {parameter}, which does not exist")]
    SsmParameterNotFound {
        /// The parameter's name.
        parameter: String,
    },
    /// Its AMI alias names a Windows family, which Carpool does not launch.
    #[error("selects AMI alias {alias:?}: Windows nodes are not supported")]
    WindowsAlias {
        /// The alias.
        alias: String,
    },
    /// Its `amiFamily` is a Windows family, which Carpool does not launch.
    #[error("has amiFamily {family}: Windows nodes are not supported")]
    WindowsFamily {
        /// The family.
        family: String,
    },
    /// Its AMI selector terms select no image (no public parameter for the cluster's
    /// Kubernetes version, or no image matching the terms).
    #[error("selects no AMI{}", if detail.is_empty() { String::new() } else { format!(" ({detail})") })]
    NoImage {
        /// What was looked for.
        detail: String,
    },
    /// Its AMIs boot none of the request's instance types.
    #[error("has no AMI that boots any of {instance_types}")]
    NoImageForTypes {
        /// The request's types, comma-separated.
        instance_types: String,
    },
    /// Its `spec.userData` cannot be merged into the node's user data (the error's source
    /// says why).
    #[error("has a userData that cannot be used")]
    UserData,
}
