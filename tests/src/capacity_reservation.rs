//! Capacity reservations on the stack's moto (`infra/local/moto-server` adds them):
//! created tagged, for the scene that selects them by tag or id.

use std::time::SystemTime;

use anyhow::{Context, Result};
use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};

use crate::stack::Stack;

/// What to reserve: `count` instances of `instance_type` in `zone`, tagged `tags`; a
/// Capacity Block (the stack's stand-in: tag `carpool-local:reservation-type`) when
/// `block`, ending at `end` when given.
pub struct Reserve<'a> {
    /// The instance type.
    pub instance_type: &'a str,
    /// The zone.
    pub zone: &'a str,
    /// How many instances.
    pub count: i32,
    /// Its tags.
    pub tags: &'a [(&'a str, &'a str)],
    /// A Capacity Block rather than an ODCR.
    pub block: bool,
    /// When it ends.
    pub end: Option<SystemTime>,
}

/// Creates the reservation; returns its id.
pub async fn create(stack: &Stack, r: &Reserve<'_>) -> Result<String> {
    let ec2 = aws_sdk_ec2::Client::new(&stack.aws_config().await?);
    let mut tags = TagSpecification::builder().resource_type(ResourceType::CapacityReservation);
    for (k, v) in r.tags {
        tags = tags.tags(Tag::builder().key(*k).value(*v).build());
    }
    if r.block {
        tags = tags.tags(
            Tag::builder()
                .key("carpool-local:reservation-type")
                .value("capacity-block")
                .build(),
        );
    }
    let mut call = ec2
        .create_capacity_reservation()
        .instance_type(r.instance_type)
        .instance_platform("Linux/UNIX".into())
        .availability_zone(r.zone)
        .instance_count(r.count)
        .instance_match_criteria("targeted".into())
        .tag_specifications(tags.build());
    if let Some(end) = r.end {
        call = call
            .end_date(aws_sdk_ec2::primitives::DateTime::from(end))
            .end_date_type("limited".into());
    }
    call.send()
        .await?
        .capacity_reservation()
        .and_then(|c| c.capacity_reservation_id())
        .map(str::to_string)
        .context("CreateCapacityReservation returned no id")
}
