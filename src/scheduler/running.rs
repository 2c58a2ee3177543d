//! The keys in flight: which ones (with the follow-up of dirty ones) and in what order they
//! were popped, for the longest-running and unfinished-work metrics.

use hashbrown::HashMap;
use std::collections::VecDeque;

/// In-flight keys by slot, each with its pop sequence number and an optional follow-up `V`.
///
/// `order` lists (sequence, slot) in pop order; a key that is done leaves a stale entry,
/// dropped when it reaches the front or when stale entries outnumber live ones, so `done` in
/// any order stays O(1) amortised.
#[derive(Debug)]
pub struct Running<V> {
    live: HashMap<u32, (u64, Option<V>)>,
    order: VecDeque<(u64, u32)>,
}

impl<V> Default for Running<V> {
    fn default() -> Self {
        Self {
            live: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<V> Running<V> {
    /// Mark `idx` in flight, popped with sequence number `seq` (larger than any before).
    pub fn insert(&mut self, seq: u64, idx: u32) {
        self.live.insert(idx, (seq, None));
        self.order.push_back((seq, idx));
    }

    /// End the in-flight state of `idx`, returning its follow-up.
    pub fn remove(&mut self, idx: u32) -> Option<V> {
        let (_, follow_up) = self.live.remove(&idx)?;
        self.drop_stale();
        follow_up
    }

    /// The follow-up of an in-flight key (`None` when it is not in flight).
    pub fn follow_up(&self, idx: u32) -> Option<&Option<V>> {
        self.live.get(&idx).map(|(_, f)| f)
    }

    /// The follow-up slot of an in-flight key.
    pub fn follow_up_mut(&mut self, idx: u32) -> Option<&mut Option<V>> {
        self.live.get_mut(&idx).map(|(_, f)| f)
    }

    fn is_live(&self, (seq, idx): (u64, u32)) -> bool {
        self.live.get(&idx).is_some_and(|&(s, _)| s == seq)
    }

    fn drop_stale(&mut self) {
        while let Some(&front) = self.order.front() {
            if self.is_live(front) {
                break;
            }
            self.order.pop_front();
        }
        if self.order.len() > 32 && self.order.len() > 2 * self.live.len() {
            let live = &self.live;
            self.order
                .retain(|&(seq, idx)| live.get(&idx).is_some_and(|&(s, _)| s == seq));
        }
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// In-flight slots in pop order (the first is the longest running).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.order.iter().copied().filter(|&e| self.is_live(e))
    }

    /// In-flight slots with their sequence number and whether they have a follow-up.
    pub fn entries(&self) -> impl Iterator<Item = (u32, u64, bool)> + '_ {
        self.live.iter().map(|(&i, (s, f))| (i, *s, f.is_some()))
    }

    /// Check that `order` lists every live key exactly once, in pop order.
    pub fn check(&self) -> Result<(), String> {
        let seqs: Vec<u64> = self.iter().map(|(s, _)| s).collect();
        if seqs.len() != self.live.len() {
            return Err("in-flight order misses keys".into());
        }
        if !seqs.windows(2).all(|w| w[0] < w[1]) {
            return Err("in-flight order is out of order".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_pop_order_and_follow_ups() {
        let mut r: Running<&str> = Running::default();
        r.insert(1, 10);
        r.insert(2, 11);
        r.insert(3, 12);
        *r.follow_up_mut(11).unwrap() = Some("again");
        assert_eq!(r.remove(11), Some("again"));
        assert_eq!(r.remove(10), None);
        assert_eq!(r.iter().collect::<Vec<_>>(), [(3, 12)]);
        assert_eq!(r.len(), 1);
        assert!(r.follow_up_mut(10).is_none());
        r.check().unwrap();
    }

    #[test]
    fn stale_entries_do_not_pile_up_behind_a_long_runner() {
        let mut r: Running<()> = Running::default();
        r.insert(0, 0); // runs "forever"
        for s in 1..10_000u64 {
            r.insert(s, 1);
            r.remove(1);
        }
        assert!(r.order.len() <= 34, "{}", r.order.len());
        assert_eq!(r.iter().collect::<Vec<_>>(), [(0, 0)]);
        r.check().unwrap();
    }

    /// `order` is compacted exactly when it holds more than 32 entries and more than twice
    /// as many as there are live keys: sooner would make `remove` O(n) (a compaction per
    /// call), later would let stale entries pile up behind a long-running key.
    #[test]
    fn stale_entries_are_compacted_past_32_and_past_twice_the_live_keys() {
        // `n` keys in flight; the first (the longest running) stays, the others end in pop
        // order, each leaving a stale entry behind the live front. The length of `order`
        // after each removal, as (removals, length) at each change.
        let lengths = |n: u64| {
            let mut r: Running<()> = Running::default();
            for s in 0..n {
                r.insert(s, s as u32);
            }
            let mut changes = vec![(0, r.order.len())];
            for s in 1..n {
                r.remove(s as u32);
                r.check().unwrap();
                if r.order.len() != changes.last().unwrap().1 {
                    changes.push((s, r.order.len()));
                }
            }
            assert_eq!(r.iter().collect::<Vec<_>>(), [(0, 0)]);
            changes
        };
        // 32 entries are never more than 32: no compaction, however few keys stay live.
        assert_eq!(lengths(32), [(0, 32)]);
        // 34 entries: 17 live keys are exactly half, not fewer; at 16 it compacts to them.
        assert_eq!(lengths(34), [(0, 34), (18, 16)]);
    }

    #[test]
    fn entries_list_each_live_key_with_its_follow_up_flag() {
        let mut r: Running<u8> = Running::default();
        r.insert(4, 1);
        r.insert(7, 2);
        r.insert(9, 3);
        *r.follow_up_mut(2).unwrap() = Some(1);
        r.remove(3);
        let mut got: Vec<_> = r.entries().collect();
        got.sort_unstable();
        assert_eq!(got, [(1, 4, false), (2, 7, true)]);
    }

    #[test]
    fn check_finds_a_missing_or_misordered_entry() {
        let mut r: Running<()> = Running::default();
        r.insert(1, 1);
        r.insert(2, 2);
        r.check().unwrap();
        // Order lists a live key twice, under the same sequence number.
        r.order.push_back((2, 2));
        assert!(r.check().is_err());
        // Order is missing a live key.
        r.order.clear();
        r.order.push_back((1, 1));
        assert!(r.check().is_err());
        // Order lists live keys backwards.
        r.order.clear();
        r.order.push_back((2, 2));
        r.order.push_back((1, 1));
        assert!(r.check().is_err());
        // Two keys popped under one sequence number: not strictly increasing.
        let mut r: Running<()> = Running::default();
        r.insert(5, 1);
        r.insert(5, 2);
        assert!(r.check().is_err());
    }
}
