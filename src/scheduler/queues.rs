//! The two ordered queues of queued keys: waiting keys by ready time, ready keys by priority
//! and age. In-flight keys are in neither, so no operation ever steps over a busy key.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet};

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

/// Waiting keys ordered by (ready time, sequence): the first entry is the next to be due.
#[derive(Debug, Default)]
pub struct Waiting {
    order: BTreeSet<(Time, u64, u32)>,
}

impl Waiting {
    pub fn insert(&mut self, at: f64, seq: u64, idx: u32) {
        self.order.insert((Time(at), seq, idx));
    }

    pub fn remove(&mut self, at: f64, seq: u64, idx: u32) {
        let removed = self.order.remove(&(Time(at), seq, idx));
        debug_assert!(removed, "waiting entry missing");
    }

    /// The earliest ready time, if any key is waiting.
    pub fn first_at(&self) -> Option<f64> {
        self.order.first().map(|e| e.0 .0)
    }

    /// Remove and return the first key if it is due at `now`.
    pub fn pop_due(&mut self, now: f64) -> Option<(f64, u32)> {
        match self.order.first() {
            Some(&(at, _, idx)) if at.0 <= now => {
                self.order.pop_first();
                Some((at.0, idx))
            }
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Entries in order, as (ready time, sequence, slot).
    pub fn iter(&self) -> impl Iterator<Item = (f64, u64, u32)> + '_ {
        self.order.iter().map(|&(at, s, i)| (at.0, s, i))
    }
}

/// Ready keys in serving order: highest priority first, then by sequence number, which the
/// scheduler hands out in the order keys become ready, so it is FIFO by ready time.
///
/// For the `max_wait` rule it also needs the oldest ready key of any priority. Rather than a
/// second per-key index, `heads` holds the first (oldest) entry of each non-empty priority
/// level: the oldest key overall is the first of those. It costs one entry per distinct
/// priority, not per key.
#[derive(Debug, Default)]
pub struct Ready {
    order: BTreeSet<(Reverse<i64>, u64, u32)>,
    heads: BTreeMap<(u64, i64), u32>,
}

/// A ready entry: (priority, sequence, slot).
pub type Entry = (i64, u64, u32);

impl Ready {
    pub fn insert(&mut self, priority: i64, seq: u64, idx: u32) {
        match self.level_head(priority) {
            None => {
                self.heads.insert((seq, priority), idx);
            }
            Some((_, head_seq, _)) if seq < head_seq => {
                self.heads.remove(&(head_seq, priority));
                self.heads.insert((seq, priority), idx);
            }
            Some(_) => {}
        }
        self.order.insert((Reverse(priority), seq, idx));
    }

    pub fn remove(&mut self, priority: i64, seq: u64, idx: u32) {
        let removed = self.order.remove(&(Reverse(priority), seq, idx));
        debug_assert!(removed, "ready entry missing");
        if self.heads.remove(&(seq, priority)).is_some() {
            if let Some((_, next_seq, next_idx)) = self.level_head(priority) {
                self.heads.insert((next_seq, priority), next_idx);
            }
        }
    }

    /// The oldest entry of one priority level.
    fn level_head(&self, priority: i64) -> Option<Entry> {
        self.order
            .range((Reverse(priority), 0, 0)..)
            .next()
            .filter(|e| e.0 .0 == priority)
            .map(|&(Reverse(p), s, i)| (p, s, i))
    }

    /// The next key in priority order.
    pub fn first(&self) -> Option<Entry> {
        self.order.first().map(|&(Reverse(p), s, i)| (p, s, i))
    }

    /// The key that has been ready the longest, of any priority.
    pub fn oldest(&self) -> Option<Entry> {
        self.heads.first_key_value().map(|(&(s, p), &i)| (p, s, i))
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Entries in serving order (ignoring `max_wait`).
    pub fn iter(&self) -> impl Iterator<Item = Entry> + '_ {
        self.order.iter().map(|&(Reverse(p), s, i)| (p, s, i))
    }

    /// Check that `heads` holds exactly the first entry of each priority level.
    pub fn check_heads(&self) -> Result<(), String> {
        let mut expected = BTreeMap::new();
        let mut last = None;
        for (p, s, i) in self.iter() {
            if last != Some(p) {
                expected.insert((s, p), i);
                last = Some(p);
            }
        }
        if expected == self.heads {
            Ok(())
        } else {
            Err("ready level heads are stale".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_orders_by_priority_then_sequence() {
        let mut r = Ready::default();
        r.insert(0, 1, 10);
        r.insert(5, 2, 11);
        r.insert(0, 3, 12);
        r.insert(-100, 4, 13);
        assert_eq!(r.first(), Some((5, 2, 11)));
        assert_eq!(r.oldest(), Some((0, 1, 10)));
        r.remove(5, 2, 11);
        assert_eq!(r.first(), Some((0, 1, 10)));
        r.remove(0, 1, 10);
        assert_eq!(r.first(), Some((0, 3, 12)));
        assert_eq!(r.oldest(), Some((0, 3, 12)));
        r.remove(0, 3, 12);
        assert_eq!(r.oldest(), Some((-100, 4, 13)));
        r.remove(-100, 4, 13);
        assert_eq!(r.first(), None);
        assert_eq!(r.oldest(), None);
        assert!(r.heads.is_empty());
    }

    #[test]
    fn heads_follow_an_older_entry_moved_into_a_level() {
        let mut r = Ready::default();
        r.insert(1, 5, 1);
        r.insert(1, 6, 2);
        // A key that became ready earlier (seq 3) is raised to priority 1.
        r.insert(1, 3, 3);
        assert_eq!(r.oldest(), Some((1, 3, 3)));
        r.remove(1, 3, 3);
        assert_eq!(r.oldest(), Some((1, 5, 1)));
        r.remove(1, 6, 2);
        assert_eq!(r.oldest(), Some((1, 5, 1)));
        assert_eq!(r.heads.len(), 1);
    }

    #[test]
    fn waiting_pops_only_due_entries_in_time_order() {
        let mut w = Waiting::default();
        w.insert(5.0, 1, 1);
        w.insert(3.0, 2, 2);
        w.insert(3.0, 0, 3);
        assert_eq!(w.first_at(), Some(3.0));
        assert_eq!(w.pop_due(2.9), None);
        assert_eq!(w.pop_due(3.0), Some((3.0, 3)));
        assert_eq!(w.pop_due(3.0), Some((3.0, 2)));
        assert_eq!(w.pop_due(4.0), None);
        w.remove(5.0, 1, 1);
        assert_eq!(w.len(), 0);
    }
}
