//! What each NodePool may launch, read from the NodePool, its EC2NodeClass and the catalog
//! with the checker's own requirement matching.
//!
//! A NodePool's requirements (`spec.template.spec.requirements`, its template labels as
//! `In` requirements, and `karpenter.sh/nodepool In [name]`, as Karpenter's
//! `scheduling.NewNodeSelectorRequirementsWithMinValues` and `NodeClaimTemplate` build
//! them) must all hold on the labels of any node it launches: the instance type's labels,
//! zone, capacity type and region, and the labels the plan gives the node. Operators are
//! Karpenter's (`In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, `Gte`, `Lte`).
//! `minValues` asks that a launch's instance types span that many distinct values of the
//! key (Karpenter's `Requirements.HasMinValues`). Limits are summed over the pool's existing
//! nodes' capacity and the plan's new nodes' capacity (Karpenter's
//! `NodePool.Spec.Limits.ExceededBy`). A snapshot without NodePools gets the planner's
//! default NodePool, restated here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node as K8sNode, Taint};

use super::selector::{self, Labels};
use crate::catalog::RegionCatalog;
use crate::catalog::allocatable::{NodeSettings, with_settings};
use crate::model::manifest::from_yaml;
use crate::model::well_known as wk;
use crate::model::{CapacityType, EC2NodeClass, InstanceType, NodePool, Resources};

/// The NodePool the planner uses when the input has none (its `DEFAULT_NODEPOOL`).
const DEFAULT_NODEPOOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot]}
      - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
      - {key: kubernetes.io/os, operator: In, values: [linux]}
      - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
      - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["2"]}
"#;

/// One requirement: key, operator, values, minValues.
#[derive(Clone, Debug)]
pub(crate) struct Req {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
    pub min_values: Option<u32>,
}

impl Req {
    /// Whether a label value (or its absence) satisfies it.
    pub fn allows(&self, value: Option<&str>) -> bool {
        selector::value_satisfies(&self.operator, &self.values, value)
    }
}

/// A NodePool, read for checking.
pub(crate) struct Pool {
    pub name: String,
    pub requirements: Vec<Req>,
    /// `spec.taints`: pods on its nodes must tolerate them.
    pub taints: Vec<Taint>,
    /// Template labels and `karpenter.sh/nodepool`.
    pub labels: Labels,
    pub settings: NodeSettings,
    /// Limits by resource (`cpu` in millicores, `nodes` a count).
    pub limits: BTreeMap<String, i64>,
    /// What the pool's existing nodes use against the limits.
    pub used: BTreeMap<String, i64>,
}

/// A type's offering a pool allows: the labels of such a node (without the plan's own).
pub(crate) struct Offer<'a> {
    pub instance_type: &'a InstanceType,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub labels: Labels,
}

fn settings(class: Option<&EC2NodeClass>) -> NodeSettings {
    NodeSettings {
        kubelet: class.and_then(|c| c.spec.kubelet.clone()).unwrap_or_default(),
        root_volume_bytes: class.and_then(EC2NodeClass::root_volume_bytes),
        instance_store_raid0: class.and_then(|c| c.spec.instance_store_policy.as_deref())
            == Some(crate::catalog::allocatable::INSTANCE_STORE_RAID0),
        extra_ebs_volumes: class.map_or(0, |c| {
            crate::catalog::allocatable::extra_ebs_volumes(&c.spec.block_device_mappings)
        }),
        bottlerocket: class
            .is_some_and(|c| c.user_data_format() == crate::model::ec2nodeclass::UserDataFormat::Bottlerocket),
    }
}

fn used(pool: &str, nodes: &[K8sNode]) -> BTreeMap<String, i64> {
    let mut used = BTreeMap::new();
    let mine = nodes.iter().filter(|n| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(wk::NODEPOOL))
            .map(String::as_str)
            == Some(pool)
    });
    for n in mine {
        *used.entry("nodes".to_string()).or_insert(0) += 1;
        let capacity = n.status.as_ref().and_then(|s| s.capacity.as_ref());
        if let Some(r) = capacity.and_then(|c| Resources::from_k8s(c).ok()) {
            for name in r.names() {
                *used.entry(name.to_string()).or_insert(0) += r.get(name);
            }
        }
    }
    used
}

/// The pools of the snapshot (or the default one).
pub(crate) fn pools(nodepools: &[NodePool], classes: &[EC2NodeClass], nodes: &[K8sNode]) -> Vec<Pool> {
    let default;
    let list: &[NodePool] = if nodepools.is_empty() {
        default = from_yaml::<NodePool>(DEFAULT_NODEPOOL).ok();
        default.as_slice()
    } else {
        nodepools
    };
    list.iter()
        .map(|p| {
            let spec = &p.spec.template.spec;
            let mut requirements: Vec<Req> = spec
                .requirements
                .iter()
                .map(|r| Req {
                    key: r.key.clone(),
                    operator: r.operator.to_string(),
                    values: r.values.clone(),
                    min_values: r.min_values,
                })
                .collect();
            let mut labels = p.spec.template.metadata.labels.clone();
            labels.insert(wk::NODEPOOL.into(), p.name().into());
            for (k, v) in &labels {
                requirements.push(Req {
                    key: k.clone(),
                    operator: "In".into(),
                    values: vec![v.clone()],
                    min_values: None,
                });
            }
            let class = classes.iter().find(|c| c.name() == spec.node_class_ref.name);
            let limits = p
                .spec
                .limits
                .iter()
                .map(|(k, q)| (k.clone(), if k == "cpu" { q.millis_ceil() } else { q.units_ceil() }))
                .collect();
            Pool {
                name: p.name().to_string(),
                requirements,
                taints: spec.taints.clone(),
                labels,
                settings: settings(class),
                limits,
                used: used(p.name(), nodes),
            }
        })
        .collect()
}

impl Pool {
    /// The first requirement these labels break.
    pub fn unmet(&self, labels: &Labels) -> Option<&Req> {
        self.requirements
            .iter()
            .find(|r| !r.allows(labels.get(&r.key).map(String::as_str)))
    }

    /// The pool's requirements on a key.
    pub fn on_key<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Req> + Clone + 'a {
        self.requirements.iter().filter(move |r| r.key == key)
    }

    /// Every offering of the region the pool allows on the keys an offering defines (the
    /// type's labels, zone, capacity type, region, and the well-known instance labels a type
    /// may lack, such as its GPU count); requirements on other keys are left to the node's
    /// own labels.
    pub fn offers<'a>(&self, region: &RegionCatalog<'a>) -> Vec<Offer<'a>> {
        let mut out = Vec::new();
        for &it in region.types() {
            for o in region.offerings_of(it) {
                let mut labels = it.labels();
                labels.insert(wk::ZONE.into(), o.zone.clone());
                labels.insert(wk::CAPACITY_TYPE.into(), o.capacity_type.label().into());
                labels.insert(wk::REGION.into(), region.region().into());
                let ok = self
                    .requirements
                    .iter()
                    .filter(|r| labels.contains_key(&r.key) || wk::OFFERING_LABELS.contains(&r.key.as_str()))
                    .all(|r| r.allows(labels.get(&r.key).map(String::as_str)));
                if ok {
                    out.push(Offer {
                        instance_type: it,
                        zone: o.zone,
                        capacity_type: o.capacity_type,
                        labels,
                    });
                }
            }
        }
        out
    }

    /// The type with the pool's EC2NodeClass settings (capacity and allocatable).
    pub fn shaped(&self, it: &InstanceType) -> InstanceType {
        with_settings(it, &self.settings)
    }

    /// The first `minValues` requirement that these instance types' labels do not meet:
    /// (key, minValues, distinct values found).
    pub fn min_values_unmet<'l>(
        &self,
        types: impl IntoIterator<Item = &'l Labels> + Clone,
    ) -> Option<(String, u32, usize)> {
        for r in &self.requirements {
            let Some(min) = r.min_values else { continue };
            let mut distinct: Vec<&String> = types
                .clone()
                .into_iter()
                .filter_map(|l| l.get(&r.key))
                .filter(|v| r.allows(Some(v)))
                .collect();
            distinct.sort();
            distinct.dedup();
            if distinct.len() < min as usize {
                return Some((r.key.clone(), min, distinct.len()));
            }
        }
        None
    }
}
