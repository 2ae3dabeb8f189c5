//! Capacity reservations: On-Demand Capacity Reservations (ODCRs) and Capacity Blocks for
//! ML that an EC2NodeClass's `capacityReservationSelectorTerms` select, as Karpenter v1.3+
//! reads them (aws/karpenter-provider-aws `pkg/apis/v1` `CapacityReservationSelectorTerm`
//! and `CapacityReservationFromEC2`, `pkg/providers/capacityreservation`).
//!
//! Their capacity is the third capacity type, `reserved`
//! ([`crate::model::CapacityType::Reserved`]): one offering per reservation's type and
//! zone, priced at the on-demand price divided by [`RESERVED_PRICE_DIVISOR`] so that it is
//! chosen first, and never counted past the reservation's available instances.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::time::EpochMillis;
use super::well_known as wk;

/// The on-demand price of a type divided by this is the price of its reserved offering
/// (Karpenter's `ReservedCapacityResolver.ResolveOfferings`: "free", but keeping the
/// types' relative order).
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// How long before a Capacity Block ends its nodes are drained and it launches nothing
/// more: 40 minutes, as Karpenter's `CapacityReservationFromEC2`
/// (`capacityReservationExpirationPeriod`), 10 minutes before EC2 starts reclaiming the
/// instances (30 minutes before the end).
pub const CAPACITY_BLOCK_EXPIRATION_LEAD: Duration = Duration::from_secs(40 * 60);

/// One `capacityReservationSelectorTerms` entry: by `id`, or by `tags`, `ownerID` and
/// `instanceMatchCriteria` together. Terms are ORed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityReservationSelectorTerm {
    /// Tags that must all match (`*` matches any value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// A reservation id, `cr-...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The owning account (12 digits).
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
    /// `open` or `targeted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<String>,
}

/// A `capacityReservationSelectorTerms` entry Carpool cannot use, and why (the checks of
/// Karpenter's CRD, which Carpool repeats because it reads the class as it is stored).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spec.capacityReservationSelectorTerms[{index}]: {detail}")]
pub struct SelectorTermError {
    /// The term's index.
    pub index: usize,
    /// What is wrong with it.
    pub detail: String,
}

fn is_lower_alnum(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
}

impl CapacityReservationSelectorTerm {
    /// Parses and checks a class's terms, kept as JSON in the spec so that a malformed one
    /// makes only its class invalid.
    pub fn parse_all(terms: &[serde_json::Value]) -> Result<Vec<Self>, SelectorTermError> {
        terms
            .iter()
            .enumerate()
            .map(|(index, v)| {
                let err = |detail: String| SelectorTermError { index, detail };
                let t: Self = serde_json::from_value(v.clone()).map_err(|e| err(e.to_string()))?;
                t.check().map_err(err)?;
                Ok(t)
            })
            .collect()
    }

    fn check(&self) -> Result<(), String> {
        if self.tags.is_empty() && self.id.is_none() && self.instance_match_criteria.is_none() {
            return Err("expected at least one of tags, id, instanceMatchCriteria".into());
        }
        if self.id.is_some()
            && (!self.tags.is_empty() || self.owner_id.is_some() || self.instance_match_criteria.is_some())
        {
            return Err("id cannot be set along with other fields".into());
        }
        if let Some(id) = &self.id
            && !id.strip_prefix("cr-").is_some_and(is_lower_alnum)
        {
            return Err(format!("id {id:?} is not a capacity reservation id (cr-...)"));
        }
        if let Some(owner) = &self.owner_id
            && !(owner.len() == 12 && owner.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(format!("ownerID {owner:?} is not a 12-digit account id"));
        }
        if let Some(m) = &self.instance_match_criteria
            && m != "open"
            && m != "targeted"
        {
            return Err(format!("instanceMatchCriteria {m:?} is not open or targeted"));
        }
        if self.tags.iter().any(|(k, v)| k.is_empty() || v.is_empty()) {
            return Err("empty tag keys or values aren't supported".into());
        }
        Ok(())
    }

    /// Whether `r` is selected by this term (as DescribeCapacityReservations filters it).
    pub fn selects(&self, r: &CapacityReservation, tags: &BTreeMap<String, String>) -> bool {
        if let Some(id) = &self.id {
            return &r.id == id;
        }
        self.owner_id.as_ref().is_none_or(|o| o == &r.owner_id)
            && self
                .instance_match_criteria
                .as_ref()
                .is_none_or(|m| m == &r.instance_match_criteria)
            && self
                .tags
                .iter()
                .all(|(k, v)| tags.get(k).is_some_and(|t| v == "*" || t == v))
    }
}

/// The kind of a reservation (`karpenter.k8s.aws/capacity-reservation-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReservationType {
    /// An On-Demand Capacity Reservation.
    Default,
    /// A Capacity Block for ML: it ends at a fixed time.
    CapacityBlock,
}

impl ReservationType {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            ReservationType::Default => "default",
            ReservationType::CapacityBlock => "capacity-block",
        }
    }

    /// The value of the label, if it is one.
    pub fn from_label(s: &str) -> Option<Self> {
        match s {
            "default" => Some(ReservationType::Default),
            "capacity-block" => Some(ReservationType::CapacityBlock),
            _ => None,
        }
    }
}

impl fmt::Display for ReservationType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// An active capacity reservation a class selects, as EC2 describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapacityReservation {
    /// `cr-...`.
    pub id: String,
    /// The one instance type it holds.
    pub instance_type: String,
    /// Its zone.
    pub zone: String,
    /// The owning account.
    pub owner_id: String,
    /// ODCR or Capacity Block.
    pub reservation_type: ReservationType,
    /// `open` or `targeted`.
    pub instance_match_criteria: String,
    /// Instances it can still take, as EC2 said at `synced_at`.
    pub available: u32,
    /// When it ends (a Capacity Block always does; an ODCR may).
    pub end_time: Option<EpochMillis>,
    /// When EC2 was asked: launches after this are not yet in `available`.
    pub synced_at: EpochMillis,
}

impl CapacityReservation {
    /// Whether it launches nothing more and its nodes are to be drained: a Capacity Block
    /// within [`CAPACITY_BLOCK_EXPIRATION_LEAD`] of its end (Karpenter's
    /// `CapacityReservationStateExpiring`), or any reservation past its end.
    pub fn is_expiring(&self, now: EpochMillis) -> bool {
        let lead = i64::try_from(CAPACITY_BLOCK_EXPIRATION_LEAD.as_millis()).unwrap_or(i64::MAX);
        match (self.reservation_type, self.end_time) {
            (_, Some(end)) if now >= end => true,
            (ReservationType::CapacityBlock, Some(end)) => now >= end.saturating_sub(lead),
            _ => false,
        }
    }

    /// When its nodes must be gone by: the start of the expiration lead, for a Capacity
    /// Block.
    pub fn drain_deadline(&self) -> Option<EpochMillis> {
        let lead = i64::try_from(CAPACITY_BLOCK_EXPIRATION_LEAD.as_millis()).unwrap_or(i64::MAX);
        match self.reservation_type {
            ReservationType::CapacityBlock => self.end_time.map(|e| e.saturating_sub(lead)),
            ReservationType::Default => None,
        }
    }

    /// The labels a node launched into it carries.
    pub fn labels(&self) -> BTreeMap<String, String> {
        ReservationTarget {
            id: self.id.clone(),
            reservation_type: self.reservation_type,
        }
        .labels()
    }
}

/// The reservation a launch targets, as its node's labels name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationTarget {
    /// `cr-...`.
    pub id: String,
    /// ODCR or Capacity Block.
    pub reservation_type: ReservationType,
}

impl ReservationTarget {
    /// The reservation named by a node's (or a launch's) labels
    /// `karpenter.k8s.aws/capacity-reservation-id` and `-type` (an ODCR when the type is
    /// absent).
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Option<Self> {
        let id = labels.get(wk::CAPACITY_RESERVATION_ID)?.clone();
        let reservation_type = labels
            .get(wk::CAPACITY_RESERVATION_TYPE)
            .and_then(|t| ReservationType::from_label(t))
            .unwrap_or(ReservationType::Default);
        Some(ReservationTarget { id, reservation_type })
    }

    /// The labels `karpenter.k8s.aws/capacity-reservation-id` and `-type`.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (wk::CAPACITY_RESERVATION_ID.to_string(), self.id.clone()),
            (
                wk::CAPACITY_RESERVATION_TYPE.to_string(),
                self.reservation_type.label().to_string(),
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// aws/karpenter-provider-aws `pkg/apis/v1/ec2nodeclass.go`
    /// `CapacityReservationSelectorTerms`' CEL rules: a term needs tags, id or
    /// instanceMatchCriteria, and id stands alone.
    #[test]
    fn a_malformed_term_is_refused_with_its_index_and_why() {
        let ok = [
            json!({"id": "cr-0123abc"}),
            json!({"tags": {"team": "ml"}, "ownerID": "123456789012"}),
        ];
        assert_eq!(CapacityReservationSelectorTerm::parse_all(&ok).map(|t| t.len()), Ok(2));
        for (bad, why) in [
            (json!({}), "expected at least one"),
            (json!({"id": "cr-1", "tags": {"a": "b"}}), "id cannot be set along"),
            (json!({"id": "sg-1"}), "not a capacity reservation id"),
            (json!({"tags": {"a": "b"}, "ownerID": "12"}), "12-digit"),
            (json!({"instanceMatchCriteria": "any"}), "not open or targeted"),
            (json!({"tags": {"a": ""}}), "empty tag"),
            (json!({"idd": "cr-1"}), "unknown field"),
            (json!("cr-1"), "invalid type"),
        ] {
            let err = CapacityReservationSelectorTerm::parse_all(&[ok[0].clone(), bad.clone()]).unwrap_err();
            assert_eq!(err.index, 1, "{bad}");
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
    }

    /// aws/karpenter-provider-aws `pkg/apis/v1/ec2nodeclass_status.go`
    /// `CapacityReservationFromEC2`: a capacity block is expiring 40 minutes before its end;
    /// an ODCR without an end never is.
    #[test]
    fn a_capacity_block_expires_forty_minutes_before_its_end() {
        let end = 10 * 3_600_000;
        let block = CapacityReservation {
            id: "cr-1".into(),
            instance_type: "p5.48xlarge".into(),
            zone: "us-east-1a".into(),
            owner_id: "123456789012".into(),
            reservation_type: ReservationType::CapacityBlock,
            instance_match_criteria: "targeted".into(),
            available: 1,
            end_time: Some(end),
            synced_at: 0,
        };
        assert!(!block.is_expiring(end - 41 * 60_000));
        assert!(block.is_expiring(end - 40 * 60_000));
        assert_eq!(block.drain_deadline(), Some(end - 40 * 60_000));
        let odcr = CapacityReservation {
            reservation_type: ReservationType::Default,
            end_time: None,
            ..block
        };
        assert!(!odcr.is_expiring(end));
        assert_eq!(odcr.drain_deadline(), None);
    }
}
