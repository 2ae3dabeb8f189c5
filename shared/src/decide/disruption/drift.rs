//! Drift: a node launched from a NodePool template or EC2NodeClass that has changed since,
//! or from an AMI its EC2NodeClass no longer resolves, is replaced, one at a time, within
//! the pools' `Drifted` budgets (Karpenter's `drift.go`; `NodePool.Hash` and the
//! `karpenter.sh/nodepool-hash` annotation, and `isAMIDrifted` in the AWS provider).
//!
//! Carpool records on the node, at launch:
//! - [`NODEPOOL_HASH`] (a label): [`template_hash`] of its NodePool's template with its
//!   EC2NodeClass's spec (Karpenter hashes the template alone and the class apart; one
//!   hash is enough to say "changed");
//! - [`IMAGE_ID`] (when known): the AMI it booted.
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
use crate::model::well_known::{IMAGE_ID, NODEPOOL_HASH};
use crate::model::{EC2NodeClass, NodePool};
use std::collections::BTreeMap;

/// The drift hash of a NodePool's template with its EC2NodeClass's spec. The template's
/// requirements are left out, as Karpenter's `NodePool.Hash` leaves them out
/// (`hash:"ignore"`): they drift by the node's labels instead ([`drifted`]), and Carpool
/// narrows them before launching (zones of the class's subnets, types its AMIs boot).
pub fn template_hash(pool: &NodePool, class: Option<&EC2NodeClass>) -> String {
    let mut template = pool.spec.template.clone();
    template.spec.requirements.clear();
    content_hash(&(&template, class.map(|c| &c.spec)))
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
/// a class without them is read from its `status.amis`.
pub fn drifted(
    c: &Candidate<'_>,
    classes: &[EC2NodeClass],
    images: &BTreeMap<String, Vec<ResolvedImage>>,
) -> Option<String> {
    let pool = c.pool?;
    let class = classes
        .iter()
        .find(|k| k.name() == pool.spec.template.spec.node_class_ref.name);
    if let Some(hash) = recorded(c, NODEPOOL_HASH) {
        let now = template_hash(pool, class);
        if hash != now {
            return Some(format!(
                "NodePool {} or its EC2NodeClass changed since launch (hash {hash}, now {now})",
                pool.name()
            ));
        }
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
    let image = recorded(c, IMAGE_ID)?;
    let class = class?;
    let images = match images.get(class.name()) {
        Some(now) => now.clone(),
        None => images_from_status(class)?,
    };
    (!images.is_empty() && !images.iter().any(|i| i.id == image)).then(|| {
        format!(
            "its AMI {image} is no longer among its EC2NodeClass's ({})",
            images.iter().map(|i| i.id.as_str()).collect::<Vec<_>>().join(", ")
        )
    })
}

/// Finds the drifted node to replace now.
pub fn find(ctx: &mut Ctx<'_>) -> Option<DisruptionCommand> {
    let classes = &ctx.snapshot.nodeclasses;
    let drifted_nodes: std::collections::BTreeSet<String> = ctx
        .candidates
        .iter()
        .filter(|c| drifted(c, classes, &ctx.images).is_some())
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
