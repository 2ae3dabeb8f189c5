//! Interruption events turned into typed actions, before anything is done.
//!
//! The interruption function receives EC2 spot interruption warnings, rebalance
//! recommendations, instance state changes and AWS Health events, through an SQS queue
//! or directly from EventBridge, and scheduled ticks. This module reads each into an
//! [`InterruptionEvent`]: its kind, the instances it names, and the [`Action`] to take.
//! `carpool event` prints the same values.
//!
//! - [`event`]: the kinds and the typed `detail` of each, read through aws_lambda_events'
//!   `EventBridgeEvent<T>`, tolerant of unknown and missing optional fields;
//! - [`instance_ids`]: the instance ids in `detail`, `resources` ARNs (both ARN forms) and
//!   Health's `affectedEntities`;
//! - [`action`]: what to do with each kind, and why an event is ignored;
//! - [`parse`]: one event into an [`InterruptionEvent`] ([`parse_event`]);
//! - [`input`]: a bare event, an SQS message or a Lambda SQS batch into records
//!   ([`parse_input`]), one per message, each with its own result;
//! - [`error`]: why an input cannot be read ([`EventError`]);
//! - [`capacity_block`]: the nodes of a Capacity Block for ML that is expiring, disrupted
//!   by the scheduled sweep with the block's reclaim as the hard deadline;
//! - [`deadline`]: the terms of the disruption an event starts ([`drain_terms`]): a spot
//!   warning is believed only about a spot instance, and its deadline counts from when it
//!   arrived, never from the `time` it claims.
//!
//! | event | action |
//! |---|---|
//! | spot interruption warning (any `instance-action`) | [`Action::Disrupt`], [`Cause::SpotInterruption`] |
//! | rebalance recommendation | [`Action::Rebalance`] (the run checks the NodePool opted in) |
//! | state change to `stopping`, `shutting-down` | [`Action::Disrupt`], [`Cause::StateChange`] |
//! | state change to `stopped`, `terminated` | [`Action::Cleanup`] |
//! | state change to `pending`, `running` | [`Action::Ignore`] |
//! | Health, `service` `EC2`, `eventTypeCategory` `scheduledChange` | [`Action::Disrupt`], [`Cause::ScheduledChange`] |
//! | other Health events, or one naming no instance | [`Action::Ignore`] |
//! | `aws.events` `Scheduled Event`, EventBridge Scheduler input | [`Action::Sweep`] |
//! | any other event | [`Action::Ignore`] ([`IgnoreReason::NotHandled`]), kind [`EventKind::Unknown`] |
//!
//! Whether Carpool owns the instance, its actual state (state changes can arrive out of
//! order) and its capacity type are the run's to read; [`drain_terms`] decides from them.

pub mod action;
pub mod capacity_block;
pub mod deadline;
pub mod error;
pub mod event;
pub mod input;
pub mod instance_ids;
pub mod parse;

pub use action::{Action, Cause, IgnoreReason};
pub use deadline::{DrainTerms, SPOT_NOTICE, drain_terms};
pub use error::EventError;
pub use event::{EventKind, InstanceStateName};
pub use input::{InputRecord, parse_input, parse_input_text, spot_warnings};
pub use parse::{InterruptionEvent, parse_event};
