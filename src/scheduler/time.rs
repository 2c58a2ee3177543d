//! Times and delays as the scheduler accepts them: the checks every operation applies to its
//! `now` and delay arguments before it changes anything.

use super::error::Error;

/// The longest delay the scheduler accepts, in seconds (180 days, as kube-runtime clamps
/// requeues): longer delays, including infinity, are cut to this. It keeps every sum of a
/// time and a delay finite and far from overflow.
pub const MAX_DELAY: f64 = 15_552_000.0;

/// Check a delay argument: NaN or negative is an error, anything above `MAX_DELAY`
/// (infinity included) is clamped. `+ 0.0` turns `-0.0` into `0.0` so that every copy of the
/// semantics (the Python model too) orders equal times the same way.
pub fn check_delay(name: &'static str, value: f64) -> Result<f64, Error> {
    if value.is_nan() || value < 0.0 {
        return Err(Error::InvalidDelay { name, value });
    }
    Ok(value.min(MAX_DELAY) + 0.0)
}

/// Check a `now` argument: it must be finite.
pub fn check_now(now: f64) -> Result<f64, Error> {
    if now.is_finite() {
        Ok(now + 0.0)
    } else {
        Err(Error::InvalidTime(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_zero_is_accepted_as_positive_zero() {
        // -0.0 == 0.0, so only the sign bit shows the difference: an unnormalised -0.0
        // would sort before 0.0 in the queues' total order, unlike in the Python model.
        let delay = check_delay("after", -0.0).unwrap();
        assert_eq!(delay.to_bits(), 0.0f64.to_bits());
        let now = check_now(-0.0).unwrap();
        assert_eq!(now.to_bits(), 0.0f64.to_bits());
    }

    #[test]
    fn valid_values_pass_unchanged_and_long_delays_are_clamped() {
        assert_eq!(check_delay("after", 0.0), Ok(0.0));
        assert_eq!(check_delay("after", 2.5), Ok(2.5));
        assert_eq!(check_delay("after", f64::INFINITY), Ok(MAX_DELAY));
        assert_eq!(check_now(-3.5), Ok(-3.5));
        assert_eq!(check_now(1e9), Ok(1e9));
        assert_eq!(
            check_delay("after", -1e-300),
            Err(Error::InvalidDelay {
                name: "after",
                value: -1e-300
            })
        );
        assert!(check_now(f64::NEG_INFINITY).is_err());
    }
}
