//! The two ordered queues of queued keys: waiting keys by ready time, ready keys by priority
//! and age. In-flight keys are in neither, so no operation ever steps over a busy key.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

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
/// Each priority level is a FIFO deque: a newly ready key always has the highest sequence
/// number yet, so it is appended, and the next key is taken from the front, both O(1). The
/// one exception, a ready key raised from a lower priority (it keeps its older sequence
/// number, and so its age), goes into the level's small ordered `late` set instead. A key
/// removed from the middle of a deque (such a raise, or the `max_wait` rule) is left there
/// as a tombstone, recorded in `removed` and dropped when it reaches the front or when
/// tombstones outnumber live entries, so every operation stays O(log n) amortised.
///
/// For the `max_wait` rule `heads` orders the first (oldest) entry of each level by age: the
/// oldest ready key overall is the first head. That costs one entry per distinct priority,
/// not per key.
#[derive(Debug, Default)]
pub struct Ready {
    levels: BTreeMap<Reverse<i64>, Level>,
    heads: BTreeSet<(u64, i64)>,
    len: usize,
}

/// One priority level.
#[derive(Debug, Default)]
struct Level {
    /// Entries (sequence, slot) in increasing sequence order, tombstones included.
    fifo: VecDeque<(u64, u32)>,
    /// Sequence numbers of the tombstones in `fifo`.
    removed: HashSet<u64>,
    /// Entries inserted behind the tail's sequence number.
    late: BTreeSet<(u64, u32)>,
    /// Live entries (fifo without tombstones, plus late).
    len: usize,
}

impl Level {
    /// The oldest live entry.
    fn head(&self) -> Option<(u64, u32)> {
        // The front of `fifo` is never a tombstone (see `drop_tombstones`).
        match (self.fifo.front(), self.late.first()) {
            (Some(&f), Some(&l)) => Some(f.min(l)),
            (f, l) => f.or(l).copied(),
        }
    }

    fn drop_tombstones(&mut self) {
        while let Some(&(seq, _)) = self.fifo.front() {
            if !self.removed.remove(&seq) {
                break;
            }
            self.fifo.pop_front();
        }
        if self.removed.len() > 32 && self.removed.len() * 2 > self.fifo.len() {
            let removed = std::mem::take(&mut self.removed);
            self.fifo.retain(|(seq, _)| !removed.contains(seq));
        }
    }
}

/// A ready entry: (priority, sequence, slot).
pub type Entry = (i64, u64, u32);

impl Ready {
    pub fn insert(&mut self, priority: i64, seq: u64, idx: u32) {
        let level = self.levels.entry(Reverse(priority)).or_default();
        let old_head = level.head();
        if level.fifo.back().is_none_or(|&(tail, _)| tail < seq) {
            level.fifo.push_back((seq, idx));
        } else {
            level.late.insert((seq, idx));
        }
        level.len += 1;
        self.len += 1;
        match old_head {
            None => {
                self.heads.insert((seq, priority));
            }
            Some((head_seq, _)) if seq < head_seq => {
                self.heads.remove(&(head_seq, priority));
                self.heads.insert((seq, priority));
            }
            Some(_) => {}
        }
    }

    pub fn remove(&mut self, priority: i64, seq: u64, idx: u32) {
        let Some(level) = self.levels.get_mut(&Reverse(priority)) else {
            debug_assert!(false, "ready level missing");
            return;
        };
        let old_head = level.head();
        if !level.late.remove(&(seq, idx)) {
            if level.fifo.front() == Some(&(seq, idx)) {
                level.fifo.pop_front();
            } else {
                level.removed.insert(seq);
            }
            level.drop_tombstones();
        }
        level.len -= 1;
        self.len -= 1;
        if old_head == Some((seq, idx)) {
            self.heads.remove(&(seq, priority));
            match level.head() {
                Some((next, _)) => {
                    self.heads.insert((next, priority));
                }
                None => {
                    self.levels.remove(&Reverse(priority));
                }
            }
        }
    }

    /// Remove and return the next key in priority order.
    pub fn pop_first(&mut self) -> Option<Entry> {
        let (&Reverse(priority), level) = self.levels.iter().next()?;
        let (seq, idx) = level.head()?;
        self.remove(priority, seq, idx);
        Some((priority, seq, idx))
    }

    /// The next key in priority order.
    #[cfg(test)]
    pub fn first(&self) -> Option<Entry> {
        let (&Reverse(priority), level) = self.levels.iter().next()?;
        level.head().map(|(s, i)| (priority, s, i))
    }

    /// The key that has been ready the longest, of any priority.
    pub fn oldest(&self) -> Option<Entry> {
        let &(seq, priority) = self.heads.first()?;
        let (_, idx) = self.levels.get(&Reverse(priority))?.head()?;
        Some((priority, seq, idx))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Live entries, level by level from the highest priority, each level in age order.
    pub fn iter(&self) -> impl Iterator<Item = Entry> + '_ {
        self.levels.iter().flat_map(|(&Reverse(p), level)| {
            let mut live: Vec<(u64, u32)> = level
                .fifo
                .iter()
                .filter(|(s, _)| !level.removed.contains(s))
                .chain(level.late.iter())
                .copied()
                .collect();
            live.sort_unstable();
            live.into_iter().map(move |(s, i)| (p, s, i))
        })
    }

    /// Check the level bookkeeping and `heads` against the entries.
    pub fn check_heads(&self) -> Result<(), String> {
        let mut heads = BTreeSet::new();
        let mut total = 0;
        for (&Reverse(p), level) in &self.levels {
            let live = level.fifo.len() - level.removed.len() + level.late.len();
            if live != level.len || live == 0 {
                return Err(format!("ready level {p} counts {} of {live}", level.len));
            }
            if level
                .fifo
                .front()
                .is_some_and(|(s, _)| level.removed.contains(s))
            {
                return Err(format!("ready level {p} starts with a tombstone"));
            }
            if !level
                .fifo
                .iter()
                .zip(level.fifo.iter().skip(1))
                .all(|(a, b)| a.0 < b.0)
            {
                return Err(format!("ready level {p} is out of order"));
            }
            heads.insert((level.head().map_or(0, |h| h.0), p));
            total += live;
        }
        if heads != self.heads {
            return Err("ready level heads are stale".into());
        }
        if total != self.len {
            return Err("ready length is stale".into());
        }
        Ok(())
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
        assert!(r.heads.is_empty() && r.levels.is_empty());
        r.check_heads().unwrap();
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
        r.check_heads().unwrap();
    }

    #[test]
    fn pop_first_serves_priority_order_and_keeps_heads() {
        let mut r = Ready::default();
        for (p, s) in [(0, 1), (2, 2), (0, 3), (2, 4), (1, 5)] {
            r.insert(p, s, s as u32);
        }
        let mut got = Vec::new();
        while let Some((p, s, _)) = r.pop_first() {
            r.check_heads().unwrap();
            got.push((p, s));
        }
        assert_eq!(got, [(2, 2), (2, 4), (1, 5), (0, 1), (0, 3)]);
        assert!(r.heads.is_empty() && r.levels.is_empty());
    }

    #[test]
    fn tombstones_are_skipped_and_compacted() {
        let mut r = Ready::default();
        for s in 0..1000u64 {
            r.insert(0, s, s as u32);
        }
        // Remove three of every four entries from the middle: tombstones.
        for s in (1..1000u64).filter(|s| s % 4 != 0) {
            r.remove(0, s, s as u32);
            r.check_heads().unwrap();
        }
        assert_eq!(r.len(), 250);
        let level = &r.levels[&Reverse(0)];
        assert!(level.fifo.len() < 600, "compacted: {}", level.fifo.len());
        let got: Vec<u64> = std::iter::from_fn(|| r.pop_first().map(|e| e.1)).collect();
        assert_eq!(got, (0..1000).step_by(4).collect::<Vec<_>>());
        assert!(r.levels.is_empty() && r.heads.is_empty());
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
