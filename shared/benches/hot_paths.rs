//! Criterion benches of the planner's hot paths: a whole plan of the bundled mixed
//! example, requirement intersection, and quantity parsing.
//!
//! `cargo bench -p carpool --bench hot_paths`

use carpool::catalog::Catalog;
use carpool::decide::provisioning_plan;
use carpool::model::{Quantity, Requirement};
use carpool::snapshot::Snapshot;
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn plan_mixed_example(c: &mut Criterion) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/mixed.json");
    let text = std::fs::read_to_string(path).expect("examples/mixed.json");
    let mut snapshot = Snapshot::default();
    snapshot.add_text(path, &text).expect("the example parses");
    let region = Catalog::embedded()
        .expect("catalog")
        .region("us-east-1")
        .expect("region");
    c.bench_function("plan examples/mixed.json (196 pods)", |b| {
        b.iter(|| provisioning_plan(black_box(&snapshot), &region))
    });
}

fn requirement_intersection(c: &mut Criterion) {
    let a = Requirement::from_wire(
        &"karpenter.k8s.aws/instance-family In m5,m6i,m7i,c5,c6i,r6i"
            .parse()
            .expect("valid"),
    )
    .expect("valid");
    let b = Requirement::from_wire(&"karpenter.k8s.aws/instance-family NotIn c5,r6i".parse().expect("valid"))
        .expect("valid");
    c.bench_function("requirement intersection", |bench| {
        bench.iter(|| black_box(&a).intersection(black_box(&b)))
    });
}

fn quantity_parsing(c: &mut Criterion) {
    c.bench_function("quantity parse 1.5Gi", |b| {
        b.iter(|| black_box("1.5Gi").parse::<Quantity>())
    });
}

criterion_group!(benches, plan_mixed_example, requirement_intersection, quantity_parsing);
criterion_main!(benches);
