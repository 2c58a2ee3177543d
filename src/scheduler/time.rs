//! Times and delays as the scheduler accepts them: the checks every operation applies to its
//! `now` and delay arguments before it changes anything.

use super::Error;

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
