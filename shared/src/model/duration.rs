//! Go-style durations as Karpenter's manifests write them (`30s`, `1h30m`, `720h`,
//! `Never`).
//!
//! Hand-written: Go's syntax allows fractions (`1.5h`) and unit runs without spaces,
//! which humantime does not parse.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration, or `Never` (Karpenter's `NillableDuration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NillableDuration {
    /// `Never`: the behaviour is turned off.
    Never,
    /// A finite duration.
    After(Duration),
}

/// Parses a Go duration: a sequence of decimal numbers with units `ns`, `us`, `ms`, `s`,
/// `m`, `h` (e.g. `1h30m`, `1.5h`, `0s`). Negative durations are refused.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {s:?}; write e.g. 30s, 5m, 1h30m or 720h");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let (num, tail) = rest.split_at(num_end);
        let n: f64 = num.parse().map_err(|_| invalid())?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let secs = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += n * secs;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

impl std::str::FromStr for NillableDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "Never" {
            Ok(NillableDuration::Never)
        } else {
            parse_go_duration(s).map(NillableDuration::After)
        }
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NillableDuration::Never => f.write_str("Never"),
            NillableDuration::After(d) => write!(f, "{}s", d.as_secs_f64()),
        }
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("720h"), Ok(Duration::from_secs(720 * 3600)));
        assert_eq!(parse_go_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!("Never".parse(), Ok(NillableDuration::Never));
    }

    #[test]
    fn bad_durations_are_refused() {
        for bad in ["", "5", "5d", "h", "-1s", "1h30", "never"] {
            assert!(bad.parse::<NillableDuration>().is_err(), "{bad}");
        }
    }
}
