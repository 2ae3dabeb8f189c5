//! What the EC2 adapter looked up, kept for a short while ([`LOOKUP_TTL`]): the subnets and
//! security groups an EC2NodeClass's selector terms select, the launch templates known to
//! exist, the instance profiles Carpool made that hold their role, and the roles IAM said
//! do not exist ([`ROLE_NOT_FOUND_TTL`] at most). A batch launches many nodes of a few
//! classes, and a class that keeps failing is tried again and again; without this, each
//! launch made its own DescribeSubnets, DescribeSecurityGroups and DescribeLaunchTemplates
//! calls, and repeated failures could throttle EC2 for the whole account.
//!
//! Entries are keyed by the selector terms themselves (their JSON), so an edited class is
//! looked up afresh at once; only changes in EC2 (a subnet tagged, a group deleted) take up
//! to the TTL to be seen. Failed lookups are not kept. A launch template that CreateFleet
//! no longer finds is forgotten at once.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a lookup is kept: 5 minutes, as Karpenter caches subnets and security groups
/// (its `cache.DefaultTTL`), short enough that a fix in EC2 is seen within one backoff
/// window of the longest kind.
pub const LOOKUP_TTL: Duration = Duration::from_secs(5 * 60);

/// Values by key, each kept for the cache's TTL.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    /// An empty cache; a zero `ttl` keeps nothing.
    pub fn new(ttl: Duration) -> Self {
        TtlCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The value of `key`, if kept less than the TTL ago.
    pub fn get(&self, key: &K) -> Option<V> {
        self.get_at(key, Instant::now())
    }

    fn get_at(&self, key: &K, now: Instant) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, value) = entries.get(key)?;
        (now.saturating_duration_since(*at) < self.ttl).then(|| value.clone())
    }

    /// Keeps `value` for `key` from now.
    pub fn put(&self, key: K, value: V) {
        self.put_at(key, value, Instant::now());
    }

    fn put_at(&self, key: K, value: V, now: Instant) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.retain(|_, (at, _)| now.saturating_duration_since(*at) < self.ttl);
        entries.insert(key, (now, value));
    }

    /// Forgets `key`.
    pub fn forget(&self, key: &K) {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }
}

/// How long a role IAM said does not exist is remembered, at most: a minute, as Karpenter
/// keeps its `RoleNotFoundErrorCache` (`cache.DefaultCleanupInterval`,
/// `pkg/operator/operator.go` in aws/karpenter-provider-aws), so a class naming a missing
/// role does not call IAM at every launch, and a role created since is used soon.
pub const ROLE_NOT_FOUND_TTL: Duration = Duration::from_secs(60);

/// Subnets as (id, zone, free IP addresses), by the subnet selector terms' JSON and the
/// zone asked for. The free addresses are as fresh as the lookup (Karpenter keeps its
/// subnets as long, and its own count of addresses its launches took meanwhile).
pub type SubnetCache = TtlCache<(String, Option<String>), Vec<(String, String, Option<u32>)>>;

/// The EC2 adapter's lookups, shared by its clones.
#[derive(Clone, Debug)]
pub struct Lookups {
    /// Subnets as (id, zone, free IP addresses), by the subnet selector terms' JSON and
    /// the zone asked for.
    pub subnets: Arc<SubnetCache>,
    /// Security group ids, by the security group selector terms' JSON.
    pub security_groups: Arc<TtlCache<String, Vec<String>>>,
    /// Launch template names known to exist.
    pub templates: Arc<TtlCache<String, ()>>,
    /// Names of the instance profiles Carpool made, known to exist and hold their role.
    pub instance_profiles: Arc<TtlCache<String, ()>>,
    /// Roles IAM said do not exist, with IAM's message.
    pub missing_roles: Arc<TtlCache<String, String>>,
}

impl Lookups {
    /// Lookups kept for `ttl` ([`LOOKUP_TTL`] by default; zero keeps nothing).
    pub fn new(ttl: Duration) -> Self {
        Lookups {
            subnets: Arc::new(TtlCache::new(ttl)),
            security_groups: Arc::new(TtlCache::new(ttl)),
            templates: Arc::new(TtlCache::new(ttl)),
            instance_profiles: Arc::new(TtlCache::new(ttl)),
            missing_roles: Arc::new(TtlCache::new(ttl.min(ROLE_NOT_FOUND_TTL))),
        }
    }
}

impl Default for Lookups {
    fn default() -> Self {
        Lookups::new(LOOKUP_TTL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_kept_for_the_ttl_and_no_longer() {
        let cache: TtlCache<&str, u32> = TtlCache::new(LOOKUP_TTL);
        let t0 = Instant::now();
        cache.put_at("sg", 1, t0);
        assert_eq!(cache.get_at(&"sg", t0 + Duration::from_secs(299)), Some(1));
        assert_eq!(cache.get_at(&"sg", t0 + LOOKUP_TTL), None);
        cache.put_at("sg", 2, t0);
        cache.forget(&"sg");
        assert_eq!(cache.get_at(&"sg", t0), None, "forgotten");
    }

    #[test]
    fn a_zero_ttl_keeps_nothing() {
        let cache: TtlCache<&str, u32> = TtlCache::new(Duration::ZERO);
        cache.put("sg", 1);
        assert_eq!(cache.get(&"sg"), None);
    }
}
