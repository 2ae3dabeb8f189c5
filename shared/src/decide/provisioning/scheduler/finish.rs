//! Finishing the plan (Karpenter's `NodeClaim.FinalizeScheduling` and
//! `Results.TruncateInstanceTypes`): each new node takes the cheapest instance type that
//! holds its pods, with up to
//! [`MAX_ALTERNATIVES`](crate::decide::provisioning::plan::MAX_ALTERNATIVES) alternatives
//! that also do, for CreateFleet, keeping enough distinct values for the NodePool's
//! `minValues` ([`crate::decide::provisioning::scheduler::min_values`]); then the existing
//! placements, the cost and what the lower bound needs.

use std::collections::BTreeMap;

use crate::decide::provisioning::plan::{ExistingPlacement, PlannedNode, Unschedulable};
use crate::decide::provisioning::scheduler::Scheduler;
use crate::decide::provisioning::scheduler::custom_keys::custom_labels;
use crate::decide::provisioning::scheduler::index::{TypeId, Types};
use crate::decide::provisioning::scheduler::min_values::with_min_values;
use crate::decide::provisioning::scheduler::outcome::SchedulerOutcome;
use crate::decide::provisioning::unschedulable::{Reason, Shortfall};
use crate::model::Resources;
use crate::model::well_known as wk;

impl Scheduler {
    /// Turns the simulation's state into the plan.
    pub(super) fn finish(mut self) -> SchedulerOutcome {
        for n in &self.existing {
            if !n.placed.is_empty() {
                self.plan.existing.push(ExistingPlacement {
                    node: n.name.clone(),
                    pods: n.placed.iter().map(|&p| self.pods[p].key.clone()).collect(),
                });
            }
        }
        let mut on_new_nodes = Vec::new();
        for node in self.new_nodes.iter() {
            let t = &self.pools[node.template].template;
            // Under limits, no type (nor alternative) may exceed the capacity the limits
            // were checked against when the node was opened.
            let mut fitting: Vec<TypeId> = node.holding_types(t, &node.candidates, &node.used).collect();
            node.prefer_at_equal_price(t, &self.classes, &self.pods, &mut fitting);
            let labels: Vec<&BTreeMap<String, String>> = fitting.iter().map(|&i| &t.ty(i).labels).collect();
            if let Err(e) = t.requirements.check_min_values(labels.iter().copied()) {
                for &p in &node.pods {
                    self.plan.unschedulable.push(Unschedulable::new(
                        self.pods[p].key.clone(),
                        Reason::MinValues {
                            nodepool: t.name.clone(),
                            detail: e.to_string(),
                        },
                    ));
                }
                continue;
            }
            let chosen = with_min_values(t, &fitting);
            let Some(&first) = chosen.first() else {
                for &p in &node.pods {
                    self.plan.unschedulable.push(Unschedulable::new(
                        self.pods[p].key.clone(),
                        Reason::Resources {
                            nodepool: t.name.clone(),
                            shortfall: Shortfall::NotHeldTogether,
                        },
                    ));
                }
                continue;
            };
            on_new_nodes.extend(node.pods.iter().copied());
            let o = t.ty(first);
            let price = o.price(&node.zone, node.capacity_type).unwrap_or(f64::NAN);
            self.plan.nodes.push(PlannedNode {
                nodepool: t.name.clone(),
                instance_type: o.instance_type.name.clone(),
                instance_types: chosen.iter().map(|&i| t.ty(i).instance_type.name.clone()).collect(),
                zone: node.zone.clone(),
                capacity_type: node.capacity_type,
                price_per_hour: price,
                pods: node.pods.iter().map(|&p| self.pods[p].key.clone()).collect(),
                requests: node.used.clone(),
                daemonset_overhead: o.overhead.clone(),
                allocatable: o.instance_type.allocatable.clone(),
                labels: t
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .chain(custom_labels(&node.custom))
                    .chain(
                        t.zone_ids
                            .get(&node.zone)
                            .map(|id| (wk::ZONE_ID.to_string(), id.clone())),
                    )
                    // The reservation a reserved node is launched into, as Karpenter labels it.
                    .chain(node.reservation.iter().flat_map(|r| r.labels()))
                    .collect(),
            });
        }
        self.plan.cost_per_hour = self.plan.nodes.iter().map(|n| n.price_per_hour).sum();
        let free = self
            .existing
            .iter()
            .fold(Resources::default(), |acc, n| acc.plus(&n.spare()));
        let pods = on_new_nodes.iter().map(|&p| self.pods[p].clone()).collect();
        let templates = self.pools.into_vec().into_iter().map(|p| p.template).collect();
        SchedulerOutcome::new(self.plan, templates, pods, free)
    }
}
