//! On-demand prices from the AWS Price List API (`GetProducts`): Linux, shared tenancy, no
//! pre-installed software, capacity status `Used`, in the adapter's region.
//!
//! One paginated scan of the region's EC2 compute products answers for any number of
//! types (about twenty pages of 100), where a call per type would be hundreds for a full
//! catalog refresh; the types asked for are kept. Callers fall back to the embedded table
//! when this fails.

use std::collections::BTreeMap;

use aws_config::{Region, SdkConfig};
use aws_sdk_pricing::types::{Filter, FilterType};
use carpool::ports::{CloudError, OnDemandPrice};

use super::errors::map_sdk_err;

/// The region whose endpoint serves the Price List API for every region.
pub const PRICING_REGION: &str = "us-east-1";

/// A Pricing client for `sdk`'s credentials, on the [`PRICING_REGION`] endpoint.
pub fn client(sdk: &SdkConfig) -> aws_sdk_pricing::Client {
    let config = aws_sdk_pricing::config::Builder::from(sdk)
        .region(Region::new(PRICING_REGION))
        .build();
    aws_sdk_pricing::Client::from_conf(config)
}

/// The `GetProducts` filters for on-demand Linux compute in `region`.
pub fn filters(region: &str) -> Result<Vec<Filter>, CloudError> {
    [
        ("regionCode", region),
        ("operatingSystem", "Linux"),
        ("tenancy", "Shared"),
        ("preInstalledSw", "NA"),
        ("capacitystatus", "Used"),
        ("productFamily", "Compute Instance"),
        ("marketoption", "OnDemand"),
    ]
    .into_iter()
    .map(|(field, value)| {
        Filter::builder()
            .r#type(FilterType::TermMatch)
            .field(field)
            .value(value)
            .build()
            .map_err(|e| CloudError::Api(Box::new(e)))
    })
    .collect()
}

/// A price list entry that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PriceListError {
    /// Not JSON.
    #[error("price list entry is not JSON")]
    Json(#[source] serde_json::Error),
    /// JSON without the fields of an EC2 on-demand product.
    #[error("price list entry has no {0}")]
    Missing(&'static str),
}

/// The instance type and USD/hour of one `priceList` entry (a JSON document as a string):
/// `product.attributes.instanceType` and the lowest positive `pricePerUnit.USD` of its
/// on-demand terms. `Ok(None)` when it has no positive price (AWS lists $0 placeholders).
pub fn parse_entry(entry: &str) -> Result<Option<OnDemandPrice>, PriceListError> {
    let v: serde_json::Value = serde_json::from_str(entry).map_err(PriceListError::Json)?;
    let instance_type = v["product"]["attributes"]["instanceType"]
        .as_str()
        .ok_or(PriceListError::Missing("product.attributes.instanceType"))?;
    let terms = v["terms"]["OnDemand"]
        .as_object()
        .ok_or(PriceListError::Missing("terms.OnDemand"))?;
    let price = terms
        .values()
        .filter_map(|term| term["priceDimensions"].as_object())
        .flat_map(|dims| dims.values())
        .filter_map(|dim| dim["pricePerUnit"]["USD"].as_str())
        .filter_map(|usd| usd.parse::<f64>().ok())
        .filter(|p| *p > 0.0)
        .min_by(f64::total_cmp);
    Ok(price.map(|price| OnDemandPrice {
        instance_type: instance_type.to_string(),
        price,
    }))
}

/// The prices of `instance_types` in a price list, the lowest per type; entries that
/// cannot be read are skipped (logged), so one odd product does not lose the rest.
pub fn prices<'a>(entries: impl IntoIterator<Item = &'a str>, instance_types: &[String]) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for entry in entries {
        match parse_entry(entry) {
            Ok(Some(p)) if instance_types.contains(&p.instance_type) => {
                let slot = out.entry(p.instance_type).or_insert(p.price);
                *slot = slot.min(p.price);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "skipping a price list entry"),
        }
    }
    out
}

/// The on-demand prices of `instance_types` in `region`, from `GetProducts`.
pub async fn on_demand_prices(
    pricing: &aws_sdk_pricing::Client,
    region: &str,
    instance_types: &[String],
) -> Result<Vec<OnDemandPrice>, CloudError> {
    if instance_types.is_empty() {
        return Ok(Vec::new());
    }
    let mut pages = pricing
        .get_products()
        .service_code("AmazonEC2")
        .format_version("aws_v1")
        .set_filters(Some(filters(region)?))
        .max_results(100)
        .into_paginator()
        .send();
    let mut found: BTreeMap<String, f64> = BTreeMap::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| map_sdk_err("GetProducts", e))?;
        for (instance_type, price) in prices(page.price_list().iter().map(String::as_str), instance_types) {
            let slot = found.entry(instance_type).or_insert(price);
            *slot = slot.min(price);
        }
    }
    Ok(found
        .into_iter()
        .map(|(instance_type, price)| OnDemandPrice { instance_type, price })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const M5_LARGE: &str = include_str!("../../tests/vectors/pricing_m5_large.json");

    #[test]
    fn a_real_shaped_entry_gives_type_and_hourly_usd() {
        let got = parse_entry(M5_LARGE).unwrap().unwrap();
        assert_eq!(got.instance_type, "m5.large");
        assert!((got.price - 0.096).abs() < 1e-9, "{}", got.price);
    }

    #[test]
    fn zero_prices_unknown_types_and_junk_are_left_out() {
        let zero = M5_LARGE.replace("0.0960000000", "0.0000000000");
        assert_eq!(parse_entry(&zero).unwrap(), None);
        assert!(matches!(parse_entry("not json"), Err(PriceListError::Json(_))));
        assert!(matches!(parse_entry("{}"), Err(PriceListError::Missing(_))));
        let c5 = M5_LARGE
            .replace("m5.large", "c5.large")
            .replace("0.0960000000", "0.0850000000");
        let got = prices(
            [M5_LARGE, c5.as_str(), "junk", zero.as_str()],
            &["m5.large".to_string(), "r5.large".to_string()],
        );
        assert_eq!(got, BTreeMap::from([("m5.large".to_string(), 0.096)]));
    }

    #[test]
    fn the_filters_ask_for_linux_shared_on_demand_in_the_region() {
        let got: Vec<(String, String)> = filters("eu-west-1")
            .unwrap()
            .iter()
            .map(|f| (f.field().to_string(), f.value().to_string()))
            .collect();
        assert!(got.contains(&("regionCode".into(), "eu-west-1".into())));
        assert!(got.contains(&("operatingSystem".into(), "Linux".into())));
        assert!(got.contains(&("tenancy".into(), "Shared".into())));
        assert!(got.contains(&("preInstalledSw".into(), "NA".into())));
        assert!(got.contains(&("capacitystatus".into(), "Used".into())));
    }
}
