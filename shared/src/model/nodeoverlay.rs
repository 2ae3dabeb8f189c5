//! Karpenter's alpha `karpenter.sh/v1alpha1` NodeOverlay, read as users write it: the
//! price (and extended resources) of the instance types its requirements select.
//!
//! What is checked here is what Karpenter's CRD checks (its OpenAPI patterns and CEL
//! rules, kubernetes-sigs/karpenter `pkg/apis/v1alpha1/nodeoverlay.go`) and its
//! `RuntimeValidate` (`nodeoverlay_validation.go`): an overlay that fails is skipped with
//! the reason, and the others apply. How overlays are applied to a region's prices is
//! [`crate::catalog::overlay`].

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::label_syntax;
use super::manifest::{ManifestError, Validate};
use super::quantity::Quantity;
use super::requirements::{NodeSelectorRequirement, Operator, Requirements};

/// The API version Carpool reads.
pub const NODEOVERLAY_API_VERSION: &str = "karpenter.sh/v1alpha1";

/// NodeOverlay annotation, Carpool's own: the hourly commitment of a Savings Plan (USD per
/// hour, at the plan's rates) that covers the on-demand offerings the overlay selects,
/// whose `price` or `priceAdjustment` is then the plan's rate. Carpool treats that much
/// covered usage as already paid for: the planner fills it first, and consolidation does
/// not count a saving on covered nodes that the commitment pays (see
/// [`crate::catalog::commitment`]).
pub const SAVINGS_PLAN_COMMITMENT_ANNOTATION: &str = "carpool.sh/savings-plan-commitment";

/// The resources an overlay's `capacity` may not name: it adds extended resources only.
const RESTRICTED_CAPACITY: &[&str] = &["cpu", "memory", "ephemeral-storage", "pods"];

/// A NodeOverlay: a price (or a price change) and extended resources for the instance
/// types its requirements select.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlay {
    /// `karpenter.sh/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `NodeOverlay`.
    #[serde(default)]
    pub kind: String,
    /// Name, labels, annotations.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired state.
    pub spec: NodeOverlaySpec,
    /// Status as Karpenter writes it; kept, not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

/// `spec` of a NodeOverlay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlaySpec {
    /// Which offerings it applies to: requirements over the labels a node of the offering
    /// would carry (instance type labels, zone, capacity type).
    #[serde(default)]
    pub requirements: Vec<NodeSelectorRequirement>,
    /// A change of the price: `-30%`, `+10%`, or a signed delta in USD per hour (`-0.05`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_adjustment: Option<String>,
    /// The price itself, USD per hour (`0.084`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<String>,
    /// Extended resources added to the capacity of the instance types it selects.
    #[serde(default)]
    pub capacity: BTreeMap<String, Quantity>,
    /// Priority among overlapping overlays: higher wins (1–10000; none is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// What an overlay does to the price of an offering it selects.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PriceChange {
    /// The price is this, USD per hour (`spec.price`, or a `priceAdjustment` without a
    /// sign, which Karpenter's `AdjustedPrice` reads the same way).
    Set(f64),
    /// The price changes by this share: -0.3 for `-30%`.
    Percent(f64),
    /// The price changes by this many USD per hour.
    Delta(f64),
}

impl PriceChange {
    /// Parses `spec.price` or `spec.priceAdjustment` as Karpenter's patterns allow them:
    /// a price `^\d+(\.\d+)?$`; an adjustment `+N`, `-N`, `+N%`, or `-N%` with N below
    /// 100 (or exactly `-100%`).
    pub fn parse_adjustment(text: &str) -> Result<PriceChange, String> {
        let bad = || {
            format!(
                "{text:?} is not a price adjustment; write a percentage such as \"-30%\" or \"+10%\", or a signed USD amount such as \"-0.05\""
            )
        };
        let (sign, rest) = match text.as_bytes().first() {
            Some(b'+') => (1.0, &text[1..]),
            Some(b'-') => (-1.0, &text[1..]),
            _ => return Err(bad()),
        };
        let (number, percent) = match rest.strip_suffix('%') {
            Some(n) => (n, true),
            None => (rest, false),
        };
        if !is_decimal(number, true) {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        if percent {
            // A fall is `-N%` with at most two digits before the point, or `-100%`.
            let int_digits = number.split('.').next().map_or(0, str::len);
            if sign < 0.0 && number != "100" && int_digits > 2 {
                return Err(format!("{text:?}: a price falls by at most 100%"));
            }
            Ok(PriceChange::Percent(sign * value / 100.0))
        } else {
            Ok(PriceChange::Delta(sign * value))
        }
    }

    /// Parses `spec.price`.
    pub fn parse_price(text: &str) -> Result<PriceChange, String> {
        if !is_decimal(text, false) {
            return Err(format!(
                "{text:?} is not a price; write USD per hour without a sign, e.g. \"0.084\""
            ));
        }
        text.parse()
            .map(PriceChange::Set)
            .map_err(|_| format!("{text:?} is not a price"))
    }

    /// The price of an offering listed at `price` (Karpenter's `AdjustedPrice`): never
    /// below zero.
    pub fn apply(self, price: f64) -> f64 {
        let p = match self {
            PriceChange::Set(p) => p,
            PriceChange::Percent(share) => price * (1.0 + share),
            PriceChange::Delta(d) => price + d,
        };
        p.max(0.0)
    }
}

impl fmt::Display for PriceChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PriceChange::Set(p) => write!(f, "${p}/h"),
            PriceChange::Percent(s) => write!(f, "{:+}%", s * 100.0),
            PriceChange::Delta(d) => write!(f, "{d:+} $/h"),
        }
    }
}

/// Digits with at most one dot; `leading_dot` allows `.5` (the adjustment's `\d*\.?\d+`).
fn is_decimal(s: &str, leading_dot: bool) -> bool {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    match frac {
        None => digits(int),
        Some(f) => digits(f) && (digits(int) || (leading_dot && int.is_empty())),
    }
}

impl NodeOverlay {
    /// The name.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The weight, 0 when unset.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// What it does to a price, if anything (valid overlays only: see [`Validate`]).
    pub fn price_change(&self) -> Option<PriceChange> {
        match (&self.spec.price, &self.spec.price_adjustment) {
            (Some(p), _) => PriceChange::parse_price(p).ok(),
            (None, Some(a)) => PriceChange::parse_adjustment(a).ok(),
            (None, None) => None,
        }
    }

    /// The Savings Plan commitment it states, USD per hour
    /// ([`SAVINGS_PLAN_COMMITMENT_ANNOTATION`]); `Ok(None)` without one. A value that is not
    /// a positive number is an error naming the annotation.
    pub fn commitment(&self) -> Result<Option<f64>, ManifestError> {
        let key = SAVINGS_PLAN_COMMITMENT_ANNOTATION;
        let Some(v) = self.metadata.annotations.as_ref().and_then(|a| a.get(key)) else {
            return Ok(None);
        };
        match v.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => Ok(Some(x)),
            _ => Err(ManifestError::at(
                format!("metadata.annotations[{key}]"),
                format!(
                    "{v:?} is not a commitment; write the USD per hour the Savings Plan commits to, e.g. \"12.50\""
                ),
            )),
        }
    }

    /// The requirements, parsed (valid overlays only).
    pub fn requirements(&self) -> Requirements {
        Requirements::from_wire(&self.spec.requirements).unwrap_or_default()
    }
}

impl Validate for NodeOverlay {
    fn validate(&self) -> Result<(), ManifestError> {
        crate::model::manifest::check_type_meta(
            &self.api_version,
            &self.kind,
            NODEOVERLAY_API_VERSION,
            "NodeOverlay",
            "",
        )?;
        if self.name().is_empty() {
            return Err(ManifestError::at("metadata.name", "a NodeOverlay needs a name"));
        }
        let spec = &self.spec;
        const REQ: &str = "spec.requirements";
        for (i, r) in spec.requirements.iter().enumerate() {
            label_syntax::label_key(&r.key).map_err(|e| ManifestError::at(format!("{REQ}[{i}].key"), e.to_string()))?;
            if matches!(r.operator, Operator::In | Operator::NotIn) && r.values.is_empty() {
                return Err(ManifestError::at(
                    format!("{REQ}[{i}].values"),
                    format!("requirements with operator '{}' must have a value defined", r.operator),
                ));
            }
            for v in &r.values {
                label_syntax::label_value(&r.key, v)
                    .map_err(|e| ManifestError::at(format!("{REQ}[{i}].values"), e.to_string()))?;
            }
        }
        Requirements::from_wire(&spec.requirements)
            .map_err(|(i, e)| ManifestError::at(format!("{REQ}[{i}]"), e.to_string()))?;
        if spec.price.is_some() && spec.price_adjustment.is_some() {
            return Err(ManifestError::at(
                "spec",
                "cannot set both 'price' and 'priceAdjustment'",
            ));
        }
        if let Some(p) = &spec.price {
            PriceChange::parse_price(p).map_err(|e| ManifestError::at("spec.price", e))?;
        }
        if let Some(a) = &spec.price_adjustment {
            PriceChange::parse_adjustment(a).map_err(|e| ManifestError::at("spec.priceAdjustment", e))?;
        }
        for (name, q) in &spec.capacity {
            if RESTRICTED_CAPACITY.contains(&name.as_str()) {
                return Err(ManifestError::at(
                    format!("spec.capacity.{name}"),
                    "invalid resource restricted: capacity adds extended resources only, not cpu, memory, ephemeral-storage or pods",
                ));
            }
            if q.is_negative() {
                return Err(ManifestError::at(
                    format!("spec.capacity.{name}"),
                    "must not be negative",
                ));
            }
        }
        if let Some(w) = spec.weight
            && !(1..=10_000).contains(&w)
        {
            return Err(ManifestError::at(
                "spec.weight",
                format!("{w} is out of range; a weight is 1 to 10000"),
            ));
        }
        if self.commitment()?.is_some() && self.price_change().is_none() {
            return Err(ManifestError::at(
                format!("metadata.annotations[{SAVINGS_PLAN_COMMITMENT_ANNOTATION}]"),
                "a commitment needs the plan's rate: set 'price' or 'priceAdjustment' too",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::manifest::from_yaml;

    fn overlay(spec: &str) -> Result<NodeOverlay, ManifestError> {
        from_yaml(&format!(
            "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: o}}\nspec:\n{spec}"
        ))
    }

    #[test]
    fn adjustments_parse_as_karpenters_pattern_allows() {
        use PriceChange::*;
        assert_eq!(PriceChange::parse_adjustment("-30%"), Ok(Percent(-0.3)));
        assert_eq!(PriceChange::parse_adjustment("+10%"), Ok(Percent(0.1)));
        assert_eq!(PriceChange::parse_adjustment("-100%"), Ok(Percent(-1.0)));
        assert_eq!(PriceChange::parse_adjustment("-0.05"), Ok(Delta(-0.05)));
        assert_eq!(PriceChange::parse_adjustment("+.5"), Ok(Delta(0.5)));
        for bad in ["30%", "-", "-%", "-150%", "-100.5%", "abc", "+1.2.3", "-1e3", ""] {
            assert!(PriceChange::parse_adjustment(bad).is_err(), "{bad}");
        }
        assert_eq!(PriceChange::parse_price("0.084"), Ok(Set(0.084)));
        assert!(PriceChange::parse_price("-1").is_err());
        assert!(PriceChange::parse_price(".5").is_err());
        assert_eq!(Percent(-0.3).apply(0.2), 0.2 * 0.7);
        assert_eq!(Delta(-1.0).apply(0.2), 0.0, "never below zero");
    }

    #[test]
    fn invalid_overlays_name_the_field() {
        let both = overlay("  price: \"0.1\"\n  priceAdjustment: \"-10%\"\n").unwrap_err();
        assert!(both.message.contains("both"), "{both}");
        let unparsable = overlay("  priceAdjustment: \"cheaper\"\n").unwrap_err();
        assert_eq!(unparsable.path, "spec.priceAdjustment");
        let cpu = overlay("  capacity: {cpu: \"2\"}\n").unwrap_err();
        assert_eq!(cpu.path, "spec.capacity.cpu");
        let weight = overlay("  weight: 0\n  price: \"1\"\n").unwrap_err();
        assert_eq!(weight.path, "spec.weight");
        let empty_in = overlay("  requirements: [{key: a, operator: In}]\n").unwrap_err();
        assert_eq!(empty_in.path, "spec.requirements[0].values");
        let ok = overlay(
            "  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m6i]}]\n  priceAdjustment: \"-30%\"\n  capacity: {example.com/dongle: \"2\"}\n  weight: 10\n",
        )
        .unwrap();
        assert_eq!(ok.price_change(), Some(PriceChange::Percent(-0.3)));
        assert_eq!(ok.weight(), 10);
    }
}
