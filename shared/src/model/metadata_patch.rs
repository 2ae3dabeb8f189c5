//! A change to an object's labels or annotations.

use std::collections::BTreeMap;

/// Labels or annotations to change: `Some(value)` sets a key, `None` removes it. Keys not
/// named are left alone.
pub type MetadataPatch = BTreeMap<String, Option<String>>;
