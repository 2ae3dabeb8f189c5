//! The ports one step of a job works through, borrowed together: every runner
//! ([`crate::run::provision::Provisioner`], [`crate::run::disruption::Disrupter`],
//! [`crate::run::consolidate::Consolidator`]) holds one, and hands it on to the runners it
//! drives (a consolidation's replacement launches through a provisioner).

/// EC2, the Kubernetes API, DynamoDB and time, borrowed for one run.
pub struct Ports<'a, C, K, S, T> {
    /// EC2.
    pub cloud: &'a C,
    /// The Kubernetes API.
    pub cluster: &'a K,
    /// DynamoDB.
    pub store: &'a S,
    /// Time.
    pub clock: &'a T,
}

// By hand: a derive would ask C, K, S and T to be Clone, and only the references are.
impl<C, K, S, T> Clone for Ports<'_, C, K, S, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C, K, S, T> Copy for Ports<'_, C, K, S, T> {}
