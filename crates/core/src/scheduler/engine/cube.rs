//! `x³` as Ray computes it, without the C library's `pow` where its answer is known.
//!
//! Ray's utilisation term is `util ** 3` in Python, which calls the C library's `pow`. A
//! placement pass over many distinct nodes computes it millions of times, and `pow` is a
//! long routine. On Linux, glibc (2.28 and later) and musl share Arm's optimized-routines
//! `pow`, whose documented worst-case error is 0.54 ULP. So wherever the exact cube lies
//! more than 0.54 ULP from every double but one (that is, away from a rounding midpoint),
//! that one double is what `pow` returns. [`cube`] computes the exact cube as an unevaluated
//! sum (Dekker's exact products), rounds it, and keeps the result only when it lies within
//! 3/8 ULP of the exact value (every other double then lies more than 5/8 ULP away);
//! otherwise, and on every other platform, it asks `pow`. The platforms are 64-bit x86 and
//! Arm Linux with glibc or musl: there `f64` arithmetic is plain IEEE double (no x87 extra
//! precision, which would break the exact products) and `pow` is Arm's.

/// `x.powf(3.0)`, with the same result (see the module's docs).
#[inline]
pub(super) fn cube(x: f64) -> f64 {
    if cfg!(all(
        target_os = "linux",
        any(target_env = "gnu", target_env = "musl"),
        any(target_arch = "x86_64", target_arch = "aarch64")
    )) && let Some(c) = clear_cube(x)
    {
        return c;
    }
    x.powf(3.0)
}

/// The correctly rounded `x³` when it is clear of a rounding midpoint, else `None` (also
/// for 0, magnitudes beyond `[2^-256, 2^256]`, a result that is a power of two, NaN and
/// infinities).
#[inline]
fn clear_cube(x: f64) -> Option<f64> {
    let ax = x.abs();
    // Within this range no product or error term below overflows, underflows or becomes
    // subnormal, so the products are exact. (NaN fails the comparison.)
    if !(ax >= 1.0 / 2f64.powi(256) && ax <= 2f64.powi(256)) {
        return None;
    }
    let (p, e1) = exact_product(x, x); // x² = p + e1
    let (q, e2) = exact_product(p, x); // p·x = q + e2
    // x³ = q + e2 + e1·x; e1·x is rounded, an error of about 2^-106 of x³.
    let t = e2 + e1 * x;
    let c = q + t;
    // c is within two ULPs of q, so q - c is exact (Sterbenz); d is x³ - c up to an error
    // far below an ULP of c.
    let d = (q - c) + t;
    let bits = c.abs().to_bits();
    if bits & ((1 << 52) - 1) == 0 {
        // A power of two: the doubles below it are closer together than those above.
        return None;
    }
    let ulp = f64::from_bits((bits >> 52).checked_sub(52)? << 52);
    (d.abs() <= 0.375 * ulp).then_some(c)
}

/// `a·b` as a rounded product and its exact error (Dekker's product with Veltkamp's
/// split; exact while nothing overflows or underflows).
#[inline]
fn exact_product(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    let (ah, al) = split(a);
    let (bh, bl) = split(b);
    let e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    (p, e)
}

/// `a` as two halves of at most 26 significant bits each, summing to `a` exactly.
#[inline]
fn split(a: f64) -> (f64, f64) {
    const FACTOR: f64 = 134_217_729.0; // 2^27 + 1
    let c = FACTOR * a;
    let hi = c - (c - a);
    (hi, a - hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The same bits as the C library's `pow(x, 3)`, `-0.0` and NaN included.
    fn same(x: f64) {
        let want = x.powf(3.0);
        let got = cube(x);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "cube({x:e}) = {got:e}, pow gives {want:e}"
        );
    }

    #[test]
    fn equals_pow_on_the_utilisations_a_pass_computes() {
        // (total - available) / total for totals and availabilities in Ray's fixed point,
        // as the score computes it.
        for total in [1u32, 2, 3, 4, 6, 7, 8, 12, 16, 48, 96, 100, 1000] {
            let t = f64::from(total);
            for k in 0..=(total * 80) {
                let a = f64::from(k) * 0.0125;
                same((t - a) / t);
            }
        }
        // Memory in bytes, each node its own amount.
        let total = 68_719_476_736.0;
        for i in 0..200_000u32 {
            let a = 34_359_738_368.0 - f64::from(i) * 1_048_576.0 - f64::from(i % 7) * 0.1;
            same((total - a) / total);
        }
    }

    #[test]
    fn equals_pow_at_the_edges() {
        for x in [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            2.0,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            5e-324,
            1e-200,
            1e-100,
            1e100,
            1e103,
            1e200,
            f64::MAX,
            f64::MIN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            2f64.powi(256),
            1.0 / 2f64.powi(256),
            2f64.powi(256) * (1.0 + f64::EPSILON),
            1.0 - f64::EPSILON / 2.0,
            1.0 + f64::EPSILON,
            3f64.sqrt(),
            2f64.cbrt(),
        ] {
            same(x);
        }
    }

    /// The fast path is taken for most values (this is where the time goes), refused for
    /// some ordinary ones (those near a midpoint), and for powers of two, 0 and the rest.
    #[test]
    fn the_fast_path_answers_most_values_and_refuses_the_rest() {
        let xs: Vec<f64> = (1..10_000).map(|i| f64::from(i) / 10_007.0).collect();
        let answered = xs.iter().filter(|&&x| clear_cube(x).is_some()).count();
        assert!(answered * 10 >= xs.len() * 7, "{answered} of {}", xs.len());
        assert!(answered < xs.len(), "some values lie near a midpoint");
        assert_eq!(clear_cube(0.5), None);
        assert_eq!(clear_cube(0.0), None);
        assert_eq!(clear_cube(f64::NAN), None);
        assert_eq!(clear_cube(1e300), None);
        // The exact product is exact.
        let (p, e) = exact_product(0.1, 0.3);
        assert_ne!(e, 0.0);
        assert_eq!(p, 0.1 * 0.3);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        #[test]
        fn equals_pow_on_any_unit_interval_value(x in 0.0f64..=1.0) {
            same(x);
            same(-x);
        }

        #[test]
        fn equals_pow_on_any_value(x in proptest::num::f64::ANY) {
            same(x);
        }
    }
}
