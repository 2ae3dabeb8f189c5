//! The capacity reservations an EC2NodeClass's `capacityReservationSelectorTerms` select,
//! as Karpenter's `capacityreservation.DefaultProvider.List` finds them
//! (`pkg/providers/capacityreservation` in aws/karpenter-provider-aws): one
//! DescribeCapacityReservations per query (`QueriesFromSelectorTerms`: a term's id alone,
//! else its tags, owner and instance match criteria together), active ones only, without
//! repeats, ended ones left out (`filterReservations`).
//!
//! Unlike Karpenter, Carpool keeps no availability cache between runs: each run asks EC2,
//! and the planner subtracts the launches it recorded since
//! ([`carpool::decide::provisioning::reserved_capacity`]), as Karpenter's `MarkLaunched`
//! does for the launches after its last sync.

use std::collections::BTreeMap;
use std::time::SystemTime;

use aws_sdk_ec2::types::{CapacityReservationType, Filter};
use carpool::model::{CapacityReservation, CapacityReservationSelectorTerm, EC2NodeClass, ReservationType};
use carpool::ports::{CloudError, epoch_millis};

use super::errors::map_sdk_err;
use super::resolve::term_filters;

/// The DescribeCapacityReservations filters of each query of `terms`: by id (the id in
/// `CapacityReservationIds`), or by tags, owner and match criteria; each with
/// `state=active`.
pub fn queries(terms: &[CapacityReservationSelectorTerm]) -> Vec<(Option<String>, Vec<Filter>)> {
    let active = || Filter::builder().name("state").values("active").build();
    let mut out = Vec::new();
    for t in terms {
        if let Some(id) = &t.id {
            out.push((Some(id.clone()), vec![active()]));
        }
        if !t.tags.is_empty() || t.instance_match_criteria.is_some() {
            let mut filters = vec![active()];
            filters.extend(term_filters(
                &t.tags,
                &[
                    ("owner-id", t.owner_id.as_ref()),
                    ("instance-match-criteria", t.instance_match_criteria.as_ref()),
                ],
            ));
            out.push((None, filters));
        }
    }
    out
}

/// One reservation as EC2 describes it, asked at `synced_at`; `None` when it lacks what a
/// launch needs (an id, a type, a zone) or has a match criteria Karpenter does not know
/// (its `CapacityReservationFromEC2` guards the same way).
pub fn from_ec2(r: &aws_sdk_ec2::types::CapacityReservation, synced_at: i64) -> Option<CapacityReservation> {
    let criteria = r.instance_match_criteria()?.as_str();
    if criteria != "open" && criteria != "targeted" {
        return None;
    }
    Some(CapacityReservation {
        id: r.capacity_reservation_id()?.to_string(),
        instance_type: r.instance_type()?.to_string(),
        zone: r.availability_zone()?.to_string(),
        owner_id: r.owner_id().unwrap_or_default().to_string(),
        reservation_type: match r.reservation_type() {
            Some(CapacityReservationType::CapacityBlock) => ReservationType::CapacityBlock,
            _ => ReservationType::Default,
        },
        instance_match_criteria: criteria.to_string(),
        available: r
            .available_instance_count()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        end_time: r.end_date().and_then(|d| d.to_millis().ok()),
        synced_at,
    })
}

/// The active reservations `node_class` selects, sorted by id; a malformed term is the
/// class's error.
pub async fn list(
    ec2: &aws_sdk_ec2::Client,
    node_class: &EC2NodeClass,
) -> Result<Vec<CapacityReservation>, CloudError> {
    let terms = node_class
        .capacity_reservation_terms()
        .map_err(|reason| CloudError::NodeClass {
            node_class: node_class.name().to_string(),
            reason,
            source: None,
        })?;
    let now = SystemTime::now();
    let synced_at = epoch_millis(now);
    let mut found: BTreeMap<String, CapacityReservation> = BTreeMap::new();
    for (id, filters) in queries(&terms) {
        let mut call = ec2.describe_capacity_reservations().set_filters(Some(filters));
        call = match &id {
            Some(id) => call.capacity_reservation_ids(id),
            None => call.max_results(1000),
        };
        let mut pages = call.into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = match page {
                Ok(p) => p,
                // Asked by id, a reservation that does not exist (any more) selects nothing.
                Err(e)
                    if id.is_some()
                        && e.as_service_error()
                            .and_then(|s| aws_sdk_ec2::error::ProvideErrorMetadata::code(s))
                            == Some("InvalidCapacityReservationId.NotFound") =>
                {
                    break;
                }
                Err(e) => return Err(map_sdk_err("DescribeCapacityReservations", e)),
            };
            for r in page.capacity_reservations() {
                if let Some(r) = from_ec2(r, synced_at)
                    && r.end_time.is_none_or(|e| e > synced_at)
                {
                    found.insert(r.id.clone(), r);
                }
            }
        }
    }
    Ok(found.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// aws/karpenter-provider-aws `pkg/providers/capacityreservation/types.go`
    /// `QueriesFromSelectorTerms` and `DescribeCapacityReservationsInput`.
    #[test]
    fn a_term_by_id_is_its_own_query_and_tags_filter_the_others() {
        let by_id = CapacityReservationSelectorTerm {
            id: Some("cr-1".into()),
            ..Default::default()
        };
        let by_tags = CapacityReservationSelectorTerm {
            tags: [("team".to_string(), "ml".to_string())].into(),
            owner_id: Some("123456789012".into()),
            ..Default::default()
        };
        let q = queries(&[by_id, by_tags]);
        assert_eq!(q.len(), 2);
        assert_eq!(q[0].0.as_deref(), Some("cr-1"));
        let names: Vec<&str> = q[1].1.iter().filter_map(|f| f.name()).collect();
        assert_eq!(names, ["state", "tag:team", "owner-id"]);
    }
}
