//! The waiting queue: keys by (ready time, sequence), the first the next to be due.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

use crate::scheduler::sorted::Sorted;

/// A finite, non-NaN time (the scheduler validates every time it accepts), ordered totally.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Time(pub f64);

impl Eq for Time {}

impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Time {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Hash for Time {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Equal under total_cmp means equal bits.
        self.0.to_bits().hash(state);
    }
}

/// Waiting keys ordered by (ready time, sequence): the first entry is the next to be due.
#[derive(Debug, Default)]
pub struct Waiting {
    pub(super) order: Sorted<(Time, u64)>,
}

impl Waiting {
    #[inline]
    pub fn insert(&mut self, at: f64, seq: u64, idx: u32) {
        self.order.insert((Time(at), seq), idx);
    }

    #[inline]
    pub fn remove(&mut self, at: f64, seq: u64, idx: u32) {
        self.order.remove((Time(at), seq), idx);
    }

    /// The earliest ready time, if any key is waiting.
    pub fn first_at(&self) -> Option<f64> {
        self.order.first().map(|((at, _), _)| at.0)
    }

    /// Remove and return the first key if it is due at `now`.
    pub fn pop_due(&mut self, now: f64) -> Option<(f64, u32)> {
        match self.order.first() {
            Some(((at, seq), idx)) if at.0 <= now => {
                self.order.remove((at, seq), idx);
                Some((at.0, idx))
            }
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.order.len
    }

    /// Entries in order, as (ready time, sequence, slot).
    pub fn iter(&self) -> impl Iterator<Item = (f64, u64, u32)> {
        self.order
            .entries()
            .into_iter()
            .map(|((at, s), i)| (at.0, s, i))
    }

    pub fn check(&self) -> Result<(), String> {
        self.order.check()
    }
}
