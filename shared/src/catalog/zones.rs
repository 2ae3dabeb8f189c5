//! Availability zones per region.
//!
//! The offerings data says which types each region offers, not which zones. Carpool
//! assumes a type offered in a region is offered in each of these zones, until live
//! `DescribeInstanceTypeOfferings` data says otherwise. Zone names are the common ones;
//! accounts map names to physical zones differently, and us-east-1e (a legacy zone with
//! few current types) is left out.

/// The zones assumed for a region, or none for an unknown region.
pub fn zones(region: &str) -> Vec<String> {
    let suffixes: &[&str] = match region {
        "us-east-1" => &["a", "b", "c", "d", "f"],
        "us-west-2" | "ap-northeast-2" => &["a", "b", "c", "d"],
        "ap-northeast-1" => &["a", "c", "d"],
        "ca-central-1" => &["a", "b", "d"],
        "us-west-1" => &["a", "c"],
        "af-south-1" | "ap-east-1" | "ap-northeast-3" | "ap-south-1" | "ap-south-2" | "ap-southeast-1"
        | "ap-southeast-2" | "ap-southeast-3" | "ap-southeast-4" | "ap-southeast-5" | "ca-west-1" | "eu-central-1"
        | "eu-central-2" | "eu-north-1" | "eu-south-1" | "eu-south-2" | "eu-west-1" | "eu-west-2" | "eu-west-3"
        | "il-central-1" | "me-central-1" | "me-south-1" | "sa-east-1" | "us-east-2" | "us-gov-east-1"
        | "us-gov-west-1" => &["a", "b", "c"],
        _ => &[],
    };
    suffixes.iter().map(|s| format!("{region}{s}")).collect()
}
