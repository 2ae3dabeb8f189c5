//! Finishing the plan: each new node takes the cheapest instance type that holds its pods,
//! with up to [`MAX_ALTERNATIVES`] alternatives that also do, for CreateFleet, keeping
//! enough distinct values for the NodePool's `minValues`; then the existing placements,
//! the cost and what the lower bound needs.

use std::collections::{BTreeMap, HashMap};

use super::{BoundInput, Scheduler, SchedulerOutcome};
use crate::decide::provisioning::plan::{ExistingPlacement, MAX_ALTERNATIVES, PlannedNode, Unschedulable};
use crate::decide::provisioning::scheduler::index::{TypeId, Types};
use crate::decide::provisioning::scheduler::labels::custom_labels;
use crate::decide::provisioning::templates::Template;
use crate::decide::provisioning::unschedulable::{Reason, Shortfall};
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
            let t = &self.templates[node.template];
            // Under limits, no type (nor alternative) may exceed the capacity the limits
            // were checked against when the node was opened.
            let mut fitting: Vec<TypeId> = self.holding_types(node, &node.candidates, &node.used).collect();
            self.prefer_at_equal_price(node, &mut fitting);
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
                    .collect(),
            });
        }
        self.plan.cost_per_hour = self.plan.nodes.iter().map(|n| n.price_per_hour).sum();
        let free = self.existing_free();
        let pods = on_new_nodes.iter().map(|&p| self.pods[p].clone()).collect();
        SchedulerOutcome {
            plan: self.plan,
            bound: BoundInput {
                templates: self.templates.into_vec(),
                pods,
                existing_free: free,
            },
        }
    }
}

/// The cheapest `MAX_ALTERNATIVES` of the fitting types, keeping enough distinct values
/// for the template's `minValues`.
fn with_min_values(t: &Template, fitting: &[TypeId]) -> Vec<TypeId> {
    let mut chosen: Vec<TypeId> = fitting.iter().copied().take(MAX_ALTERNATIVES).collect();
    for r in t.requirements.iter() {
        let Some(min) = r.min_values() else { continue };
        let distinct = |set: &[TypeId]| {
            let mut v: Vec<&String> = set
                .iter()
                .filter_map(|&i| t.ty(i).labels.get(r.key()))
                .filter(|v| r.has(v))
                .collect();
            v.sort();
            v.dedup();
            v.len()
        };
        if distinct(&chosen) >= min as usize {
            continue;
        }
        for &i in fitting {
            if distinct(&chosen) >= min as usize {
                break;
            }
            let value = t.ty(i).labels.get(r.key());
            let new_value = value.is_some_and(|v| !chosen.iter().any(|&c| t.ty(c).labels.get(r.key()) == Some(v)));
            if new_value {
                chosen.push(i);
            }
        }
    }
    let order: HashMap<TypeId, usize> = fitting.iter().enumerate().map(|(pos, &i)| (i, pos)).collect();
    chosen.sort_by_key(|i| order[i]);
    chosen.dedup();
    while chosen.len() > MAX_ALTERNATIVES {
        // Drop the dearest type whose removal keeps minValues.
        let Some(pos) = (0..chosen.len()).rev().find(|&p| {
            let mut without = chosen.clone();
            without.remove(p);
            let labels: Vec<&BTreeMap<String, String>> = without.iter().map(|&i| &t.ty(i).labels).collect();
            t.requirements.check_min_values(labels.iter().copied()).is_ok()
        }) else {
            break;
        };
        chosen.remove(pos);
    }
    chosen
}
