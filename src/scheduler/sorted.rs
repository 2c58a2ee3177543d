//! `Sorted`, the ordered queue under both queues of queued keys (`super::queues`) and under
//! each group's ready keys at a fair level (`super::fair`).
//!
//! It is tuned for keys that mostly arrive in increasing order: ready keys are appended in the
//! order they become ready, and waiting keys mostly have ready times later than all before
//! them (a controller's requeue delay is usually one constant).

use hashbrown::HashSet;
use std::collections::{BTreeSet, VecDeque};
use std::hash::Hash;

/// Entries `(K, slot)` in `K` order, with `K` unique.
///
/// An entry whose `K` is above the last one appended goes to the back of a deque, O(1), and
/// the first entry is the front of that deque or the first of the small ordered `late` set
/// that takes the others. An entry removed from the middle of the deque stays there as a
/// tombstone, listed in `removed`, until it reaches the front or tombstones outnumber the
/// rest (then the deque is compacted), so every operation is O(log n) amortised.
///
/// `removed` and `late` live behind one pointer allocated the first time either is needed:
/// a fair level keeps one `Sorted` per group, most of which only ever append and pop, and a
/// small queue is one cache line where the three inline would be two.
#[derive(Debug)]
pub(super) struct Sorted<K> {
    /// Entries in increasing `K` order, tombstones included; the front is never a tombstone.
    fifo: VecDeque<(K, u32)>,
    /// Tombstones and late entries, once there have been any.
    rare: Option<Box<Rare<K>>>,
    /// Live entries.
    pub(super) len: usize,
}

#[derive(Debug)]
struct Rare<K> {
    /// The `K` of each tombstone in `fifo`.
    removed: HashSet<K>,
    /// Entries that arrived below the back of `fifo`.
    late: BTreeSet<(K, u32)>,
}

impl<K> Default for Sorted<K> {
    fn default() -> Self {
        Self {
            fifo: VecDeque::new(),
            rare: None,
            len: 0,
        }
    }
}

impl<K: Ord + Copy + Hash> Sorted<K> {
    /// Insert an entry; true if it is now the first.
    ///
    /// Going to the back of the deque does not make an entry the last: once the deque has
    /// emptied, `late` may still hold entries above it. Only a deque with a (live) front
    /// says the entry is not the first without a look at `late`.
    #[inline]
    pub(super) fn insert(&mut self, k: K, idx: u32) -> bool {
        self.len += 1;
        match self.fifo.back() {
            Some(&(tail, _)) if tail < k => {
                self.fifo.push_back((k, idx));
                false
            }
            Some(_) => {
                self.rare_mut().late.insert((k, idx));
                self.first() == Some((k, idx))
            }
            None => {
                self.fifo.push_back((k, idx));
                self.first() == Some((k, idx))
            }
        }
    }

    #[inline]
    pub(super) fn remove(&mut self, k: K, idx: u32) {
        let late = self.rare.as_mut().is_some_and(|r| r.late.remove(&(k, idx)));
        if !late {
            if self.fifo.front() == Some(&(k, idx)) {
                self.fifo.pop_front();
            } else {
                self.rare_mut().removed.insert(k);
            }
            self.drop_tombstones();
        }
        self.len -= 1;
    }

    #[inline]
    pub(super) fn first(&self) -> Option<(K, u32)> {
        let late = self.rare.as_ref().and_then(|r| r.late.first());
        match (self.fifo.front(), late) {
            (Some(&f), Some(&l)) => Some(f.min(l)),
            (f, l) => f.or(l).copied(),
        }
    }

    /// The slot of the deque's second entry: roughly the entry after the first (it may be
    /// a tombstone, and a late entry may come first), good enough for a prefetch hint.
    #[inline]
    pub(super) fn second_slot(&self) -> Option<u32> {
        self.fifo.get(1).map(|&(_, i)| i)
    }

    #[cold]
    fn rare_mut(&mut self) -> &mut Rare<K> {
        self.rare.get_or_insert_with(|| {
            Box::new(Rare {
                removed: HashSet::default(),
                late: BTreeSet::new(),
            })
        })
    }

    #[inline]
    fn drop_tombstones(&mut self) {
        let Some(rare) = self.rare.as_mut() else {
            return;
        };
        let removed = &mut rare.removed;
        if removed.is_empty() {
            return;
        }
        while let Some(&(k, _)) = self.fifo.front() {
            if !removed.remove(&k) {
                break;
            }
            self.fifo.pop_front();
        }
        if removed.len() > 32 && removed.len() * 2 > self.fifo.len() {
            let removed = std::mem::take(removed);
            self.fifo.retain(|(k, _)| !removed.contains(k));
        }
    }

    /// Entries in the deque, tombstones included (for the tests of compaction).
    #[cfg(test)]
    pub(super) fn deque_len(&self) -> usize {
        self.fifo.len()
    }

    fn is_tombstone(&self, k: &K) -> bool {
        self.rare.as_ref().is_some_and(|r| r.removed.contains(k))
    }

    fn late(&self) -> impl Iterator<Item = &(K, u32)> + '_ {
        self.rare.iter().flat_map(|r| r.late.iter())
    }

    /// How many live entries are below `k`: a binary search of the deque, less its
    /// tombstones below `k`, plus the `late` entries below `k` (for `Ready::ahead`).
    pub(super) fn rank(&self, k: K) -> usize {
        let in_fifo = self.fifo.partition_point(|&(x, _)| x < k);
        let (tombstones, late) = self.rare.as_ref().map_or((0, 0), |r| {
            (
                r.removed.iter().filter(|&&x| x < k).count(),
                r.late.range(..(k, 0)).count(),
            )
        });
        in_fifo - tombstones + late
    }

    /// Live entries in order (O(n log n); for checks).
    pub(super) fn entries(&self) -> Vec<(K, u32)> {
        let mut live: Vec<(K, u32)> = self
            .fifo
            .iter()
            .filter(|(k, _)| !self.is_tombstone(k))
            .chain(self.late())
            .copied()
            .collect();
        live.sort_unstable();
        live
    }

    pub(super) fn check(&self) -> Result<(), String> {
        let (removed, late) = self
            .rare
            .as_ref()
            .map_or((0, 0), |r| (r.removed.len(), r.late.len()));
        if self.fifo.len() - removed + late != self.len {
            return Err("queue length is stale".into());
        }
        if self.fifo.front().is_some_and(|(k, _)| self.is_tombstone(k)) {
            return Err("queue starts with a tombstone".into());
        }
        if !self
            .fifo
            .iter()
            .zip(self.fifo.iter().skip(1))
            .all(|(a, b)| a.0 < b.0)
        {
            return Err("queue is out of order".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::backoff::SplitMix64;

    fn queue(keys: &[u64]) -> Sorted<u64> {
        let mut q = Sorted::default();
        for &k in keys {
            q.insert(k, k as u32);
        }
        q
    }

    #[test]
    fn entries_above_the_back_are_appended_and_the_others_go_late() {
        let mut q = Sorted::default();
        assert!(q.insert(10, 1), "the first entry is the first");
        assert!(!q.insert(20, 2), "appended behind it");
        assert!(!q.insert(15, 3), "below the back: late, not the first");
        assert!(q.insert(5, 4), "below the front: late, and the first");
        assert!(!q.insert(30, 5), "above the back again");
        assert_eq!(q.len, 5);
        assert_eq!(q.deque_len(), 3, "late entries are not in the deque");
        assert_eq!(
            q.first(),
            Some((5, 4)),
            "a late entry below the deque's front"
        );
        assert_eq!(q.entries(), [(5, 4), (10, 1), (15, 3), (20, 2), (30, 5)]);
        // The deque's second entry, not the entry after the first: a hint, not an answer.
        assert_eq!(q.second_slot(), Some(2));
        q.check().unwrap();
    }

    #[test]
    fn first_is_the_smaller_of_the_deque_front_and_the_first_late_entry() {
        let mut q = queue(&[10, 20]);
        q.insert(15, 15);
        assert_eq!(q.first(), Some((10, 10)), "the deque's front is smaller");
        q.remove(10, 10);
        assert_eq!(q.first(), Some((15, 15)), "the late entry is smaller");
        q.remove(15, 15);
        assert_eq!(q.first(), Some((20, 20)));
        q.remove(20, 20);
        assert_eq!((q.first(), q.len), (None, 0));
        q.check().unwrap();
    }

    #[test]
    fn removing_the_front_drops_the_tombstones_behind_it() {
        let mut q = queue(&[1, 2, 3, 4, 5]);
        q.remove(2, 2);
        q.remove(3, 3);
        assert_eq!(q.deque_len(), 5, "removed from the middle: tombstones");
        assert_eq!(q.first(), Some((1, 1)));
        q.remove(1, 1);
        assert_eq!(
            q.deque_len(),
            2,
            "the front and the tombstones behind it are gone"
        );
        assert_eq!(q.first(), Some((4, 4)));
        assert_eq!(q.second_slot(), Some(5));
        assert_eq!(q.entries(), [(4, 4), (5, 5)]);
        q.check().unwrap();
    }

    #[test]
    fn rank_counts_the_live_entries_below_a_key() {
        let mut q = queue(&[10, 20, 30, 40, 50]);
        q.insert(25, 25);
        q.insert(5, 5);
        q.remove(20, 20); // a tombstone
        q.remove(30, 30); // another
                          // Live: 5 (late), 10, 25 (late), 40, 50.
        let ranks: Vec<usize> = [5, 10, 25, 40, 50, 60].map(|k| q.rank(k)).to_vec();
        assert_eq!(ranks, [0, 1, 2, 3, 4, 5]);
        assert_eq!(q.rank(0), 0);
        assert_eq!(
            q.rank(30),
            3,
            "a removed key ranks after the live ones below it"
        );
    }

    /// Once the deque has emptied, late entries may be all that is left: an entry that then
    /// goes to the back of the deque can still be below them, and so the first.
    #[test]
    fn an_entry_appended_to_an_emptied_deque_below_late_ones_is_the_first() {
        let mut q = queue(&[30]);
        assert!(
            q.insert(20, 20),
            "below the only entry: late, and the first"
        );
        q.remove(30, 30);
        assert_eq!((q.deque_len(), q.first()), (0, Some((20, 20))));
        assert!(
            q.insert(10, 10),
            "appended, but below the late 20: the first"
        );
        assert!(!q.insert(40, 40), "appended behind 10");
        assert_eq!(q.entries(), [(10, 10), (20, 20), (40, 40)]);
        q.check().unwrap();
        let mut q = queue(&[30]);
        q.insert(20, 20);
        q.remove(30, 30);
        assert!(
            !q.insert(25, 25),
            "appended above the late 20: not the first"
        );
        assert_eq!(q.first(), Some((20, 20)));
    }

    /// A queue that only appends and pops from the front (most groups' queues at a fair
    /// level) never allocates the tombstones and late entries it does not use.
    #[test]
    fn appending_and_popping_allocate_nothing_rare() {
        let mut q = queue(&[1, 2, 3]);
        q.remove(1, 1);
        q.insert(4, 4);
        q.remove(2, 2);
        assert!(q.rare.is_none());
        q.insert(0, 0);
        assert!(q.rare.is_some(), "a late entry allocates");
    }

    /// Random inserts (mostly above the back, some below), removals from anywhere and pops
    /// from the front, against an ordered set, with the queue's own check after every step.
    #[test]
    fn matches_an_ordered_set_under_random_operations() {
        let mut rng = SplitMix64::new(11);
        let mut q: Sorted<u64> = Sorted::default();
        let mut model: BTreeSet<(u64, u32)> = BTreeSet::new();
        let mut used: HashSet<u64> = HashSet::new();
        let mut next = 0u64;
        for step in 0..20_000u32 {
            match rng.next_u64() % 8 {
                0..=3 => {
                    next += 1 + rng.next_u64() % 3;
                    let k = if rng.next_u64() % 5 == 0 {
                        rng.next_u64() % next // below the back, mostly
                    } else {
                        next
                    };
                    if used.insert(k) {
                        model.insert((k, step));
                        let first = model.first() == Some(&(k, step));
                        assert_eq!(q.insert(k, step), first, "insert of {k}: the first?");
                    }
                }
                4 | 5 if !model.is_empty() => {
                    let i = (rng.next_u64() % model.len() as u64) as usize;
                    let (k, idx) = *model.iter().nth(i).unwrap();
                    q.remove(k, idx);
                    model.remove(&(k, idx));
                }
                _ => {
                    if let Some((k, idx)) = q.first() {
                        q.remove(k, idx);
                    }
                    model.pop_first();
                }
            }
            q.check().unwrap();
            assert_eq!(q.len, model.len());
            assert_eq!(q.first(), model.first().copied());
            if step % 97 == 0 {
                let k = rng.next_u64() % (next + 2);
                assert_eq!(q.rank(k), model.range(..(k, 0)).count(), "rank of {k}");
                assert_eq!(q.entries(), model.iter().copied().collect::<Vec<_>>());
            }
        }
        assert!(q.rare.is_some(), "the run took the late set too");
    }

    /// The deque is compacted exactly when tombstones are more than 32 and more than half
    /// of it: fewer would make removals O(n) (a compaction per removal), more would let
    /// tombstones pile up without bound behind a live front entry.
    #[test]
    fn tombstones_are_compacted_past_32_and_past_half_the_deque() {
        // `n` entries in order, the first one (the front) kept, the others removed in order:
        // each removal leaves a tombstone behind the live front. The deque's length after
        // each removal, as (removals, length) at each change.
        let lengths = |n: u64| {
            let mut q: Sorted<u64> = Sorted::default();
            for k in 0..n {
                q.insert(k, k as u32);
            }
            let mut changes = vec![(0, q.deque_len())];
            for k in 1..n {
                q.remove(k, k as u32);
                q.check().unwrap();
                if q.deque_len() != changes.last().unwrap().1 {
                    changes.push((k, q.deque_len()));
                }
            }
            changes
        };
        // 63 entries: 32 tombstones are more than half, but not more than 32; the 33rd
        // compacts, leaving the 30 live entries.
        assert_eq!(lengths(63), [(0, 63), (33, 30)]);
        // 66 entries: 33 tombstones are exactly half, not more; the 34th compacts.
        assert_eq!(lengths(66), [(0, 66), (34, 32)]);
    }

    #[test]
    fn check_finds_a_stale_length_a_leading_tombstone_and_disorder() {
        let valid = || {
            let mut q: Sorted<u64> = Sorted::default();
            for k in [1, 2, 3] {
                q.insert(k, k as u32);
            }
            q.check().unwrap();
            q
        };
        let mut q = valid();
        q.len += 1;
        assert!(q.check().is_err(), "stale length");
        let mut q = valid();
        q.rare_mut().removed.insert(1);
        q.len -= 1;
        assert!(q.check().is_err(), "tombstone at the front");
        let mut q = valid();
        q.fifo.push_back((3, 9));
        q.len += 1;
        assert!(q.check().is_err(), "a key twice in the deque");
    }
}
