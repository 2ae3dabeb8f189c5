//! A set of resource amounts in exact integers: what a pod requests or a node offers.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde::{Deserialize, Serialize};

use super::quantity::{QuantityError, parse_k8s};

/// `cpu`.
pub const CPU: &str = "cpu";
/// `memory`.
pub const MEMORY: &str = "memory";
/// `ephemeral-storage`.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// `pods`.
pub const PODS: &str = "pods";
/// NVIDIA GPUs, as the device plugin advertises them.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
/// AMD GPUs.
pub const AMD_GPU: &str = "amd.com/gpu";
/// AWS Inferentia and Trainium devices.
pub const AWS_NEURON: &str = "aws.amazon.com/neuron";
/// AWS Neuron cores.
pub const AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
/// Branch ENIs for security groups per pod.
pub const POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
/// EFA interfaces (the EFA device plugin's resource).
pub const EFA: &str = "vpc.amazonaws.com/efa";

/// Resource amounts: cpu in millicores, memory and storage in bytes, the rest in units.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu_millis: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Pod slots.
    pub pods: i64,
    /// Every other resource (GPUs, hugepages, pod ENIs...), in whole units, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended: BTreeMap<String, i64>,
}

/// A resource list that holds a bad quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resource {resource:?}")]
pub struct ResourceError {
    /// The resource name whose quantity is bad.
    pub resource: String,
    /// The quantity error.
    #[source]
    pub source: QuantityError,
}

impl Resources {
    /// As a Kubernetes resource list: cpu in millicores, memory and storage in `Ki` when
    /// whole, everything else in units.
    pub fn to_k8s(&self) -> BTreeMap<String, K8sQuantity> {
        let bytes = |b: i64| {
            if b % 1024 == 0 {
                format!("{}Ki", b / 1024)
            } else {
                b.to_string()
            }
        };
        self.names()
            .map(|name| {
                let v = self.get(name);
                let text = match name {
                    CPU => format!("{v}m"),
                    MEMORY | EPHEMERAL_STORAGE => bytes(v),
                    _ => v.to_string(),
                };
                (name.to_string(), K8sQuantity(text))
            })
            .collect()
    }

    /// Reads a Kubernetes resource list (`requests`, `allocatable`...).
    pub fn from_k8s(list: &BTreeMap<String, K8sQuantity>) -> Result<Self, ResourceError> {
        let mut r = Resources::default();
        for (name, q) in list {
            let q = parse_k8s(q).map_err(|source| ResourceError {
                resource: name.clone(),
                source,
            })?;
            r.set(name, if name == CPU { q.millis_ceil() } else { q.units_ceil() });
        }
        Ok(r)
    }

    /// The amount of a resource by its Kubernetes name (cpu in millicores).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu_millis,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.pods,
            other => self.extended.get(other).copied().unwrap_or(0),
        }
    }

    /// Sets a resource by its Kubernetes name (cpu in millicores). Zero extended amounts
    /// are not stored, so equal sets compare equal.
    pub fn set(&mut self, name: &str, value: i64) {
        match name {
            CPU => self.cpu_millis = value,
            MEMORY => self.memory = value,
            EPHEMERAL_STORAGE => self.ephemeral_storage = value,
            PODS => self.pods = value,
            other => {
                if value == 0 {
                    self.extended.remove(other);
                } else {
                    self.extended.insert(other.to_string(), value);
                }
            }
        }
    }

    /// The names of the resources held with a non-zero amount.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        [
            (CPU, self.cpu_millis),
            (MEMORY, self.memory),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
            (PODS, self.pods),
        ]
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(n, _)| n)
        .chain(self.extended.keys().map(String::as_str))
    }

    fn combine(&self, other: &Resources, f: impl Fn(i64, i64) -> i64) -> Resources {
        let mut out = Resources {
            cpu_millis: f(self.cpu_millis, other.cpu_millis),
            memory: f(self.memory, other.memory),
            ephemeral_storage: f(self.ephemeral_storage, other.ephemeral_storage),
            pods: f(self.pods, other.pods),
            extended: BTreeMap::new(),
        };
        for name in self.extended.keys().chain(other.extended.keys()) {
            out.set(name, f(self.get(name), other.get(name)));
        }
        out
    }

    /// The sum, resource by resource (saturating).
    pub fn plus(&self, other: &Resources) -> Resources {
        self.combine(other, i64::saturating_add)
    }

    /// The difference, resource by resource (saturating; may go negative).
    pub fn minus(&self, other: &Resources) -> Resources {
        self.combine(other, i64::saturating_sub)
    }

    /// The larger amount of each resource.
    pub fn max(&self, other: &Resources) -> Resources {
        self.combine(other, i64::max)
    }

    /// Whether `self` fits in `capacity`; the error names the first resource that does not.
    /// Resources `self` does not ask for (zero) always fit.
    pub fn fits_in(&self, capacity: &Resources) -> Result<(), &str> {
        let fixed = [
            (CPU, self.cpu_millis, capacity.cpu_millis),
            (MEMORY, self.memory, capacity.memory),
            (EPHEMERAL_STORAGE, self.ephemeral_storage, capacity.ephemeral_storage),
            (PODS, self.pods, capacity.pods),
        ];
        if let Some((name, _, _)) = fixed.iter().find(|(_, need, have)| *need > 0 && need > have) {
            return Err(name);
        }
        for (name, need) in &self.extended {
            if *need > 0 && *need > capacity.extended.get(name).copied().unwrap_or(0) {
                return Err(name);
            }
        }
        Ok(())
    }

    /// Whether any amount is below zero.
    pub fn any_negative(&self) -> Option<&str> {
        [
            (CPU, self.cpu_millis),
            (MEMORY, self.memory),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
            (PODS, self.pods),
        ]
        .into_iter()
        .find(|(_, v)| *v < 0)
        .map(|(n, _)| n)
        .or_else(|| self.extended.iter().find(|(_, v)| **v < 0).map(|(n, _)| n.as_str()))
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu={}m memory={}Mi", self.cpu_millis, self.memory / (1 << 20))?;
        if self.ephemeral_storage != 0 {
            write!(f, " ephemeral-storage={}Mi", self.ephemeral_storage / (1 << 20))?;
        }
        if self.pods != 0 {
            write!(f, " pods={}", self.pods)?;
        }
        for (name, v) in &self.extended {
            write!(f, " {name}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, K8sQuantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
            .collect()
    }

    #[test]
    fn resource_lists_become_exact_amounts() {
        let r = Resources::from_k8s(&list(&[("cpu", "250m"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")])).unwrap();
        assert_eq!(r.cpu_millis, 250);
        assert_eq!(r.memory, 1 << 30);
        assert_eq!(r.get(NVIDIA_GPU), 1);
    }

    #[test]
    fn a_bad_quantity_names_its_resource() {
        let err = Resources::from_k8s(&list(&[("memory", "1Gb")])).unwrap_err();
        assert_eq!(err.resource, "memory");
        assert!(crate::error_chain::Chain(&err).to_string().contains("\"1Gb\""));
    }

    #[test]
    fn fit_names_the_resource_that_does_not_fit() {
        let need = Resources::from_k8s(&list(&[("cpu", "2"), ("nvidia.com/gpu", "1")])).unwrap();
        let have = Resources::from_k8s(&list(&[("cpu", "4"), ("memory", "8Gi")])).unwrap();
        assert_eq!(need.fits_in(&have), Err(NVIDIA_GPU));
        assert!(need.minus(&need).fits_in(&have).is_ok());
    }
}
