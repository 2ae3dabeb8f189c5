//! The embedded catalog: its size, offerings by region and zone, prices, and the
//! cheapest-types query.

use carpool::catalog::query::{Query, cheapest};
use carpool::catalog::{Catalog, CatalogError};
use carpool::model::{CapacityType, Requirements};

fn reqs(list: &[&str]) -> Requirements {
    let wire: Vec<_> = list.iter().map(|s| s.parse().unwrap()).collect();
    Requirements::from_wire(&wire).unwrap()
}

#[test]
fn the_catalog_embeds_all_1454_rows_and_schedules_on_those_with_facts() {
    let c = Catalog::embedded().unwrap();
    assert_eq!(c.types().len() + c.incomplete().len(), 1454);
    assert!(c.types().len() > 1400, "{}", c.types().len());
    assert_eq!(
        c.regions().len(),
        32,
        "30 commercial regions from moto plus 2 GovCloud price tables"
    );
}

#[test]
fn offerings_cover_every_zone_and_capacity_type_with_spot_cheaper() {
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let m5 = region.types().iter().find(|t| t.name == "m5.large").unwrap();
    let offerings = region.offerings_of(m5);
    assert_eq!(offerings.len(), region.zones().len() * 2);
    let od = offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::OnDemand)
        .unwrap();
    let spot = offerings
        .iter()
        .find(|o| o.capacity_type == CapacityType::Spot)
        .unwrap();
    assert_eq!(od.price, 0.096);
    assert!(spot.price < od.price);
}

#[test]
fn live_prices_override_the_table_and_the_spot_model() {
    let mut region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    region.prices_mut().set_spot("m5.large", "us-east-1a", 0.031);
    region.prices_mut().set_on_demand("m5.large", 0.1);
    let m5 = *region.types().iter().find(|t| t.name == "m5.large").unwrap();
    let offerings = region.offerings_of(m5);
    let price = |zone: &str, ct| {
        offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == ct)
            .unwrap()
            .price
    };
    assert_eq!(price("us-east-1a", CapacityType::Spot), 0.031);
    assert_ne!(
        price("us-east-1b", CapacityType::Spot),
        0.031,
        "other zones keep the model"
    );
    assert_eq!(price("us-east-1b", CapacityType::OnDemand), 0.1);
}

#[test]
fn regions_without_a_price_table_use_us_east_1_prices_and_say_so() {
    let c = Catalog::embedded().unwrap();
    assert!(c.region("eu-west-1").unwrap().prices().is_estimated());
    assert!(!c.region("us-east-1").unwrap().prices().is_estimated());
    let err = c.region("mars-north-1").unwrap_err();
    assert!(matches!(err, CatalogError::UnknownRegion { .. }));
    assert!(err.to_string().contains("us-east-1"), "lists the known regions");
}

#[test]
fn cheapest_arm64_on_demand_cmr_with_4_cpu_and_16gi_allocatable() {
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let q = Query {
        requirements: reqs(&[
            "karpenter.k8s.aws/instance-category In c,m,r",
            "kubernetes.io/arch In arm64",
        ]),
        capacity_type: Some(CapacityType::OnDemand),
        min_cpu_millis: 4000,
        min_memory_bytes: 16 << 30,
    };
    let rows = cheapest(&region, &q);
    assert!(!rows.is_empty());
    for r in &rows {
        let it = r.instance_type;
        assert_eq!(it.arch.label(), "arm64");
        assert!(["c", "m", "r"].contains(&it.category.as_str()));
        assert!(it.allocatable.cpu_millis >= 4000 && it.allocatable.memory >= 16 << 30);
        assert_eq!(r.capacity_type, CapacityType::OnDemand);
    }
    assert!(
        rows.windows(2).all(|w| w[0].price_per_hour <= w[1].price_per_hour),
        "sorted by price"
    );
    // 4 vCPUs cannot give 4000m allocatable, so the first fit has 8; a c-family 2xlarge
    // has 16 GiB before reservations, less than 16Gi allocatable, so it is an m.
    assert_eq!(rows[0].instance_type.vcpu, 8);
    assert_eq!(rows[0].instance_type.category, "m");
}

#[test]
fn zone_and_capacity_type_requirements_narrow_the_offerings() {
    let region = Catalog::embedded().unwrap().region("us-east-1").unwrap();
    let q = Query {
        requirements: reqs(&[
            "node.kubernetes.io/instance-type In m5.large",
            "topology.kubernetes.io/zone In us-east-1a,us-east-1b",
            "karpenter.sh/capacity-type In spot",
        ]),
        ..Query::default()
    };
    let rows = cheapest(&region, &q);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].zones, ["us-east-1a", "us-east-1b"]);
    assert_eq!(rows[0].capacity_type, CapacityType::Spot);
}
