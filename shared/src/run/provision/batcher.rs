//! Batching pending pods as Karpenter does: a batch opens with the first new pod, and
//! closes after an idle window with no new pod (1 s by default) or a maximum (10 s), so
//! that a Deployment scaling up is planned as one set, not pod by pod.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

/// The pods of the open batch, and its times.
#[derive(Clone, Debug)]
pub struct Batcher {
    idle: Duration,
    max: Duration,
    opened_at: Option<SystemTime>,
    last_new_at: Option<SystemTime>,
    pods: BTreeSet<String>,
}

fn since(now: SystemTime, then: SystemTime) -> Duration {
    now.duration_since(then).unwrap_or_default()
}

impl Batcher {
    /// A batcher with these windows.
    pub fn new(idle: Duration, max: Duration) -> Self {
        Batcher {
            idle,
            max,
            opened_at: None,
            last_new_at: None,
            pods: BTreeSet::new(),
        }
    }

    /// Records the pods seen pending at `now`; those not yet in the batch open it or keep
    /// it open.
    pub fn observe(&mut self, now: SystemTime, pods: impl IntoIterator<Item = String>) {
        let mut any_new = false;
        for pod in pods {
            any_new |= self.pods.insert(pod);
        }
        if any_new {
            self.opened_at.get_or_insert(now);
            self.last_new_at = Some(now);
        }
    }

    /// Whether a batch is open.
    pub fn is_open(&self) -> bool {
        self.opened_at.is_some()
    }

    /// When the open batch opened.
    pub fn opened_at(&self) -> Option<SystemTime> {
        self.opened_at
    }

    /// Whether the open batch should close at `now`: idle long enough, or open too long.
    pub fn is_due(&self, now: SystemTime) -> bool {
        match (self.opened_at, self.last_new_at) {
            (Some(opened), Some(last)) => since(now, last) >= self.idle || since(now, opened) >= self.max,
            _ => false,
        }
    }

    /// Closes the batch and returns its pods.
    pub fn take(&mut self) -> BTreeSet<String> {
        self.opened_at = None;
        self.last_new_at = None;
        std::mem::take(&mut self.pods)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn pods(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_batch_closes_after_a_second_without_new_pods() {
        let mut b = Batcher::new(Duration::from_secs(1), Duration::from_secs(10));
        assert!(!b.is_due(at(0)));
        b.observe(at(0), pods(&["a"]));
        b.observe(at(500), pods(&["a", "b"]));
        assert!(!b.is_due(at(1_400)), "b arrived 0.9 s ago");
        b.observe(at(1_400), pods(&["a", "b"]));
        assert!(b.is_due(at(1_500)), "nothing new for 1 s");
        assert_eq!(b.take(), BTreeSet::from(["a".to_string(), "b".to_string()]));
        assert!(!b.is_open());
    }

    #[test]
    fn a_steady_stream_of_pods_is_cut_at_ten_seconds() {
        let mut b = Batcher::new(Duration::from_secs(1), Duration::from_secs(10));
        for i in 0..=20u64 {
            let now = at(i * 500);
            b.observe(now, [format!("p{i}")]);
            if b.is_due(now) {
                assert_eq!(i, 20, "due only at the 10 s cap");
                assert_eq!(b.take().len(), 21);
                return;
            }
        }
        panic!("the batch never closed");
    }
}
