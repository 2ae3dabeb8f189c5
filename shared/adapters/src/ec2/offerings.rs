//! The instance types offered in each zone of the region, from
//! `DescribeInstanceTypeOfferings` by availability zone.

use aws_sdk_ec2::types::LocationType;
use carpool::ports::{CloudError, ZonalOffering};

use super::errors::map_sdk_err;

/// Every (instance type, zone) the region offers, sorted, following every page.
pub async fn offerings(ec2: &aws_sdk_ec2::Client) -> Result<Vec<ZonalOffering>, CloudError> {
    let mut pages = ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .into_paginator()
        .send();
    let mut out = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| map_sdk_err("DescribeInstanceTypeOfferings", e))?;
        out.extend(page.instance_type_offerings().iter().filter_map(|o| {
            Some(ZonalOffering {
                instance_type: o.instance_type()?.as_str().to_string(),
                zone: o.location()?.to_string(),
            })
        }));
    }
    out.sort();
    out.dedup();
    Ok(out)
}
