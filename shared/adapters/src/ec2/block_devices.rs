//! The volumes of a launch template: the EC2NodeClass's `blockDeviceMappings`, or, when it
//! sets none, AL2023's root volume as Karpenter makes it (`/dev/xvda`, 20Gi gp3, encrypted).

use aws_sdk_ec2::types::{LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest, VolumeType};
use carpool::model::EC2NodeClass;
use serde::Serialize;

/// The root device of AL2023 AMIs.
pub const DEFAULT_ROOT_DEVICE: &str = "/dev/xvda";
/// The size of the default root volume, GiB (Karpenter's default for AL2023).
pub const DEFAULT_ROOT_GIB: i32 = 20;

const GIB: i128 = 1 << 30;
const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// One volume of a launch template, part of its hashed content.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct BlockDeviceContent {
    /// E.g. `/dev/xvda`.
    pub device_name: Option<String>,
    /// Size in GiB, rounded up.
    pub volume_size_gib: Option<i32>,
    /// `gp3`, `io2`, ...
    pub volume_type: Option<String>,
    /// Provisioned IOPS.
    pub iops: Option<i32>,
    /// Throughput, MiB/s.
    pub throughput: Option<i32>,
    /// Encrypted.
    pub encrypted: Option<bool>,
    /// The KMS key.
    pub kms_key_id: Option<String>,
    /// Deleted with the instance.
    pub delete_on_termination: Option<bool>,
    /// The snapshot to restore.
    pub snapshot_id: Option<String>,
}

/// Whole GiB in a quantity of bytes, rounded up; `None` when it does not fit an `i32`.
fn gib(size: &carpool::model::Quantity) -> Option<i32> {
    let bytes = size.nanos().div_euclid(NANOS_PER_UNIT);
    let whole = (bytes + GIB - 1).div_euclid(GIB);
    i32::try_from(whole).ok()
}

/// The volumes of a class, in its order; the AL2023 default root when it names none.
pub fn block_devices(node_class: &EC2NodeClass) -> Vec<BlockDeviceContent> {
    let mappings = &node_class.spec.block_device_mappings;
    if mappings.is_empty() {
        return vec![BlockDeviceContent {
            device_name: Some(DEFAULT_ROOT_DEVICE.into()),
            volume_size_gib: Some(DEFAULT_ROOT_GIB),
            volume_type: Some("gp3".into()),
            encrypted: Some(true),
            ..BlockDeviceContent::default()
        }];
    }
    mappings
        .iter()
        .map(|m| {
            let ebs = m.ebs.clone().unwrap_or_default();
            BlockDeviceContent {
                device_name: m.device_name.clone(),
                volume_size_gib: ebs.volume_size.as_ref().and_then(gib),
                volume_type: ebs.volume_type,
                iops: ebs.iops.and_then(|i| i32::try_from(i).ok()),
                throughput: ebs.throughput.and_then(|t| i32::try_from(t).ok()),
                encrypted: ebs.encrypted,
                kms_key_id: ebs.kms_key_id,
                delete_on_termination: ebs.delete_on_termination,
                snapshot_id: ebs.snapshot_id,
            }
        })
        .collect()
}

impl BlockDeviceContent {
    /// The launch template's mapping.
    pub fn request(&self) -> LaunchTemplateBlockDeviceMappingRequest {
        let ebs = LaunchTemplateEbsBlockDeviceRequest::builder()
            .set_volume_size(self.volume_size_gib)
            .set_volume_type(self.volume_type.as_deref().map(VolumeType::from))
            .set_iops(self.iops)
            .set_throughput(self.throughput)
            .set_encrypted(self.encrypted)
            .set_kms_key_id(self.kms_key_id.clone())
            .set_delete_on_termination(self.delete_on_termination)
            .set_snapshot_id(self.snapshot_id.clone())
            .build();
        LaunchTemplateBlockDeviceMappingRequest::builder()
            .set_device_name(self.device_name.clone())
            .ebs(ebs)
            .build()
    }
}

#[cfg(test)]
mod tests {
    use carpool::fixtures::EC2NodeClassBuilder;

    use super::*;

    fn class(spec: serde_json::Value) -> EC2NodeClass {
        EC2NodeClassBuilder::new("default").spec(spec).typed().unwrap()
    }

    #[test]
    fn without_mappings_the_root_is_20gi_gp3_encrypted() {
        let got = block_devices(&class(serde_json::json!({})));
        assert_eq!(got.len(), 1);
        let root = &got[0];
        assert_eq!(root.device_name.as_deref(), Some("/dev/xvda"));
        assert_eq!(root.volume_size_gib, Some(20));
        assert_eq!(root.volume_type.as_deref(), Some("gp3"));
        assert_eq!(root.encrypted, Some(true));
        let request = root.request();
        assert_eq!(request.ebs().and_then(|e| e.volume_size()), Some(20));
        assert_eq!(
            request.ebs().and_then(|e| e.volume_type()).map(|t| t.as_str()),
            Some("gp3")
        );
    }

    #[test]
    fn the_class_mappings_are_taken_field_by_field() {
        let got = block_devices(&class(serde_json::json!({
            "blockDeviceMappings": [{
                "deviceName": "/dev/xvdb",
                "ebs": {
                    "volumeSize": "100Gi", "volumeType": "io2", "iops": 4000, "throughput": 250,
                    "encrypted": true, "kmsKeyID": "arn:aws:kms:us-east-1:1:key/k",
                    "deleteOnTermination": false, "snapshotID": "snap-1"
                }
            }, {
                "deviceName": "/dev/xvdc",
                "ebs": { "volumeSize": "1500M" }
            }]
        })));
        assert_eq!(
            got[0],
            BlockDeviceContent {
                device_name: Some("/dev/xvdb".into()),
                volume_size_gib: Some(100),
                volume_type: Some("io2".into()),
                iops: Some(4000),
                throughput: Some(250),
                encrypted: Some(true),
                kms_key_id: Some("arn:aws:kms:us-east-1:1:key/k".into()),
                delete_on_termination: Some(false),
                snapshot_id: Some("snap-1".into()),
            }
        );
        assert_eq!(got[1].volume_size_gib, Some(2), "1.5 GB rounds up to 2 GiB");
        let ebs = got[0].request().ebs.unwrap();
        assert_eq!(ebs.kms_key_id(), Some("arn:aws:kms:us-east-1:1:key/k"));
        assert_eq!(ebs.snapshot_id(), Some("snap-1"));
        assert_eq!(ebs.delete_on_termination(), Some(false));
        assert_eq!(ebs.iops(), Some(4000));
        assert_eq!(ebs.throughput(), Some(250));
    }
}
