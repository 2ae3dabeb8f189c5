//! A content hash stable across builds and platforms (FNV-1a 64 over JSON), for names
//! that follow content: launch templates, and the drift hash of a NodePool template with
//! its EC2NodeClass. Written here because std's hashers are not stable across releases and
//! the hash is short enough to be a label value.

use serde::Serialize;

/// FNV-1a 64.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// 16 hex digits of the FNV-1a 64 of `value`'s JSON (maps in key order, structs in field
/// order: the same value always gives the same text).
pub fn content_hash<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_string(value).unwrap_or_default();
    format!("{:016x}", fnv1a64(json.as_bytes()))
}
