//! Kubernetes resource quantities, parsed exactly.
//!
//! The grammar is the API server's (`k8s.io/apimachinery/pkg/api/resource`):
//!
//! ```text
//! quantity ::= [sign] number suffix
//! number   ::= digits | digits "." [digits] | "." digits
//! suffix   ::= "" | "m" | "k" | "M" | "G" | "T" | "P" | "E"      (decimal SI)
//!            | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"           (binary SI)
//!            | ("e" | "E") [sign] digits                        (decimal exponent)
//! ```
//!
//! A value is held as an exact integer count of nano-units (10⁻⁹), which is the finest
//! precision the API server keeps: like it, anything finer is rounded up to 1n. Every value
//! the API accepts below about 1.7 × 10²⁰ units is held without loss. Conversions to
//! millicores or bytes round up, as `Quantity.MilliValue()` and `Quantity.Value()` do.
//!
//! Hand-written because `k8s-openapi` keeps a quantity as its string only, and no
//! maintained crate parses the full grammar (exponents, fractional binary suffixes)
//! into exact integers.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANO: i128 = 1_000_000_000;

/// An exact Kubernetes quantity, e.g. `100m`, `1.5`, `512Mi`, `129e6`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: i128,
    binary: bool,
}

/// A string that is not a valid Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {value:?}: {reason}")]
pub struct QuantityError {
    /// The text that failed to parse.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl Quantity {
    /// The zero quantity.
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        binary: false,
    };

    /// A quantity of whole units (bytes, counts, cores).
    pub fn from_units(units: i64) -> Self {
        Quantity {
            nanos: i128::from(units) * NANO,
            binary: false,
        }
    }

    /// A quantity of thousandths (millicores).
    pub fn from_millis(millis: i64) -> Self {
        Quantity {
            nanos: i128::from(millis) * 1_000_000,
            binary: false,
        }
    }

    /// A quantity of bytes that prints with a binary suffix where it can (`512Mi`).
    pub fn from_bytes_binary(bytes: i64) -> Self {
        Quantity {
            nanos: i128::from(bytes) * NANO,
            binary: true,
        }
    }

    /// The exact value in nano-units.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// The value in thousandths, rounded up (`Quantity.MilliValue()`); saturates at `i64`.
    pub fn millis_ceil(&self) -> i64 {
        saturate(div_ceil(self.nanos, 1_000_000))
    }

    /// The value in whole units, rounded up (`Quantity.Value()`); saturates at `i64`.
    pub fn units_ceil(&self) -> i64 {
        saturate(div_ceil(self.nanos, NANO))
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 { q } else { q + 1 }
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s).map_err(|reason| QuantityError {
            value: s.to_string(),
            reason,
        })
    }
}

/// Splits `s` into (sign, integer digits, fraction digits, suffix).
fn split_number(s: &str) -> Result<(bool, &str, &str, &str), &'static str> {
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        Some(_) => (false, s),
        None => return Err("empty string"),
    };
    let int_end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let (int, after) = rest.split_at(int_end);
    let (frac, suffix) = if let Some(after_dot) = after.strip_prefix('.') {
        let frac_end = after_dot.find(|c: char| !c.is_ascii_digit()).unwrap_or(after_dot.len());
        after_dot.split_at(frac_end)
    } else {
        ("", after)
    };
    if int.is_empty() && frac.is_empty() {
        return Err("no digits");
    }
    Ok((negative, int, frac, suffix))
}

/// The multiplier of a suffix, as (power of ten, power of two).
fn suffix_scale(suffix: &str) -> Result<(i32, u32), &'static str> {
    Ok(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if s.starts_with('e') || s.starts_with('E') => {
            let exp = &s[1..];
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err("exponent must be an integer, as in 1e3");
            }
            let e: i32 = exp.parse().map_err(|_| "exponent out of range")?;
            (e, 0)
        }
        _ => return Err("unknown suffix; use m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or eN"),
    })
}

fn parse(s: &str) -> Result<Quantity, &'static str> {
    const TOO_LARGE: &str = "value too large";
    let (negative, int, frac, suffix) = split_number(s)?;
    let (exp10, exp2) = suffix_scale(suffix)?;
    // mantissa × 10^(exp10 − len(frac)) × 2^exp2, expressed in nanos.
    let trimmed_frac = frac.trim_end_matches('0');
    let digits: String = format!("{int}{trimmed_frac}");
    let digits = digits.trim_start_matches('0');
    let mantissa: i128 = if digits.is_empty() {
        0
    } else if digits.len() > 36 {
        return Err(TOO_LARGE);
    } else {
        digits.parse().map_err(|_| TOO_LARGE)?
    };
    let scale = i64::from(exp10) - trimmed_frac.len() as i64 + 9;
    let mut nanos = mantissa
        .checked_mul(1i128.checked_shl(exp2).ok_or(TOO_LARGE)?)
        .ok_or(TOO_LARGE)?;
    if nanos != 0 {
        if scale >= 0 {
            let factor = 10i128.checked_pow(u32::try_from(scale).map_err(|_| TOO_LARGE)?);
            nanos = factor.and_then(|f| nanos.checked_mul(f)).ok_or(TOO_LARGE)?;
        } else {
            // Finer than a nano-unit: round up to the next nano-unit, as the API server does.
            let divisor = u32::try_from(-scale).ok().and_then(|e| 10i128.checked_pow(e));
            nanos = match divisor {
                Some(d) => div_ceil(nanos, d),
                None => 1,
            };
        }
    }
    Ok(Quantity {
        nanos: if negative { -nanos } else { nanos },
        binary: exp2 > 0,
    })
}

impl fmt::Display for Quantity {
    /// Prints an exact form that parses back to the same value: binary suffixes for
    /// quantities written with one, otherwise the largest decimal suffix that is exact.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.nanos;
        if n % NANO == 0 {
            let units = n / NANO;
            if self.binary && units != 0 {
                for (shift, suffix) in [(60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
                    if units % (1i128 << shift) == 0 {
                        return write!(f, "{}{suffix}", units >> shift);
                    }
                }
            }
            if units != 0 {
                for (exp, suffix) in [(18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k")] {
                    let m = 10i128.pow(exp);
                    if units % m == 0 {
                        return write!(f, "{}{suffix}", units / m);
                    }
                }
            }
            return write!(f, "{units}");
        }
        if n % 1_000_000 == 0 {
            write!(f, "{}m", n / 1_000_000)
        } else if n % 1_000 == 0 {
            write!(f, "{}u", n / 1_000)
        } else {
            write!(f, "{n}n")
        }
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    /// Accepts a string, or a bare number as YAML manifests often hold (`cpu: 2`).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Int(i64),
            Float(f64),
        }
        let text = match Raw::deserialize(deserializer)? {
            Raw::Text(s) => s,
            Raw::Int(i) => i.to_string(),
            Raw::Float(x) => x.to_string(),
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Parses a `k8s-openapi` quantity (which holds only its text).
pub fn parse_k8s(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Result<Quantity, QuantityError> {
    q.0.trim().parse()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(s: &str) -> Quantity {
        s.parse().unwrap()
    }

    #[test]
    fn every_form_the_api_accepts_parses_to_exact_integers() {
        assert_eq!(q("100m").millis_ceil(), 100);
        assert_eq!(q("1.5").millis_ceil(), 1500);
        assert_eq!(q("2").millis_ceil(), 2000);
        assert_eq!(q("1Gi").units_ceil(), 1 << 30);
        assert_eq!(q("512M").units_ceil(), 512_000_000);
        assert_eq!(q("1e3").units_ceil(), 1000);
        assert_eq!(q("129e6").units_ceil(), 129_000_000);
        assert_eq!(q("0.5Ki").units_ceil(), 512);
        assert_eq!(q("1.5Gi").units_ceil(), 1_610_612_736);
        assert_eq!(q(".5").millis_ceil(), 500);
        assert_eq!(q("5.").units_ceil(), 5);
        assert_eq!(q("+3k").units_ceil(), 3000);
        assert_eq!(q("1E3").units_ceil(), 1000);
        assert_eq!(q("1E").units_ceil(), 1_000_000_000_000_000_000);
        assert_eq!(q("2.5e-3").millis_ceil(), 3, "2.5 milli rounds up");
        assert_eq!(q("250u").millis_ceil(), 1);
        assert_eq!(q("0").units_ceil(), 0);
        assert_eq!(q("-1").units_ceil(), -1);
    }

    #[test]
    fn fractions_round_up_like_the_api_server() {
        assert_eq!(q("0.1m").millis_ceil(), 1);
        assert_eq!(q("1.0001").units_ceil(), 2);
        assert_eq!(q("0.0000000001").nanos(), 1, "finer than 1n rounds up to 1n");
        assert_eq!(q("100m").units_ceil(), 1);
    }

    #[test]
    fn bad_quantities_are_rejected_with_the_value_named() {
        for bad in [
            "", "abc", "1.2.3", "1Gb", "1 Gi", "Mi", "1e", "1e1.5", "--1", "1ee3", ".",
        ] {
            let err = bad.parse::<Quantity>().unwrap_err();
            assert_eq!(err.value, bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        assert!("1e40".parse::<Quantity>().is_err(), "overflow is an error, not a wrap");
    }

    #[test]
    fn numbers_in_yaml_deserialize_as_quantities() {
        let v: Vec<Quantity> = serde_json::from_str(r#"["2", 2, 1.5, "1Gi"]"#).unwrap();
        assert_eq!(v[0], v[1]);
        assert_eq!(v[2].millis_ceil(), 1500);
        assert_eq!(v[3].to_string(), "1Gi");
    }

    #[test]
    fn display_prints_a_canonical_exact_form() {
        assert_eq!(q("1024Mi").to_string(), "1Gi");
        assert_eq!(q("1500m").to_string(), "1500m");
        assert_eq!(q("2000m").to_string(), "2");
        assert_eq!(q("1e3").to_string(), "1k");
        assert_eq!(q("0.5Ki").to_string(), "512");
    }

    proptest! {
        #[test]
        fn millicores_round_trip_through_text(m in -1_000_000_000i64..1_000_000_000) {
            let x = Quantity::from_millis(m);
            prop_assert_eq!(x.to_string().parse::<Quantity>().unwrap(), x);
            prop_assert_eq!(x.millis_ceil(), m);
        }

        #[test]
        fn binary_bytes_round_trip_through_text(b in 0i64..(1 << 50)) {
            let x = Quantity::from_bytes_binary(b);
            let back: Quantity = x.to_string().parse().unwrap();
            prop_assert_eq!(back.units_ceil(), b);
        }

        #[test]
        fn suffixed_forms_equal_their_expansion(n in 0i64..1_000_000, i in 0usize..6) {
            let (suffix, mult) = [("k", 1_000i64), ("M", 1_000_000), ("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("m", 0)][i];
            let x: Quantity = format!("{n}{suffix}").parse().unwrap();
            if mult == 0 {
                prop_assert_eq!(x.millis_ceil(), n);
            } else {
                prop_assert_eq!(x.units_ceil(), n * mult);
            }
        }

        #[test]
        fn any_decimal_text_parses_or_errors_without_panic(s in "[-+]?[0-9]{0,8}(\\.[0-9]{0,8})?([mkMGTPE]|[KMGTPE]i|e[-+]?[0-9]{1,3})?") {
            let _ = s.parse::<Quantity>();
        }
    }
}
