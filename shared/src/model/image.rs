//! An image an EC2NodeClass resolves to, and the instance types it boots.

use serde::{Deserialize, Serialize};

use crate::model::{Arch, InstanceType};

/// Which instance types an image boots besides its architecture, as Karpenter's AMI
/// variants say (`pkg/providers/amifamily/types.go`, `Variant.Requirements`): a standard
/// image boots types with neither GPUs nor accelerators, an NVIDIA image types with GPUs,
/// a Neuron image types with Inferentia or Trainium devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageVariant {
    /// No GPU, no accelerator.
    Standard,
    /// NVIDIA GPUs (`karpenter.k8s.aws/instance-gpu-count` exists).
    Nvidia,
    /// AWS Neuron devices (`karpenter.k8s.aws/instance-accelerator-count` exists).
    Neuron,
}

impl ImageVariant {
    /// Whether an image of this variant boots `it` (its architecture aside).
    pub fn boots(self, it: &InstanceType) -> bool {
        match self {
            ImageVariant::Standard => it.gpu_count == 0 && it.neuron_devices == 0,
            ImageVariant::Nvidia => it.gpu_count > 0,
            ImageVariant::Neuron => it.neuron_devices > 0,
        }
    }
}

/// An AMI an EC2NodeClass resolves to, with the instance types it can boot.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResolvedImage {
    /// `ami-…`.
    pub id: String,
    /// Its architecture; `None` when unknown (an AMI named by id or SSM parameter whose
    /// architecture was not read): it constrains no type.
    pub arch: Option<Arch>,
    /// Its variants; empty when unknown: it constrains no type by accelerator.
    pub variants: Vec<ImageVariant>,
}

impl ResolvedImage {
    /// An image of `arch` with these variants.
    pub fn new(id: impl Into<String>, arch: Arch, variants: &[ImageVariant]) -> Self {
        ResolvedImage {
            id: id.into(),
            arch: Some(arch),
            variants: variants.to_vec(),
        }
    }

    /// An image whose architecture and variants are unknown: it boots any type.
    pub fn unconstrained(id: impl Into<String>) -> Self {
        ResolvedImage {
            id: id.into(),
            arch: None,
            variants: Vec::new(),
        }
    }

    /// Whether this image boots `it`: its architecture, and one of its variants.
    pub fn boots(&self, it: &InstanceType) -> bool {
        self.arch.is_none_or(|a| a == it.arch)
            && (self.variants.is_empty() || self.variants.iter().any(|v| v.boots(it)))
    }
}
