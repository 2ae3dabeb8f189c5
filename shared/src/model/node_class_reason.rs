//! Why an EC2NodeClass cannot launch: its reasons as types.

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
    /// Its subnet selector terms select no subnet.
    #[error("selects no subnet")]
    NoSubnet,
    /// Its security group selector terms select no security group.
    #[error("selects no security group")]
    NoSecurityGroup,
    /// Its `spec.role` names an IAM role that does not exist: IAM answers `NoSuchEntity`
    /// when Carpool adds it to the instance profile it makes for the class.
    #[error("sets spec.role {role:?}, which is not an IAM role of the account")]
    RoleNotFound {
        /// The class's `spec.role`.
        role: String,
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
    /// A `capacityReservationSelectorTerms` entry is malformed.
    #[error("has a capacity reservation selector term that cannot be used: {detail}")]
    CapacityReservationSelector {
        /// Which term, and why.
        detail: String,
    },
    /// Its `spec.userData` cannot be merged into the node's user data (the error's source
    /// says why).
    #[error("has a userData that cannot be used")]
    UserData,
}
