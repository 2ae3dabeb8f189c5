//! Launch templates Carpool made and no longer uses, deleted.
//!
//! A launch template is named by the hash of its content ([`super::fleet::TemplateContent`]),
//! and its content holds nothing of a batch (the launch wave is named on the node after it
//! registers), so the templates in use are bounded by the NodePools, classes, AMIs and
//! capacity types in use. What changes with the configuration (a new AMI, new security
//! groups, a NodePool's labels edited or deleted) leaves templates behind; EC2 allows
//! 5,000 per Region and account, shared by every tool there.
//!
//! So housekeeping deletes the templates of this cluster (its `carpool.sh/cluster` tag and
//! Carpool's `carpool-` name) that were created more than the idle time ago and that no
//! live instance of the cluster was launched from (their `carpool.sh/launch-template`
//! tag), at most every [`COLLECT_EVERY`] per warm function. Karpenter does the same with its own: a template out of its cache is deleted
//! (`DefaultProvider.cachedEvictedFunc`, `pkg/providers/launchtemplate/launchtemplate.go`
//! in aws/karpenter-provider-aws), and a class's templates with the class
//! (`DeleteAll`). A template deleted while another invocation still had it cached is
//! created again by that invocation's launch ([`super::Ec2Cloud::launch`] retries once).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use aws_sdk_ec2::types::Filter;
use carpool::ports::CloudError;

use super::Ec2Cloud;
use super::errors::map_sdk_err;
use super::fleet::{LAUNCH_TEMPLATE_TAG, is_template_not_found};

/// The prefix of the names of the templates Carpool makes ([`super::fleet::TemplateContent::name`]).
pub const TEMPLATE_PREFIX: &str = "carpool-";

/// How often a warm function collects: once at its first run, then at most this often
/// (the provisioner runs every minute; a template is kept an hour after its creation).
pub const COLLECT_EVERY: Duration = Duration::from_secs(10 * 60);

/// Whether a function that last collected at `last` collects at `now`.
pub fn due(last: Option<SystemTime>, now: SystemTime) -> bool {
    last.is_none_or(|last| now.duration_since(last).is_ok_and(|since| since >= COLLECT_EVERY))
}

/// A launch template of the cluster, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// When it was created.
    pub created: SystemTime,
}

/// The templates to delete at `now`: Carpool's (by name) created at least `idle` before
/// and not in `in_use`.
pub fn stale<'a>(listed: &'a [Listed], in_use: &BTreeSet<String>, now: SystemTime, idle: Duration) -> Vec<&'a Listed> {
    listed
        .iter()
        .filter(|t| t.name.starts_with(TEMPLATE_PREFIX))
        .filter(|t| !in_use.contains(&t.name))
        .filter(|t| now.duration_since(t.created).is_ok_and(|age| age >= idle))
        .collect()
}

impl Ec2Cloud {
    /// The launch templates tagged with this cluster.
    async fn listed_templates(&self) -> Result<Vec<Listed>, CloudError> {
        let mut pages = self
            .ec2()
            .describe_launch_templates()
            .filters(self.cluster_filter())
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| map_sdk_err("DescribeLaunchTemplates", e))?;
            out.extend(page.launch_templates().iter().filter_map(|t| {
                Some(Listed {
                    id: t.launch_template_id()?.to_string(),
                    name: t.launch_template_name()?.to_string(),
                    created: SystemTime::try_from(*t.create_time()?).ok()?,
                })
            }));
        }
        Ok(out)
    }

    /// The templates the cluster's live instances were launched from.
    async fn templates_in_use(&self) -> Result<BTreeSet<String>, CloudError> {
        let live = Filter::builder()
            .name("instance-state-name")
            .set_values(Some(
                ["pending", "running", "stopping", "stopped", "shutting-down"]
                    .map(String::from)
                    .to_vec(),
            ))
            .build();
        let template = |i: &aws_sdk_ec2::types::Instance| {
            i.tags()
                .iter()
                .find(|t| t.key() == Some(LAUNCH_TEMPLATE_TAG))
                .and_then(|t| t.value().map(str::to_string))
        };
        Ok(self.described(None, Some(live), template).await?.into_iter().collect())
    }

    /// Deletes the cluster's stale launch templates ([`stale`]); returns the names
    /// deleted. A template that fails to delete is logged and left for the next round.
    pub async fn collect_templates(&self, now: SystemTime, idle: Duration) -> Result<Vec<String>, CloudError> {
        let listed = self.listed_templates().await?;
        let in_use = self.templates_in_use().await?;
        let mut deleted = Vec::new();
        for t in stale(&listed, &in_use, now, idle) {
            let outcome = self
                .ec2()
                .delete_launch_template()
                .launch_template_id(&t.id)
                .send()
                .await;
            match outcome {
                Ok(_) => {}
                Err(e) if e.as_service_error().is_some_and(is_template_not_found) => {}
                Err(e) => {
                    let e = map_sdk_err("DeleteLaunchTemplate", e);
                    tracing::warn!(template = %t.name, error = %carpool::error_chain::Chain(&e), "deleting a stale launch template");
                    continue;
                }
            }
            self.forget_template(&t.name);
            deleted.push(t.name.clone());
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(name: &str, created: SystemTime) -> Listed {
        Listed {
            id: format!("lt-{name}"),
            name: name.into(),
            created,
        }
    }

    #[test]
    fn only_carpools_idle_templates_that_no_live_instance_names_are_stale() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let idle = Duration::from_secs(3_600);
        let old = now - Duration::from_secs(7_200);
        let all = [
            listed("carpool-old", old),
            listed("carpool-in-use", old),
            listed("carpool-new", now - Duration::from_secs(60)),
            listed("someone-elses", old),
        ];
        let in_use: BTreeSet<String> = ["carpool-in-use".to_string()].into();
        let names: Vec<&str> = stale(&all, &in_use, now, idle)
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["carpool-old"]);
    }

    #[test]
    fn a_warm_function_collects_at_its_first_run_then_every_ten_minutes() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        assert!(due(None, t));
        assert!(!due(Some(t), t + Duration::from_secs(60)));
        assert!(!due(Some(t), t + COLLECT_EVERY - Duration::from_secs(1)));
        assert!(due(Some(t), t + COLLECT_EVERY));
        // A clock that went back collects nothing until it has caught up.
        assert!(!due(Some(t), t - Duration::from_secs(1)));
    }
}
