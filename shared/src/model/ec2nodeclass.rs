//! Karpenter's `karpenter.k8s.aws/v1` EC2NodeClass: how to launch on EC2.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::kubelet::KubeletConfiguration;
use super::manifest::{ManifestError, Validate};
use super::node_class_reason::NodeClassReason;
use super::quantity::Quantity;

/// The API version Carpool reads.
pub const EC2NODECLASS_API_VERSION: &str = "karpenter.k8s.aws/v1";

/// An EC2NodeClass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClass {
    /// `karpenter.k8s.aws/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `EC2NodeClass`.
    #[serde(default)]
    pub kind: String,
    /// Name, labels, annotations.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired state.
    pub spec: EC2NodeClassSpec,
    /// Status as Karpenter writes it; only `subnets[].zoneID` is read (see
    /// [`crate::decide::provisioning::templates::zone_ids`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// `spec` of an EC2NodeClass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassSpec {
    /// Which subnets to launch in (terms ORed, fields within a term ANDed).
    #[serde(default)]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Which security groups to attach.
    #[serde(default)]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Which capacity reservations its `reserved` capacity comes from (see
    /// [`super::capacity_reservation`]); kept as JSON so that a malformed term makes this
    /// class alone invalid ([`EC2NodeClass::capacity_reservation_terms`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_selector_terms: Vec<serde_json::Value>,
    /// Whether to give instances a public IPv4 address (`associatePublicIPAddress`, as
    /// Karpenter spells it).
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// Which AMIs to use.
    #[serde(default)]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// The AMI family (`AL2023`, `Bottlerocket`, `Custom`...): user data format and defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<String>,
    /// User data merged with Carpool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// The IAM role for the node's instance profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// An existing instance profile, instead of `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Tags for instances, volumes and launch templates.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Kubelet settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Volumes.
    #[serde(default)]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// `RAID0` to use local NVMe for ephemeral storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<String>,
    /// Detailed CloudWatch monitoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance metadata service settings; Karpenter's CRD defaults (IMDSv2 required, hop
    /// limit 1) when unset, as the apiserver fills them in.
    #[serde(default = "MetadataOptions::crd_default", skip_serializing_if = "Option::is_none")]
    pub metadata_options: Option<MetadataOptions>,
    /// An EC2 fleet context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// A subnet selector term: by tags, or by id.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SubnetSelectorTerm {
    /// Tags that must all match (`*` matches any value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// A subnet id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// A security group selector term: by tags, id or name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SecurityGroupSelectorTerm {
    /// Tags that must all match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// A security group id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A security group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An AMI selector term.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// `family@version`, e.g. `al2023@latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Tags that must all match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// An AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// An AMI name (wildcards allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The owner account or alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// An SSM parameter holding the AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// A block device mapping.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// The device name, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Whether this is the root volume (its size is the node's ephemeral storage).
    #[serde(default)]
    pub root_volume: bool,
}

/// An EBS volume.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    /// Size, e.g. `100Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<Quantity>,
    /// `gp3`, `gp2`, `io1`, `io2`, `sc1`, `st1` or `standard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<String>,
    /// Provisioned IOPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// Throughput, MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Whether the volume is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// The KMS key.
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    /// Delete the volume with the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// A snapshot to restore.
    #[serde(default, rename = "snapshotID", skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
}

/// Instance metadata service options.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// `enabled` (the default) or `disabled`.
    #[serde(default = "enabled", skip_serializing_if = "Option::is_none")]
    pub http_endpoint: Option<String>,
    /// `enabled` or `disabled` (the default).
    #[serde(
        default = "disabled",
        rename = "httpProtocolIPv6",
        skip_serializing_if = "Option::is_none"
    )]
    pub http_protocol_ipv6: Option<String>,
    /// Hop limit, 1–64 (default 1).
    #[serde(default = "one", skip_serializing_if = "Option::is_none")]
    pub http_put_response_hop_limit: Option<i64>,
    /// `required` (IMDSv2, the default) or `optional`.
    #[serde(default = "required", skip_serializing_if = "Option::is_none")]
    pub http_tokens: Option<String>,
}

// The defaults of Karpenter v1.15's EC2NodeClass CRD (`metadataOptions` and each of its
// fields), so that a class read from a file is the class the apiserver stores.
fn enabled() -> Option<String> {
    Some("enabled".into())
}
fn disabled() -> Option<String> {
    Some("disabled".into())
}
fn one() -> Option<i64> {
    Some(1)
}
fn required() -> Option<String> {
    Some("required".into())
}

impl MetadataOptions {
    /// The CRD's default `metadataOptions`.
    fn crd_default() -> Option<MetadataOptions> {
        Some(MetadataOptions {
            http_endpoint: enabled(),
            http_protocol_ipv6: disabled(),
            http_put_response_hop_limit: one(),
            http_tokens: required(),
        })
    }
}

/// The user-data format a class's nodes boot with, as Karpenter's AWS provider picks it
/// (`pkg/providers/amifamily`: each family its own bootstrap): `Custom` passes the class's
/// `userData` through verbatim; otherwise the alias's family, or `amiFamily` when the
/// terms have no alias (ids, tags, names, SSM parameters), and AL2023 when neither says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserDataFormat {
    /// AL2023's nodeadm NodeConfig, in a MIME document.
    Al2023,
    /// AL2's `/etc/eks/bootstrap.sh`.
    Al2,
    /// Bottlerocket's TOML settings.
    Bottlerocket,
    /// The class's `userData`, verbatim.
    Custom,
    /// A Windows family, which Carpool does not launch.
    Windows,
}

impl EC2NodeClass {
    /// Its `capacityReservationSelectorTerms`, checked; a malformed one is the class's
    /// reason not to launch.
    pub fn capacity_reservation_terms(
        &self,
    ) -> Result<Vec<super::capacity_reservation::CapacityReservationSelectorTerm>, NodeClassReason> {
        super::capacity_reservation::CapacityReservationSelectorTerm::parse_all(
            &self.spec.capacity_reservation_selector_terms,
        )
        .map_err(|e| NodeClassReason::CapacityReservationSelector { detail: e.to_string() })
    }

    /// The user-data format its nodes boot with (see [`UserDataFormat`]).
    pub fn user_data_format(&self) -> UserDataFormat {
        let family = self.spec.ami_family.as_deref();
        if family == Some("Custom") {
            return UserDataFormat::Custom;
        }
        let alias = self
            .spec
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())
            .map(|a| a.split_once('@').map_or(a, |(f, _)| f).to_ascii_lowercase());
        match alias.as_deref().or(family.map(|_| "")) {
            Some("al2") => UserDataFormat::Al2,
            Some("bottlerocket") => UserDataFormat::Bottlerocket,
            Some(a) if a.starts_with("windows") => UserDataFormat::Windows,
            Some("al2023") | None => UserDataFormat::Al2023,
            Some(_) => match family {
                Some("AL2") => UserDataFormat::Al2,
                Some("Bottlerocket") => UserDataFormat::Bottlerocket,
                Some(f) if f.starts_with("Windows") => UserDataFormat::Windows,
                _ => UserDataFormat::Al2023,
            },
        }
    }
}

const AMI_FAMILIES: &[&str] = &["AL2", "AL2023", "Bottlerocket", "Windows2019", "Windows2022", "Custom"];
const ALIAS_FAMILIES: &[&str] = &["al2", "al2023", "bottlerocket", "windows2019", "windows2022"];
const VOLUME_TYPES: &[&str] = &["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"];
/// Tag keys Carpool and Karpenter set themselves.
const RESTRICTED_TAG_PREFIXES: &[&str] = &[
    "kubernetes.io/cluster/",
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
    "eks:eks-cluster-name",
    "carpool.sh/",
];

fn check_tags(tags: &BTreeMap<String, String>, path: &str) -> Result<(), ManifestError> {
    for (k, v) in tags {
        if k.is_empty() || v.is_empty() {
            return Err(ManifestError::at(path, "tag keys and values must not be empty"));
        }
    }
    Ok(())
}

fn one_of(value: Option<&String>, allowed: &[&str], path: &str) -> Result<(), ManifestError> {
    match value {
        Some(v) if !allowed.contains(&v.as_str()) => Err(ManifestError::at(
            path,
            format!("{v:?} is not allowed; use one of {}", allowed.join(", ")),
        )),
        _ => Ok(()),
    }
}

impl Validate for EC2NodeClass {
    fn validate(&self) -> Result<(), ManifestError> {
        crate::model::manifest::check_type_meta(
            &self.api_version,
            &self.kind,
            EC2NODECLASS_API_VERSION,
            "EC2NodeClass",
            "",
        )?;
        if self.metadata.name.as_deref().unwrap_or_default().is_empty() {
            return Err(ManifestError::at("metadata.name", "an EC2NodeClass needs a name"));
        }
        let s = &self.spec;
        if s.subnet_selector_terms.is_empty() {
            return Err(ManifestError::at(
                "spec.subnetSelectorTerms",
                "at least one term is required",
            ));
        }
        for (i, t) in s.subnet_selector_terms.iter().enumerate() {
            let path = format!("spec.subnetSelectorTerms[{i}]");
            match (t.tags.is_empty(), &t.id) {
                (true, None) => return Err(ManifestError::at(path, "a term needs tags or id")),
                (false, Some(_)) => return Err(ManifestError::at(path, "id cannot be combined with tags")),
                _ => check_tags(&t.tags, &format!("{path}.tags"))?,
            }
        }
        if s.security_group_selector_terms.is_empty() {
            return Err(ManifestError::at(
                "spec.securityGroupSelectorTerms",
                "at least one term is required",
            ));
        }
        for (i, t) in s.security_group_selector_terms.iter().enumerate() {
            let path = format!("spec.securityGroupSelectorTerms[{i}]");
            if t.tags.is_empty() && t.id.is_none() && t.name.is_none() {
                return Err(ManifestError::at(path, "a term needs tags, id or name"));
            }
            if t.id.is_some() && (!t.tags.is_empty() || t.name.is_some()) {
                return Err(ManifestError::at(path, "id cannot be combined with other fields"));
            }
            check_tags(&t.tags, &format!("{path}.tags"))?;
        }
        if s.ami_selector_terms.is_empty() {
            return Err(ManifestError::at(
                "spec.amiSelectorTerms",
                "at least one term is required",
            ));
        }
        let mut alias_family = None;
        for (i, t) in s.ami_selector_terms.iter().enumerate() {
            let path = format!("spec.amiSelectorTerms[{i}]");
            if let Some(alias) = &t.alias {
                if s.ami_selector_terms.len() > 1
                    || !t.tags.is_empty()
                    || t.id.is_some()
                    || t.name.is_some()
                    || t.owner.is_some()
                    || t.ssm_parameter.is_some()
                {
                    return Err(ManifestError::at(
                        path,
                        "alias cannot be combined with other terms or fields",
                    ));
                }
                let (family, version) = alias.split_once('@').unwrap_or((alias.as_str(), ""));
                if !ALIAS_FAMILIES.contains(&family) || version.is_empty() {
                    return Err(ManifestError::at(
                        format!("{path}.alias"),
                        format!(
                            "{alias:?} is not family@version, with family one of {}",
                            ALIAS_FAMILIES.join(", ")
                        ),
                    ));
                }
                if family.starts_with("windows") {
                    // Karpenter launches Windows nodes; Carpool plans and boots Linux ones only.
                    return Err(ManifestError::at(
                        format!("{path}.alias"),
                        format!("{alias:?}: Windows nodes are not supported by Carpool"),
                    ));
                }
                alias_family = Some(family.to_string());
            } else if t.tags.is_empty() && t.id.is_none() && t.name.is_none() && t.ssm_parameter.is_none() {
                return Err(ManifestError::at(
                    path,
                    "a term needs alias, tags, id, name or ssmParameter",
                ));
            }
            check_tags(&t.tags, &format!("{path}.tags"))?;
        }
        one_of(s.ami_family.as_ref(), AMI_FAMILIES, "spec.amiFamily")?;
        match (&alias_family, &s.ami_family) {
            (None, None) => {
                return Err(ManifestError::at(
                    "spec.amiFamily",
                    "required when amiSelectorTerms has no alias",
                ));
            }
            (Some(a), Some(f)) if f != "Custom" && !f.eq_ignore_ascii_case(a) => {
                return Err(ManifestError::at(
                    "spec.amiFamily",
                    format!("{f:?} does not match the alias family {a:?}; leave it unset or use Custom"),
                ));
            }
            _ => {}
        }
        match (&s.role, &s.instance_profile) {
            (None, None) => return Err(ManifestError::at("spec.role", "set role or instanceProfile")),
            (Some(_), Some(_)) => {
                return Err(ManifestError::at(
                    "spec.instanceProfile",
                    "set role or instanceProfile, not both",
                ));
            }
            _ => {}
        }
        for k in s.tags.keys() {
            if RESTRICTED_TAG_PREFIXES.iter().any(|p| k.starts_with(p)) {
                return Err(ManifestError::at(
                    format!("spec.tags[{k}]"),
                    format!("tag {k:?} is restricted"),
                ));
            }
        }
        if let Some(k) = &s.kubelet {
            k.validate("spec.kubelet")?;
            // Karpenter's `validateKubeletFieldsSupported` (aws/karpenter-provider-aws
            // `pkg/controllers/nodeclass/validation.go`): what a family cannot apply is
            // refused rather than dropped at boot, where the node would not be the plan's.
            let format = self.user_data_format();
            if format == UserDataFormat::Bottlerocket && k.pods_per_core.is_some() {
                return Err(ManifestError::at(
                    "spec.kubelet.podsPerCore",
                    "the Bottlerocket AMI family has no setting for podsPerCore; it would be dropped at boot",
                ));
            }
            if matches!(format, UserDataFormat::Al2 | UserDataFormat::Bottlerocket) && !k.other.is_empty() {
                return Err(ManifestError::at(
                    "spec.kubelet",
                    format!(
                        "has fields the {} AMI family does not apply, which would be dropped at boot: {}",
                        if format == UserDataFormat::Al2 {
                            "AL2"
                        } else {
                            "Bottlerocket"
                        },
                        k.other.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            if matches!(format, UserDataFormat::Al2 | UserDataFormat::Bottlerocket) && k.cluster_dns.len() > 1 {
                return Err(ManifestError::at(
                    "spec.kubelet.clusterDNS",
                    format!(
                        "the {} AMI family takes one address, but {} were set",
                        if format == UserDataFormat::Al2 {
                            "AL2"
                        } else {
                            "Bottlerocket"
                        },
                        k.cluster_dns.len()
                    ),
                ));
            }
        }
        if s.block_device_mappings.iter().filter(|m| m.root_volume).count() > 1 {
            return Err(ManifestError::at(
                "spec.blockDeviceMappings",
                "at most one mapping may be the root volume",
            ));
        }
        for (i, m) in s.block_device_mappings.iter().enumerate() {
            let Some(ebs) = &m.ebs else { continue };
            let path = format!("spec.blockDeviceMappings[{i}].ebs");
            one_of(ebs.volume_type.as_ref(), VOLUME_TYPES, &format!("{path}.volumeType"))?;
            if let Some(size) = &ebs.volume_size
                && (size.units_ceil() <= 0 || size.units_ceil() > 64 << 40)
            {
                return Err(ManifestError::at(
                    format!("{path}.volumeSize"),
                    format!("{size} is out of range 1B–64Ti"),
                ));
            }
        }
        one_of(s.instance_store_policy.as_ref(), &["RAID0"], "spec.instanceStorePolicy")?;
        if let Some(m) = &s.metadata_options {
            one_of(
                m.http_endpoint.as_ref(),
                &["enabled", "disabled"],
                "spec.metadataOptions.httpEndpoint",
            )?;
            one_of(
                m.http_protocol_ipv6.as_ref(),
                &["enabled", "disabled"],
                "spec.metadataOptions.httpProtocolIPv6",
            )?;
            one_of(
                m.http_tokens.as_ref(),
                &["required", "optional"],
                "spec.metadataOptions.httpTokens",
            )?;
            if let Some(h) = m.http_put_response_hop_limit
                && !(1..=64).contains(&h)
            {
                return Err(ManifestError::at(
                    "spec.metadataOptions.httpPutResponseHopLimit",
                    format!("{h} is out of range 1–64"),
                ));
            }
        }
        Ok(())
    }
}

impl EC2NodeClass {
    /// A class with this name and an empty spec (tests and the simulator fill the rest).
    pub fn named(name: &str) -> Self {
        EC2NodeClass {
            api_version: "karpenter.k8s.aws/v1".into(),
            kind: "EC2NodeClass".into(),
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: EC2NodeClassSpec::default(),
            status: None,
        }
    }

    /// The class's name.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The size of the root volume in bytes, when the class sets one: the mapping marked
    /// `rootVolume`, else the AL2/AL2023 root device `/dev/xvda`.
    pub fn root_volume_bytes(&self) -> Option<i64> {
        let mappings = &self.spec.block_device_mappings;
        let root = mappings
            .iter()
            .find(|m| m.root_volume)
            .or_else(|| mappings.iter().find(|m| m.device_name.as_deref() == Some("/dev/xvda")))?;
        root.ebs.as_ref()?.volume_size.as_ref().map(Quantity::units_ceil)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::EC2NodeClassBuilder;
    use serde_json::json;

    fn format(terms: serde_json::Value, family: Option<&str>) -> UserDataFormat {
        let mut b = EC2NodeClassBuilder::new("c").set("amiSelectorTerms", terms);
        if let Some(f) = family {
            b = b.set("amiFamily", json!(f));
        }
        b.typed().unwrap().user_data_format()
    }

    /// Karpenter's AWS provider bootstraps each family its own way
    /// (`pkg/providers/amifamily`, `GetAMIFamily`): the alias's family, else `amiFamily`,
    /// whatever term selects the AMI; `Custom` is the class's userData alone.
    #[test]
    fn the_family_says_the_user_data_format_for_every_selector_form() {
        let forms = [
            json!([{"id": "ami-0123456789abcdef0"}]),
            json!([{"tags": {"team": "web"}}]),
            json!([{"name": "my-image-*"}]),
            json!([{"ssmParameter": "/my/ami"}]),
        ];
        for terms in forms {
            assert_eq!(format(terms.clone(), Some("AL2023")), UserDataFormat::Al2023, "{terms}");
            assert_eq!(format(terms.clone(), Some("AL2")), UserDataFormat::Al2, "{terms}");
            assert_eq!(
                format(terms.clone(), Some("Bottlerocket")),
                UserDataFormat::Bottlerocket,
                "{terms}"
            );
            assert_eq!(format(terms.clone(), Some("Custom")), UserDataFormat::Custom, "{terms}");
            assert_eq!(
                format(terms.clone(), Some("Windows2022")),
                UserDataFormat::Windows,
                "{terms}"
            );
        }
        assert_eq!(
            format(json!([{"alias": "bottlerocket@latest"}]), None),
            UserDataFormat::Bottlerocket
        );
        assert_eq!(format(json!([{"alias": "al2@latest"}]), None), UserDataFormat::Al2);
        assert_eq!(
            format(json!([{"alias": "al2023@v20250101"}]), None),
            UserDataFormat::Al2023
        );
        assert_eq!(
            format(json!([{"alias": "al2023@latest"}]), Some("Custom")),
            UserDataFormat::Custom
        );
    }

    /// Karpenter's `validateKubeletFieldsSupported`: Bottlerocket has no podsPerCore, and
    /// AL2 and Bottlerocket take one cluster DNS address; AL2023 takes both.
    #[test]
    fn kubelet_fields_a_family_cannot_apply_make_the_class_invalid() {
        let class = |alias: &str, kubelet: serde_json::Value| {
            EC2NodeClassBuilder::standard()
                .ami_alias(alias)
                .set("kubelet", kubelet)
                .typed()
                .unwrap()
        };
        let per_core = json!({"podsPerCore": 10});
        let two_dns = json!({"clusterDNS": ["10.100.0.10", "10.100.0.11"]});
        let err = class("bottlerocket@latest", per_core.clone()).validate().unwrap_err();
        assert!(err.to_string().contains("spec.kubelet.podsPerCore"), "{err}");
        assert!(class("al2023@latest", per_core).validate().is_ok());
        let err = class("al2@latest", two_dns.clone()).validate().unwrap_err();
        assert!(err.to_string().contains("spec.kubelet.clusterDNS"), "{err}");
        assert!(class("al2023@latest", two_dns).validate().is_ok());
        // Any other upstream field: AL2023 passes it through, the others refuse it.
        let log_size = json!({"containerLogMaxSize": "50Mi", "maxPods": 58});
        let al2023 = class("al2023@latest", log_size.clone());
        assert!(al2023.validate().is_ok());
        let kubelet = al2023.spec.kubelet.unwrap();
        assert_eq!(kubelet.max_pods, Some(58));
        assert_eq!(kubelet.other.get("containerLogMaxSize"), Some(&json!("50Mi")));
        let err = class("bottlerocket@latest", log_size).validate().unwrap_err();
        assert!(err.to_string().contains("containerLogMaxSize"), "{err}");
    }
}
