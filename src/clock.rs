//! The default clock: the one behind Python's `time.monotonic()` (and so asyncio's
//! `loop.time()`), read without calling into Python where we know which one it is.

/// Seconds on `CLOCK_MONOTONIC`, which is what CPython's `time.monotonic()` reads on Linux.
#[cfg(target_os = "linux")]
pub fn monotonic() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return None;
    }
    // time_t and c_long are not i64 on every target, hence the casts.
    #[allow(clippy::unnecessary_cast)]
    // The same conversion as CPython's `_PyTime_AsSecondsDouble`, so both read equal values.
    let ns = ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64;
    Some(if ns % 1_000_000_000 == 0 {
        (ns / 1_000_000_000) as f64
    } else {
        ns as f64 / 1e9
    })
}

/// Elsewhere the binding asks Python's `time.monotonic()` itself.
#[cfg(not(target_os = "linux"))]
pub fn monotonic() -> Option<f64> {
    None
}
