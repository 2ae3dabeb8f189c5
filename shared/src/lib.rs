//! # Carpool core
//!
//! Carpool is a node autoscaler for Amazon EKS that runs as AWS Lambda functions, with no
//! controller in the cluster. This crate is the core every function and the CLI share.
//!
//! ## Layout
//!
//! - [`model`]: plain types. Exact Kubernetes [quantities](model::quantity) and
//!   [resources](model::resources); a pod's [effective requests](model::pod_requests) and
//!   [node requirements](model::pod_requirements); the label
//!   [requirement algebra](model::requirements) with Karpenter's semantics; nodes,
//!   [instance types](model::instance_type) and [offerings](model::offering); the
//!   [NodePool](model::nodepool) and [EC2NodeClass](model::ec2nodeclass) manifests, read
//!   through [`model::manifest`] with errors that name the field path.
//! - [`catalog`]: the embedded EC2 catalog: instance-type facts, allocatable resources as
//!   EKS AL2023 nodes report them ([`catalog::allocatable`]), offerings by region and zone,
//!   on-demand prices with a spot model and live overrides ([`catalog::prices`]), the
//!   cluster's NodeOverlays applied to them ([`catalog::overlay`]), and the cheapest-types
//!   [query](catalog::query).
//!
//! - [`snapshot`]: a cluster dump (`kubectl get ... -o json|yaml`) read into typed objects.
//! - [`decide`]: pure decisions, one folder per job, depending on [`model`] and
//!   [`catalog`] only: [`provisioning`](decide::provisioning) (the scheduling simulation
//!   and cost-aware packer that turn a snapshot into a [`decide::ProvisioningPlan`], its
//!   lower bound, and the one planning path the provisioner and `carpool plan` share),
//!   [`kube_scheduler`](decide::kube_scheduler) (one model of kube-scheduler's scores and
//!   placement), [`waves`](decide::waves), [`disruption`](decide::disruption) (Karpenter's
//!   methods, budgets, the drain order), [`interruption`](decide::interruption) (events
//!   read into typed actions), [`housekeeping`](decide::housekeeping), and the independent
//!   [plan checker](decide::checker).
//!
//! - [`ports`]: the effects as traits with documented contracts: [`ports::Clock`],
//!   [`ports::Cloud`], [`ports::Cluster`] and [`ports::StateStore`].
//! - `fakes` (feature `test-util`): stateful in-memory ports and the contract suites.
//! - `fixtures` (feature `test-util`): builders of the pods, nodes, NodePools and
//!   EC2NodeClasses that tests write, shared by every test crate.
//!
//! - [`run`]: one step of each job over the ports, carrying out the plans [`decide`]
//!   makes and returning a report: [`run::provision`], [`run::interruption`],
//!   [`run::consolidate`]; and what they share: the `DISRUPT#` state machine
//!   ([`run::disruption`]), the drain ([`run::drain`]), the one configuration
//!   ([`run::config`]), the cluster read ([`run::observe`]), metrics ([`run::emf`]) and
//!   the region's catalog with live prices ([`run::price_refresh`]). The Lambda handlers
//!   call it.
//!
//! - [`error_chain`]: an error and its sources in one line, for messages meant for people.
//!
//! Nothing here performs I/O or reads the clock except through the ports.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod catalog;
pub mod decide;
pub mod error_chain;
#[cfg(any(test, feature = "test-util"))]
pub mod fakes;
#[cfg(any(test, feature = "test-util"))]
pub mod fixtures;
pub mod model;
pub mod ports;
pub mod run;
pub mod snapshot;
