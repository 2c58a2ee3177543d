//! When a queued key runs: the ready time an add asks for, merged with the one it already has
//! (earliest wins, and debounce batches that a burst of adds pushes back up to a cap).

use super::config::Settings;

/// A requested ready time, and the debounce batch it belongs to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Schedule {
    pub(super) at: f64,
    /// Set while the ready time is a debounce time: the latest time further debounced adds
    /// may push it to (the batch's `debounce_max` cap, or an earlier explicitly requested
    /// ready time).
    pub(super) deadline: Option<f64>,
}

impl Schedule {
    /// Merge an add into the current schedule (`None` for a key with no pending run).
    ///
    /// An add with `after == 0` while debounce is on would make the key ready now, so it is
    /// debounced: it moves the ready time to `now + debounce` (trailing edge), but never past
    /// the batch's deadline. Any other add is an explicit time and merges by earliest-wins,
    /// which also caps the batch's deadline.
    pub(super) fn merge_add(
        current: Option<Schedule>,
        after: f64,
        now: f64,
        cfg: &Settings,
    ) -> Schedule {
        let debounced = cfg.debounce > 0.0 && after == 0.0;
        match (current, debounced) {
            (None, false) => Schedule {
                at: now + after,
                deadline: None,
            },
            (None, true) => Schedule {
                at: now + cfg.debounce,
                deadline: Some(now + cfg.debounce_max),
            },
            (Some(s), false) => s.merge_time(now + after),
            (Some(s), true) => match s.deadline {
                Some(deadline) => Schedule {
                    at: (now + cfg.debounce).min(deadline),
                    deadline: Some(deadline),
                },
                // The key is already due at an explicit time; a debounce batch only starts if
                // it would run sooner than that, and may then not be pushed past it.
                None if now + cfg.debounce < s.at => Schedule {
                    at: now + cfg.debounce,
                    deadline: Some((now + cfg.debounce_max).min(s.at)),
                },
                None => s,
            },
        }
    }

    /// Earliest-wins merge of an explicit ready time (never debounced).
    pub(super) fn merge_time(self, at: f64) -> Schedule {
        Schedule {
            at: self.at.min(at),
            deadline: self.deadline.map(|d| d.min(at)),
        }
    }
}

/// The follow-up of a dirty in-flight key: merged ready time and priority of the adds that
/// arrived while it ran.
#[derive(Debug, Clone, Copy)]
pub(super) struct FollowUp {
    pub(super) schedule: Schedule,
    pub(super) priority: i64,
}
