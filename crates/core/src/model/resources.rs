//! Exact resource arithmetic.
//!
//! Ray's raylet keeps resource quantities as fixed-point numbers with four decimal digits
//! (`FixedPoint`, 1/10000 units). rayscale does the same, so that `0.1 * 10` fits in `1`
//! exactly and repeated subtraction never drifts.

use super::Name;

/// Number of fixed-point units in one resource unit.
pub const SCALE: i128 = 10_000;

/// A resource quantity in 1/10000 units (128-bit: memory in bytes times 10^4 overflows 64 bits
/// from about 0.9 PB, and a snapshot may hold such a request).
pub type Fixed = i128;

/// Converts a floating quantity into fixed-point units (rounded to nearest, saturating).
pub fn to_fixed(v: f64) -> Fixed {
    // `as` saturates at the i128 bounds and maps NaN to 0. Through `i64` where the value
    // fits it (the same number, without the 128-bit conversion's library call).
    let r = (v * SCALE as f64).round();
    if r.abs() < 9.0e18 {
        i128::from(r as i64)
    } else {
        r as i128
    }
}

/// Converts fixed-point units back into a floating quantity.
pub fn to_f64(v: Fixed) -> f64 {
    // Both conversions round to nearest, so a value that fits `i64` converts the same
    // through it, without the 128-bit conversion's library call.
    match i64::try_from(v) {
        Ok(x) => x as f64 / SCALE as f64,
        Err(_) => wide_to_f64(v),
    }
}

/// [`to_f64`] of a value beyond `i64`, kept out of line so that the compiler does not call
/// the 128-bit conversion on every value and then pick one of the two results.
#[cold]
#[inline(never)]
fn wide_to_f64(v: Fixed) -> f64 {
    v as f64 / SCALE as f64
}

/// An ordered resource map (name -> quantity), keeping insertion order.
///
/// Order matters: Ray iterates resource dicts in insertion order when it sums utilisation,
/// and several tie-breaks depend on floating sums in that order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ResourceMap(pub Vec<(Name, Fixed)>);

impl ResourceMap {
    /// Builds a map from (name, float) pairs, keeping order; a repeated name keeps the last value
    /// at the position of its first occurrence.
    pub fn from_f64_pairs<K: Into<Name>, I: IntoIterator<Item = (K, f64)>>(pairs: I) -> Self {
        let pairs = pairs.into_iter();
        let mut out: Vec<(Name, Fixed)> = Vec::with_capacity(pairs.size_hint().0);
        for (k, v) in pairs {
            let k: Name = k.into();
            let f = to_fixed(v);
            if let Some(e) = out.iter_mut().find(|(n, _)| *n == k) {
                e.1 = f;
            } else {
                out.push((k, f));
            }
        }
        ResourceMap(out)
    }

    /// Quantity of `name`, if present.
    pub fn get(&self, name: &str) -> Option<Fixed> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// True when the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Iterates the entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Fixed)> {
        self.0.iter().map(|(n, v)| (n.as_str(), *v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_is_exact_for_tenths() {
        let tenth = to_fixed(0.1);
        let mut left = to_fixed(1.0);
        for _ in 0..10 {
            assert!(left >= tenth);
            left -= tenth;
        }
        assert_eq!(left, 0);
    }

    #[test]
    fn round_trip_of_common_values() {
        for v in [0.0, 0.25, 0.5, 1.0, 3.0, 16e9, 1e-4] {
            assert_eq!(to_f64(to_fixed(v)), v);
        }
    }

    /// The `i64` shortcuts give what the plain 128-bit conversions give, at and around
    /// the edges of `i64` and of `i128`, and for NaN and infinities.
    #[test]
    fn the_conversions_through_i64_equal_the_128_bit_ones() {
        let edges = [
            0.0,
            -0.0,
            1e-5,
            -0.49999,
            0.5e-4,
            9.0e14,
            -9.0e14,
            9.2e14,
            9.3e14,
            1e15,
            1.7e34,
            -1.7e34,
            1e40,
            f64::MAX,
            f64::MIN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        for v in edges {
            let plain = (v * SCALE as f64).round() as i128;
            assert_eq!(to_fixed(v), plain, "to_fixed({v})");
        }
        let mut fixed = vec![0, 1, -1, i128::MAX, i128::MIN];
        for e in [52, 53, 54, 62, 63, 64, 100] {
            let p = 1i128 << e;
            fixed.extend([p - 1, p, p + 1, -p - 1, -p, -p + 1]);
        }
        fixed.extend([i128::from(i64::MAX), i128::from(i64::MIN)]);
        for f in fixed {
            assert_eq!(to_f64(f), f as f64 / SCALE as f64, "to_f64({f})");
        }
    }

    proptest::proptest! {
        #[test]
        fn the_shortcuts_hold_for_any_value(v in proptest::num::f64::ANY, f in proptest::num::i128::ANY, small in proptest::num::i64::ANY) {
            proptest::prop_assert_eq!(to_fixed(v), (v * SCALE as f64).round() as i128);
            proptest::prop_assert_eq!(to_f64(f), f as f64 / SCALE as f64);
            let s = i128::from(small);
            proptest::prop_assert_eq!(to_f64(s), s as f64 / SCALE as f64);
        }
    }

    #[test]
    fn map_keeps_first_position_and_last_value() {
        let m = ResourceMap::from_f64_pairs([
            ("CPU".to_string(), 1.0),
            ("GPU".to_string(), 2.0),
            ("CPU".to_string(), 3.0),
        ]);
        assert_eq!(m.0, vec![("CPU".into(), 30000), ("GPU".into(), 20000)]);
    }
}
