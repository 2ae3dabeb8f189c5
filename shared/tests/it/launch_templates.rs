//! Issue 26, item 1, on the in-memory ports: the launches of many batches use a bounded
//! set of launch templates. The fake cloud counts the templates its launches would use as
//! the EC2 adapter names them (by the hash of what a request puts in the template: its
//! class, labels and taints). Before, each batch's wave went into the labels and taints,
//! and every batch used a new template; the moto test
//! (`shared/adapters/tests/it/ec2_launch_templates.rs`) counts the real ones.

use std::time::Duration;

use serde_json::json;

use crate::run_world::{World, settings};

#[test]
fn forty_batches_of_one_nodepool_use_one_launch_template() {
    let w = World::new(0);
    for i in 0..40 {
        // A new pending pod too big to share a node with the last one's.
        w.cluster.add_pod(
            serde_json::from_value(json!({
                "metadata": {"name": format!("big-{i}"), "namespace": "web", "uid": format!("big-{i}"),
                             "creationTimestamp": "2026-09-21T12:00:00Z"},
                "spec": {"containers": [{"name": "c", "image": "nginx",
                         "resources": {"requests": {"cpu": "3", "memory": "4Gi"}}}]},
                "status": {"phase": "Pending",
                           "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
            }))
            .unwrap(),
        );
        // Nodes never register here: a TTL past the test keeps the NodePool from backing off.
        let report = w.run_with(
            &format!("run-{i}"),
            carpool::run::provision::Settings {
                registration_ttl: Duration::from_secs(86_400),
                ..settings()
            },
        );
        assert!(
            report.batches.iter().any(|b| !b.launched.is_empty()),
            "batch {i} launched: {report:#?}"
        );
        w.advance(Duration::from_secs(60));
    }
    assert!(w.cloud.instances().len() >= 40);
    // One NodePool, one class, on-demand only: one template, whatever the batch.
    assert_eq!(w.cloud.template_count(), 1);
}
