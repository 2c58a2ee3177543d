//! Per-key exponential backoff with jitter, drawn from a tiny deterministic generator.
//!
//! The generator is splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
//! generators", 2014): eight lines of integer arithmetic that the pure-Python model in
//! `fastctl._model` repeats exactly, so that a scheduler built with the same `seed` produces
//! bit-identical backoff delays in Rust and in Python. It is not a cryptographic generator and
//! does not need to be one: jitter only spreads retries apart.

/// A splitmix64 generator: a 64-bit counter advanced by the golden-ratio increment and mixed.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator that starts from `seed`; the same seed always yields the same sequence.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float uniform in [0, 1): the top 53 bits scaled by 2^-53, which is exact, so Python's
    /// `(x >> 11) * 2.0**-53` gives the same value.
    pub fn next_unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
}

/// The jitter factor `j`, uniform in [0.8, 1.2].
pub fn jitter(rng: &mut SplitMix64) -> f64 {
    0.8 + 0.4 * rng.next_unit()
}

/// The delay before retry number `failures` (1 for the first failure):
/// `min(max, base * 2^(failures-1) * j)`.
///
/// The exponent is capped at 1023 so that `2^(n-1)` stays finite (a zero `base` must give
/// zero, not `0 * inf = NaN`); an overflow of the product to infinity is then cut by `max`.
/// Exactly one jitter value is drawn per call, whatever the result, so the Python model
/// stays in step.
pub fn delay(base: f64, max: f64, failures: u32, rng: &mut SplitMix64) -> f64 {
    let exponent = failures.saturating_sub(1).min(1023) as i32;
    let j = jitter(rng);
    (base * 2f64.powi(exponent) * j).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs for seed 1234567, computed independently with Python integers.
        let mut rng = SplitMix64::new(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(rng.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn same_seed_same_sequence() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn jitter_stays_within_bounds_and_spreads() {
        let mut rng = SplitMix64::new(7);
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for _ in 0..100_000 {
            let j = jitter(&mut rng);
            assert!((0.8..=1.2).contains(&j), "{j}");
            lo = lo.min(j);
            hi = hi.max(j);
        }
        assert!(
            lo < 0.801 && hi > 1.199,
            "jitter does not cover its range: {lo}..{hi}"
        );
    }

    #[test]
    fn delay_doubles_per_failure() {
        let mut rng = SplitMix64::new(1);
        for n in 1..=10u32 {
            let d = delay(0.005, 300.0, n, &mut rng);
            let nominal = 0.005 * f64::from(1u32 << (n - 1));
            assert!(d >= nominal * 0.8 && d <= nominal * 1.2, "n={n} d={d}");
        }
    }

    #[test]
    fn delay_is_capped_and_never_nan() {
        let mut rng = SplitMix64::new(1);
        assert_eq!(delay(0.005, 300.0, 40, &mut rng), 300.0);
        assert_eq!(delay(0.005, 300.0, u32::MAX, &mut rng), 300.0);
        assert_eq!(delay(f64::MAX, 300.0, 2000, &mut rng), 300.0);
        assert_eq!(delay(0.0, 300.0, u32::MAX, &mut rng), 0.0);
    }
}
