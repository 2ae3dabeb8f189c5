//! Launch waves: the nodes of one batch held back by a startup taint until they are all
//! Ready, then handed to their pods together.
//!
//! - [`wave`]: when a wave is released (all Ready, the grace spent, or a node failed), and
//!   how its pods are handed their toleration;
//! - [`hand_tiers`]: the tiers a wave is handed in, biggest pods first.

pub mod hand_tiers;
pub mod wave;
