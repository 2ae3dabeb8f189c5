//! Drift: a node launched from a NodePool template or EC2NodeClass that has changed since,
//! or from an AMI its EC2NodeClass no longer resolves, is replaced, one at a time, within
//! the pools' `Drifted` budgets (Karpenter's `drift.go`; `NodePool.Hash` and the
//! `karpenter.sh/nodepool-hash` annotation, and `isAMIDrifted` in the AWS provider).
//!
//! Carpool records on the node, at launch:
//! - [`NODEPOOL_HASH`] (a label): [`template_hash`] of its NodePool's template with its
//!   EC2NodeClass's spec, selector terms left out (Karpenter hashes the template alone and
//!   the class apart, each with its selector terms `hash:"ignore"`; one hash is enough to
//!   say "changed"), and [`NODEPOOL_HASH_VERSION`], the version of that hash: a hash is
//!   compared only with a hash of its own version, so a new Carpool that hashes otherwise
//!   does not find every node drifted (Karpenter's `areStaticFieldsDrifted` compares the
//!   hash versions first). A node whose hash is of another version (or of none: launched
//!   before versions) is given the current hash and version instead ([`rebaseline`]), as
//!   Karpenter's hash controllers re-annotate a NodeClaim whose hash version is not the
//!   current one: a change made before that is not drift.
//! - [`IMAGE_ID`] (when known): the AMI it booted.
//!
//! What the selector terms select is compared instead, as Karpenter's AWS provider does:
//! a node whose AMI is no longer among its class's (`isAMIDrifted`), whose subnet is no
//! longer among its class's subnets (`isSubnetDrifted`), or whose security groups are not
//! exactly its class's (`areSecurityGroupsDrifted`) is drifted.
//!
//! A node whose labels its NodePool's requirements no longer allow is drifted too
//! (Karpenter's `areRequirementsDrifted`).
//!
//! A node without them (launched before, or by Karpenter) is not drifted: Karpenter too
//! ignores a NodeClaim without its hash annotation.

use super::Ctx;
use super::candidate::Candidate;
use super::command::{DisruptionCommand, Method};
use crate::decide::provisioning::ami_requirements::images_from_status;
use crate::model::ResolvedImage;
use crate::model::content_hash::content_hash;
use crate::model::well_known::{IMAGE_ID, NODEPOOL_HASH, NODEPOOL_HASH_VERSION};
use crate::model::{EC2NodeClass, InstanceNetwork, NodePool, ResolvedNetwork};
use std::collections::{BTreeMap, BTreeSet};

/// The version of [`template_hash`], recorded beside it ([`NODEPOOL_HASH_VERSION`]). Bump it
/// when what the hash covers changes, as Karpenter bumps `NodePoolHashVersion`.
pub const HASH_VERSION: &str = "v2";

/// The drift hash of a NodePool's template with its EC2NodeClass's spec. The template's
/// requirements are left out, as Karpenter's `NodePool.Hash` leaves them out
/// (`hash:"ignore"`): they drift by the node's labels instead ([`drifted`]), and Carpool
/// narrows them before launching (zones of the class's subnets, types its AMIs boot). So
/// are the class's selector terms (subnets, security groups, AMIs, capacity
/// reservations), as `EC2NodeClass.Hash` leaves them out: what they select is compared
/// instead, so that a selector rewritten to select the same resources drifts nothing.
pub fn template_hash(pool: &NodePool, class: Option<&EC2NodeClass>) -> String {
    let mut template = pool.spec.template.clone();
    template.spec.requirements.clear();
    let spec = class.map(|c| {
        let mut spec = c.spec.clone();
        spec.subnet_selector_terms.clear();
        spec.security_group_selector_terms.clear();
        spec.ami_selector_terms.clear();
        spec.capacity_reservation_selector_terms.clear();
        spec
    });
    content_hash(&(&template, spec))
}

/// The labels that give a node of a managed NodePool whose hash is of another version than
/// [`HASH_VERSION`] (or of none) the current hash and version; `None` for a node that has
/// them, or has no hash at all (not launched by Carpool). kubernetes-sigs/karpenter
/// `pkg/controllers/nodepool/hash` `Controller.updateNodeClaimHash` and the AWS provider's
/// `nodeclass/hash` do the same for NodeClaims.
pub fn rebaseline(c: &Candidate<'_>, classes: &[EC2NodeClass]) -> Option<crate::model::MetadataPatch> {
    let pool = c.pool?;
    recorded(c, NODEPOOL_HASH)?;
    if recorded(c, NODEPOOL_HASH_VERSION) == Some(HASH_VERSION) {
        return None;
    }
    let class = classes
        .iter()
        .find(|k| k.name() == pool.spec.template.spec.node_class_ref.name);
    Some(
        [
            (NODEPOOL_HASH.to_string(), Some(template_hash(pool, class))),
            (NODEPOOL_HASH_VERSION.to_string(), Some(HASH_VERSION.to_string())),
        ]
        .into_iter()
        .collect(),
    )
}

/// The subnets and security groups the classes select now, and where each instance is
/// in the network, for the subnet and security group drift.
#[derive(Clone, Debug, Default)]
pub struct Networks {
    /// By EC2NodeClass name; a class not here is not checked.
    pub classes: BTreeMap<String, ResolvedNetwork>,
    /// By instance id; an instance not here (or whose network EC2 did not report) is not
    /// checked.
    pub instances: BTreeMap<String, InstanceNetwork>,
}

/// Why the node's instance sits outside what its class selects now, if it does: a
/// security group set that is not the class's, or a subnet the class no longer selects.
fn network_drift(c: &Candidate<'_>, class: &EC2NodeClass, networks: &Networks) -> Option<String> {
    let now = networks.classes.get(class.name())?;
    let id = crate::model::node::node_instance_id(c.node)?;
    let placed = networks.instances.get(id)?;
    let groups: BTreeSet<&String> = placed.security_groups.iter().collect();
    let selected: BTreeSet<&String> = now.security_groups.iter().collect();
    if !groups.is_empty() && !selected.is_empty() && groups != selected {
        return Some(format!(
            "its security groups ({}) are no longer its EC2NodeClass's ({})",
            join(groups),
            join(selected)
        ));
    }
    let subnet = placed.subnet.as_ref()?;
    (!now.subnets.is_empty() && !now.subnets.iter().any(|s| &s.id == subnet)).then(|| {
        format!(
            "its subnet {subnet} is no longer among its EC2NodeClass's ({})",
            join(now.subnets.iter().map(|s| &s.id))
        )
    })
}

fn join<'s>(ids: impl IntoIterator<Item = &'s String>) -> String {
    ids.into_iter().map(String::as_str).collect::<Vec<_>>().join(", ")
}

fn recorded<'a>(c: &'a Candidate<'_>, key: &str) -> Option<&'a str> {
    let m = &c.node.metadata;
    m.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .or_else(|| m.annotations.as_ref().and_then(|a| a.get(key)))
        .map(String::as_str)
}

/// Why a candidate is drifted, if it is. `images` are the AMIs each class resolves now;
/// a class without them is read from its `status.amis`. `networks` are what the classes
/// select and where the instances are.
pub fn drifted(
    c: &Candidate<'_>,
    classes: &[EC2NodeClass],
    images: &BTreeMap<String, Vec<ResolvedImage>>,
    networks: &Networks,
) -> Option<String> {
    let pool = c.pool?;
    let class = classes
        .iter()
        .find(|k| k.name() == pool.spec.template.spec.node_class_ref.name);
    // A hash of another version (or none) is not compared: it is rebaselined.
    let now = (recorded(c, NODEPOOL_HASH_VERSION) == Some(HASH_VERSION)).then(|| template_hash(pool, class));
    if let (Some(hash), Some(now)) = (recorded(c, NODEPOOL_HASH), now)
        && hash != now
    {
        return Some(format!(
            "NodePool {} or its EC2NodeClass changed since launch (hash {hash}, now {now})",
            pool.name()
        ));
    }
    // Karpenter's `areRequirementsDrifted`: a label the node has that the NodePool's
    // requirements no longer allow (a label it lacks is no drift).
    if let Ok(requirements) = pool.requirements() {
        let labels = c.node.metadata.labels.as_ref();
        for r in requirements.iter() {
            if let Some(v) = labels.and_then(|l| l.get(r.key()))
                && !r.has(v)
            {
                return Some(format!(
                    "its label {}={v} is no longer allowed by NodePool {}'s requirements",
                    r.key(),
                    pool.name()
                ));
            }
        }
    }
    let class = class?;
    if let Some(image) = recorded(c, IMAGE_ID) {
        let images = match images.get(class.name()) {
            Some(now) => Some(now.clone()),
            None => images_from_status(class),
        }
        .unwrap_or_default();
        if !images.is_empty() && !images.iter().any(|i| i.id == image) {
            return Some(format!(
                "its AMI {image} is no longer among its EC2NodeClass's ({})",
                images.iter().map(|i| i.id.as_str()).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    network_drift(c, class, networks)
}

/// Finds the drifted node to replace now.
pub fn find(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    let classes = &ctx.snapshot.nodeclasses;
    let drifted_nodes: std::collections::BTreeSet<String> = ctx
        .candidates
        .iter()
        .filter(|c| drifted(c, classes, &ctx.images, &ctx.networks).is_some())
        .map(|c| c.name.clone())
        .collect();
    if drifted_nodes.is_empty() {
        return None;
    }
    for i in ctx.ordered(Method::Drift, |c| drifted_nodes.contains(&c.name)).0 {
        match ctx.replace(i, Method::Drift, "drifted")? {
            Ok(cmd) => return Some(cmd),
            Err(b) => ctx.decline(i, b),
        }
    }
    None
}
