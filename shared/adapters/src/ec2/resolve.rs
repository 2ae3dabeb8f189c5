//! Resolving an EC2NodeClass to what a launch needs: subnets in a zone and security groups
//! by selector terms (terms ORed, a term's fields ANDed). Subnets and security groups are
//! kept in the adapter's [`Lookups`] for a few minutes. Its AMIs are [`super::ami`]'s.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::Filter;
use carpool::model::EC2NodeClass;
use carpool::ports::{CloudError, NodeClassReason, ResolvedNetwork, ResolvedSubnet};

use super::errors::map_sdk_err;
use super::lookups::Lookups;

/// The filters of one selector term: each tag (`*` means any value), and the id or name
/// under the given filter names.
pub fn term_filters(tags: &BTreeMap<String, String>, fields: &[(&str, Option<&String>)]) -> Vec<Filter> {
    let mut filters: Vec<Filter> = tags
        .iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect();
    for (name, value) in fields {
        if let Some(value) = value {
            filters.push(Filter::builder().name(*name).values(value.as_str()).build());
        }
    }
    filters
}

/// The subnets the class's terms select (terms ORed, each term's fields ANDed), in `zone`
/// when one is given, as (subnet id, zone) pairs, sorted and without repeats; from
/// `lookups` when looked up lately.
async fn selected_subnets(
    ec2: &aws_sdk_ec2::Client,
    lookups: &Lookups,
    node_class: &EC2NodeClass,
    zone: Option<&str>,
) -> Result<BTreeSet<(String, String, Option<u32>)>, CloudError> {
    let key = (
        serde_json::to_string(&node_class.spec.subnet_selector_terms).unwrap_or_default(),
        zone.map(str::to_string),
    );
    if let Some(kept) = lookups.subnets.get(&key) {
        return Ok(kept.into_iter().collect());
    }
    let found = describe_subnets(ec2, node_class, zone).await?;
    lookups.subnets.put(key, found.iter().cloned().collect());
    Ok(found)
}

async fn describe_subnets(
    ec2: &aws_sdk_ec2::Client,
    node_class: &EC2NodeClass,
    zone: Option<&str>,
) -> Result<BTreeSet<(String, String, Option<u32>)>, CloudError> {
    let mut found = BTreeSet::new();
    for term in &node_class.spec.subnet_selector_terms {
        let mut filters = term_filters(&term.tags, &[("subnet-id", term.id.as_ref())]);
        if filters.is_empty() {
            continue;
        }
        if let Some(zone) = zone {
            filters.push(Filter::builder().name("availability-zone").values(zone).build());
        }
        let mut pages = ec2
            .describe_subnets()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| map_sdk_err("DescribeSubnets", e))?;
            found.extend(page.subnets().iter().filter_map(|s| {
                Some((
                    s.subnet_id()?.to_string(),
                    s.availability_zone().unwrap_or_default().to_string(),
                    s.available_ip_address_count().and_then(|n| u32::try_from(n).ok()),
                ))
            }));
        }
    }
    Ok(found)
}

/// The ids of the subnets of the class in `zone`, sorted.
pub async fn subnets(
    ec2: &aws_sdk_ec2::Client,
    lookups: &Lookups,
    node_class: &EC2NodeClass,
    zone: &str,
) -> Result<Vec<String>, CloudError> {
    let ids: BTreeSet<String> = selected_subnets(ec2, lookups, node_class, Some(zone))
        .await?
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    Ok(ids.into_iter().collect())
}

/// The subnets and security groups the class selects now (Karpenter's subnet and security
/// group providers, which fill its `status.subnets` and `status.securityGroups`); selecting
/// none of either is the class's own error, as Karpenter's `SubnetsReady` and
/// `SecurityGroupsReady` conditions are false then.
pub async fn network(
    ec2: &aws_sdk_ec2::Client,
    lookups: &Lookups,
    node_class: &EC2NodeClass,
) -> Result<ResolvedNetwork, CloudError> {
    let class_error = |reason| CloudError::NodeClass {
        node_class: node_class.name().to_string(),
        reason,
        source: None,
    };
    let subnets: Vec<ResolvedSubnet> = selected_subnets(ec2, lookups, node_class, None)
        .await?
        .into_iter()
        .map(|(id, zone, available_ips)| ResolvedSubnet {
            id,
            zone,
            available_ips,
        })
        .collect();
    if subnets.is_empty() {
        return Err(class_error(NodeClassReason::NoSubnet));
    }
    let security_groups = security_groups(ec2, lookups, node_class).await?;
    if security_groups.is_empty() {
        return Err(class_error(NodeClassReason::NoSecurityGroup));
    }
    Ok(ResolvedNetwork {
        subnets,
        security_groups,
    })
}

/// The ids of the security groups of the class, sorted; from `lookups` when looked up
/// lately.
pub async fn security_groups(
    ec2: &aws_sdk_ec2::Client,
    lookups: &Lookups,
    node_class: &EC2NodeClass,
) -> Result<Vec<String>, CloudError> {
    let key = serde_json::to_string(&node_class.spec.security_group_selector_terms).unwrap_or_default();
    if let Some(kept) = lookups.security_groups.get(&key) {
        return Ok(kept);
    }
    let ids = describe_security_groups(ec2, node_class).await?;
    lookups.security_groups.put(key, ids.clone());
    Ok(ids)
}

async fn describe_security_groups(
    ec2: &aws_sdk_ec2::Client,
    node_class: &EC2NodeClass,
) -> Result<Vec<String>, CloudError> {
    let mut ids = BTreeSet::new();
    for term in &node_class.spec.security_group_selector_terms {
        let filters = term_filters(
            &term.tags,
            &[("group-id", term.id.as_ref()), ("group-name", term.name.as_ref())],
        );
        if filters.is_empty() {
            continue;
        }
        let mut pages = ec2
            .describe_security_groups()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| map_sdk_err("DescribeSecurityGroups", e))?;
            ids.extend(
                page.security_groups()
                    .iter()
                    .filter_map(|g| g.group_id().map(str::to_string)),
            );
        }
    }
    Ok(ids.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_becomes_anded_filters_with_wildcard_tags_as_tag_keys() {
        let tags = BTreeMap::from([
            ("karpenter.sh/discovery".to_string(), "demo".to_string()),
            ("kubernetes.io/role/internal-elb".to_string(), "*".to_string()),
        ]);
        let id = "subnet-1".to_string();
        let filters = term_filters(&tags, &[("subnet-id", Some(&id)), ("group-name", None)]);
        let got: Vec<(String, Vec<String>)> = filters
            .iter()
            .map(|f| (f.name().unwrap_or_default().to_string(), f.values().to_vec()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("tag:karpenter.sh/discovery".to_string(), vec!["demo".to_string()]),
                (
                    "tag-key".to_string(),
                    vec!["kubernetes.io/role/internal-elb".to_string()]
                ),
                ("subnet-id".to_string(), vec!["subnet-1".to_string()]),
            ]
        );
    }
}
