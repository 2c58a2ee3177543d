//! Scheduler settings: `Config` as the caller gives it, with its `Default` (the one place the
//! scheduler's defaults are written: the Python binding resolves every omitted or `None`
//! keyword from it and publishes it as `fastctl._core.SCHEDULER_DEFAULTS`), and `Settings`,
//! the validated form the scheduler runs with.

use super::error::Error;
use super::time::{check_delay, MAX_DELAY};

/// Scheduler settings, as given by the caller (validated by `Scheduler::new`).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Most keys in flight at once; 0 means no limit.
    pub concurrency: usize,
    /// Seconds an add that would make a key ready now waits instead (0 disables debounce).
    pub debounce: f64,
    /// Longest a debounce batch may be pushed back, from its first add; default 10 × debounce.
    pub debounce_max: Option<f64>,
    /// A ready key older than this is served before keys of higher priority.
    pub max_wait: f64,
    /// The first failure's backoff, in seconds.
    pub backoff_base: f64,
    /// The longest backoff, in seconds.
    pub backoff_max: f64,
    /// Seed of the jitter generator.
    pub seed: u64,
    /// Most keys of one named fair group in flight at once; 0 means no cap (keys without a
    /// group are bounded by `concurrency` only). At most `MAX_GROUP_CONCURRENCY`.
    pub group_concurrency: usize,
}

/// The largest `group_concurrency` accepted (it is kept as a `u32` per group).
pub const MAX_GROUP_CONCURRENCY: usize = u32::MAX as usize;

impl Default for Config {
    fn default() -> Self {
        Self {
            concurrency: 0,
            debounce: 0.0,
            debounce_max: None,
            max_wait: 30.0,
            backoff_base: 0.005,
            backoff_max: 300.0,
            seed: 0,
            group_concurrency: 0,
        }
    }
}

/// Validated settings: every delay clamped to `MAX_DELAY`, `debounce_max` resolved.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) concurrency: usize,
    pub(super) debounce: f64,
    pub(super) debounce_max: f64,
    pub(super) max_wait: f64,
    pub(super) backoff_base: f64,
    pub(super) backoff_max: f64,
    pub(super) group_concurrency: usize,
}

impl Settings {
    /// Validate `config`: refuses NaN or negative durations and a `debounce_max` shorter than
    /// `debounce`; clamps delays to `MAX_DELAY` and resolves `debounce_max`.
    pub(super) fn new(config: &Config) -> Result<Self, Error> {
        let duration = |name: &'static str, v: f64| {
            check_delay(name, v).map_err(|_| Error::InvalidConfig {
                name,
                message: format!("must be a number of seconds >= 0, got {v}"),
            })
        };
        let debounce = duration("debounce", config.debounce)?;
        let debounce_max = match config.debounce_max {
            Some(v) => duration("debounce_max", v)?,
            None => (debounce * 10.0).min(MAX_DELAY),
        };
        if debounce_max < debounce {
            return Err(Error::InvalidConfig {
                name: "debounce_max",
                message: format!("must be >= debounce ({debounce}), got {debounce_max}"),
            });
        }
        if config.max_wait.is_nan() || config.max_wait < 0.0 {
            return Err(Error::InvalidConfig {
                name: "max_wait",
                message: format!("must be a number of seconds >= 0, got {}", config.max_wait),
            });
        }
        if config.group_concurrency > MAX_GROUP_CONCURRENCY {
            return Err(Error::InvalidConfig {
                name: "group_concurrency",
                message: format!(
                    "must be an int in [0, {MAX_GROUP_CONCURRENCY}], got {}",
                    config.group_concurrency
                ),
            });
        }
        Ok(Self {
            concurrency: config.concurrency,
            debounce,
            debounce_max,
            // Not clamped: infinity simply switches the rule off.
            max_wait: config.max_wait,
            backoff_base: duration("backoff_base", config.backoff_base)?,
            backoff_max: duration("backoff_max", config.backoff_max)?,
            group_concurrency: config.group_concurrency,
        })
    }

    /// These settings as a `Config` (`debounce_max` resolved; the seed is not kept, so 0).
    pub(super) fn to_config(&self) -> Config {
        Config {
            concurrency: self.concurrency,
            debounce: self.debounce,
            debounce_max: Some(self.debounce_max),
            max_wait: self.max_wait,
            backoff_base: self.backoff_base,
            backoff_max: self.backoff_max,
            seed: 0,
            group_concurrency: self.group_concurrency,
        }
    }
}
