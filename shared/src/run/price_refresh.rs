//! A region's catalog with live prices and offerings, read from the cloud when stale and
//! kept across the invocations of a warm function: spot prices
//! (DescribeSpotPriceHistory), on-demand prices (the Pricing API) and the types offered per
//! zone (DescribeInstanceTypeOfferings). Each read that fails leaves the embedded data in
//! place, with a warning. Every function that plans uses it.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use crate::catalog::RegionCatalog;
use crate::ports::{Clock, Cloud};

/// How long live prices are trusted before they are read again.
pub const PRICES_TTL: Duration = Duration::from_secs(3600);

/// A region's catalog whose prices and offerings are refreshed in place.
#[derive(Debug)]
pub struct LiveCatalog<'a> {
    region: Mutex<RegionCatalog<'a>>,
    read_at: Mutex<Option<SystemTime>>,
    live: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<'a> LiveCatalog<'a> {
    /// The embedded catalog of a region; `live` false keeps its prices and offerings
    /// (refreshing does nothing).
    pub fn new(region: RegionCatalog<'a>, live: bool) -> Self {
        LiveCatalog {
            region: Mutex::new(region),
            read_at: Mutex::new(None),
            live,
        }
    }

    /// The catalog as of now, to plan on.
    pub fn region(&self) -> RegionCatalog<'a> {
        lock(&self.region).clone()
    }

    /// When the live data was last read, if ever.
    pub fn read_at(&self) -> Option<SystemTime> {
        *lock(&self.read_at)
    }

    /// Reads live prices and offerings from `cloud` when the last read is older than
    /// [`PRICES_TTL`] (or there was none) and the catalog is live.
    pub async fn refresh<C: Cloud, T: Clock>(&self, cloud: &C, clock: &T) {
        let now = clock.now();
        let stale = self
            .read_at()
            .is_none_or(|t| now.duration_since(t).unwrap_or_default() >= PRICES_TTL);
        if !stale || !self.live {
            return;
        }
        let types: Vec<String> = self.region().types().iter().map(|t| t.name.clone()).collect();
        let (spot, on_demand, offerings) = futures_util::future::join3(
            cloud.spot_prices(&types),
            cloud.on_demand_prices(&types),
            cloud.offerings(),
        )
        .await;
        let mut region = lock(&self.region);
        match spot {
            Ok(prices) => {
                for p in &prices {
                    region.prices_mut().set_spot(&p.instance_type, &p.zone, p.price);
                }
                tracing::info!(spot_prices = prices.len(), "read live spot prices");
            }
            Err(e) => {
                tracing::warn!(error = %crate::error_chain::Chain(&e), "could not read spot prices; using the embedded spot model")
            }
        }
        match on_demand {
            Ok(prices) => {
                for p in &prices {
                    region.prices_mut().set_on_demand(&p.instance_type, p.price);
                }
                tracing::info!(on_demand_prices = prices.len(), "read live on-demand prices");
            }
            Err(e) => {
                tracing::warn!(error = %crate::error_chain::Chain(&e), "could not read on-demand prices; using the embedded table")
            }
        }
        match offerings {
            Ok(offered) if !offered.is_empty() => {
                tracing::info!(offerings = offered.len(), "read the types offered per zone");
                region.restrict_to_offered(offered.into_iter().map(|o| (o.instance_type, o.zone)));
            }
            Ok(_) => tracing::warn!("EC2 listed no offerings; using the embedded ones"),
            Err(e) => {
                tracing::warn!(error = %crate::error_chain::Chain(&e), "could not read offerings; using the embedded ones")
            }
        }
        *lock(&self.read_at) = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::fakes::{CloudFault, FakeClock, FakeCloud};
    use crate::model::CapacityType;
    use crate::ports::{OnDemandPrice, SpotPrice, ZonalOffering};

    fn catalog(live: bool) -> LiveCatalog<'static> {
        LiveCatalog::new(Catalog::embedded().unwrap().region("us-east-1").unwrap(), live)
    }

    fn price(catalog: &LiveCatalog<'_>, zone: &str, capacity_type: CapacityType) -> Option<f64> {
        let region = catalog.region();
        let it = region.types().iter().find(|t| t.name == "m5.large").unwrap();
        region.prices().price(it, zone, capacity_type)
    }

    /// A cloud whose live prices for m5.large are $0.0123 spot in us-east-1a and $0.5
    /// on demand.
    fn cloud_with_live_m5_large() -> FakeCloud {
        let cloud = FakeCloud::new();
        cloud.set_spot_prices(vec![SpotPrice {
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            price: 0.0123,
        }]);
        cloud.set_on_demand_prices(vec![OnDemandPrice {
            instance_type: "m5.large".into(),
            price: 0.5,
        }]);
        cloud
    }

    fn reads(cloud: &FakeCloud) -> usize {
        cloud.calls().iter().filter(|c| c.starts_with("spot_prices")).count()
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        futures_util::FutureExt::now_or_never(f).unwrap()
    }

    #[test]
    fn live_prices_and_offerings_are_read_once_per_ttl() {
        let catalog = catalog(true);
        let cloud = cloud_with_live_m5_large();
        cloud.set_offerings(vec![ZonalOffering {
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
        }]);
        let clock = FakeClock::at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_000_000));
        block_on(catalog.refresh(&cloud, &clock));
        assert_eq!(catalog.read_at(), Some(clock.now()));
        assert_eq!(price(&catalog, "us-east-1a", CapacityType::Spot), Some(0.0123));
        assert_eq!(price(&catalog, "us-east-1a", CapacityType::OnDemand), Some(0.5));
        let region = catalog.region();
        let it = region.types().iter().find(|t| t.name == "m5.large").unwrap();
        assert!(region.offerings_of(it).iter().all(|o| o.zone == "us-east-1a"));
        assert_eq!(reads(&cloud), 1);

        clock.advance(PRICES_TTL - Duration::from_secs(1));
        block_on(catalog.refresh(&cloud, &clock));
        assert_eq!(reads(&cloud), 1, "fresh prices are not read again");
        clock.advance(Duration::from_secs(1));
        block_on(catalog.refresh(&cloud, &clock));
        assert_eq!(reads(&cloud), 2, "stale prices are read again");
    }

    #[test]
    fn a_catalog_that_is_not_live_keeps_the_embedded_data() {
        let catalog = catalog(false);
        let before = price(&catalog, "us-east-1a", CapacityType::Spot);
        let cloud = FakeCloud::new();
        let clock = FakeClock::at(SystemTime::UNIX_EPOCH);
        block_on(catalog.refresh(&cloud, &clock));
        assert!(cloud.calls().is_empty());
        assert_eq!(catalog.read_at(), None);
        assert_eq!(price(&catalog, "us-east-1a", CapacityType::Spot), before);
    }

    #[test]
    fn a_read_that_fails_leaves_the_embedded_data_and_the_others_apply() {
        let catalog = catalog(true);
        let cloud = cloud_with_live_m5_large();
        // The spot price read comes first, and fails.
        cloud.inject(CloudFault::Throttled);
        let clock = FakeClock::at(SystemTime::UNIX_EPOCH);
        block_on(catalog.refresh(&cloud, &clock));
        // The spot price is the embedded model's (from the live on-demand price).
        let spot = price(&catalog, "us-east-1a", CapacityType::Spot).unwrap();
        assert!(spot != 0.0123 && spot < 0.5, "{spot}");
        assert_eq!(price(&catalog, "us-east-1a", CapacityType::OnDemand), Some(0.5));
        // No offerings listed: the embedded ones stay, in every zone.
        let region = catalog.region();
        let it = region.types().iter().find(|t| t.name == "m5.large").unwrap();
        assert!(region.offerings_of(it).iter().any(|o| o.zone != "us-east-1a"));
        assert_eq!(catalog.read_at(), Some(clock.now()));
    }
}
