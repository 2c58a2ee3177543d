//! A priority level of the ready queue, plain or fair: it turns into a `Fair` ring of groups
//! (`super::fair`) when a named group's key arrives, and back into a plain FIFO when only
//! `NO_GROUP` is left. A level that only ever sees `NO_GROUP` stays plain and costs what it
//! cost before groups existed.

use super::fair::Fair;
use super::groups::{Groups, NO_GROUP};
use super::sorted::Sorted;

/// One priority level of the ready queue: a plain FIFO while all its keys are in `NO_GROUP`,
/// else a ring of groups.
#[derive(Debug)]
pub enum Level {
    Plain(Sorted<u64>),
    Fair(Box<Fair>),
}

impl Level {
    /// A level holding one entry.
    pub fn new(seq: u64, idx: u32, gid: u32, groups: &Groups) -> Self {
        let mut level = Level::Plain(Sorted::default());
        level.insert(seq, idx, gid, groups);
        level
    }

    pub fn insert(&mut self, seq: u64, idx: u32, gid: u32, groups: &Groups) {
        match self {
            Level::Plain(q) if gid == NO_GROUP => {
                q.insert(seq, idx);
            }
            Level::Plain(q) => {
                let mut fair = Fair::from_plain(std::mem::take(q), groups);
                fair.insert(seq, idx, gid, groups);
                *self = Level::Fair(fair);
            }
            Level::Fair(f) => f.insert(seq, idx, gid, groups),
        }
    }

    /// Remove one entry; a fair level left with only `NO_GROUP` becomes plain again.
    pub fn remove(&mut self, seq: u64, idx: u32, gid: u32, groups: &Groups) {
        match self {
            Level::Plain(q) => q.remove(seq, idx),
            Level::Fair(f) => {
                f.remove(seq, idx, gid, groups);
                self.settle();
            }
        }
    }

    /// Remove and return the entry `next` names, moving the ring on.
    #[inline]
    pub fn pop(&mut self, groups: &Groups) -> Option<(u64, u32, u32)> {
        let got = match self {
            Level::Plain(q) => {
                let (seq, idx) = q.first()?;
                q.remove(seq, idx);
                Some((seq, idx, NO_GROUP))
            }
            Level::Fair(f) => f.pop(groups),
        };
        self.settle();
        got
    }

    #[inline]
    fn settle(&mut self) {
        if let Level::Fair(f) = self {
            if f.only_implicit() {
                *self = Level::Plain(f.take_implicit());
            }
        }
    }

    /// The entry served next: (sequence, slot, group).
    #[cfg(test)]
    pub fn next(&self) -> Option<(u64, u32, u32)> {
        match self {
            Level::Plain(q) => q.first().map(|(s, i)| (s, i, NO_GROUP)),
            Level::Fair(f) => f.next(),
        }
    }

    /// The slots of the next entry and, roughly, the one after (`Fair::upcoming`).
    #[inline]
    pub fn upcoming(&self) -> (Option<u32>, Option<u32>) {
        match self {
            Level::Plain(q) => (q.first().map(|(_, i)| i), q.second_slot()),
            Level::Fair(f) => f.upcoming(),
        }
    }

    /// The sequence number of the oldest entry (cheaper than `oldest` for a fair level).
    #[inline]
    pub fn oldest_seq(&self) -> Option<u64> {
        match self {
            Level::Plain(q) => q.first().map(|(s, _)| s),
            Level::Fair(f) => f.oldest_seq(),
        }
    }

    /// The oldest entry: (sequence, slot).
    #[inline]
    pub fn oldest(&self) -> Option<(u64, u32)> {
        match self {
            Level::Plain(q) => q.first(),
            Level::Fair(f) => f.oldest(),
        }
    }

    /// No ready entries at all (held groups' included).
    #[inline]
    pub fn is_empty(&self) -> bool {
        match self {
            Level::Plain(q) => q.len == 0,
            Level::Fair(f) => f.is_empty(),
        }
    }

    /// Group `gid` is held: its ready keys here, if any, leave the ring. True if it had any.
    pub fn park(&mut self, gid: u32, groups: &Groups) -> bool {
        match self {
            Level::Plain(_) => false,
            Level::Fair(f) => f.park(gid, groups),
        }
    }

    /// Group `gid` is released: it rejoins the ring at the back if it has ready keys here.
    pub fn unpark(&mut self, gid: u32, groups: &Groups) -> bool {
        match self {
            Level::Plain(_) => false,
            Level::Fair(f) => f.unpark(gid, groups),
        }
    }

    /// Ready entries that can be served: those of groups that are not held.
    pub fn servable_len(&self) -> usize {
        match self {
            Level::Plain(q) => q.len,
            Level::Fair(f) => f.servable_len(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Level::Plain(q) => q.len,
            Level::Fair(f) => f.len(),
        }
    }

    /// Live entries as (sequence, slot, group), in sequence order (for checks).
    pub fn entries(&self) -> Vec<(u64, u32, u32)> {
        let mut out: Vec<(u64, u32, u32)> = match self {
            Level::Plain(q) => q
                .entries()
                .into_iter()
                .map(|(s, i)| (s, i, NO_GROUP))
                .collect(),
            Level::Fair(f) => f.entries().collect(),
        };
        out.sort_unstable();
        out
    }

    /// The pops before entry `seq` of group `gid` is served, and its rank in its group
    /// (`Fair::ahead`; the same number twice on a plain level).
    pub fn ahead(&self, seq: u64, gid: u32, groups: &Groups) -> (usize, usize) {
        match self {
            Level::Plain(q) => {
                let rank = q.rank(seq);
                (rank, rank)
            }
            Level::Fair(f) => f.ahead(seq, gid, groups),
        }
    }

    /// Ready entries per group here.
    pub fn counts(&self) -> Vec<(u32, usize)> {
        match self {
            Level::Plain(q) => vec![(NO_GROUP, q.len)],
            Level::Fair(f) => f.counts(),
        }
    }

    /// The groups in ring order from the front, and the front's remaining turn.
    pub fn ring(&self) -> (Vec<u32>, u32) {
        match self {
            Level::Plain(q) if q.len > 0 => (vec![NO_GROUP], 1),
            Level::Plain(_) => (Vec::new(), 0),
            Level::Fair(f) => (f.ring(), f.turn()),
        }
    }

    pub fn check(&self, groups: &Groups) -> Result<(), String> {
        match self {
            Level::Plain(q) => q.check(),
            Level::Fair(f) => {
                if f.only_implicit() {
                    return Err("a fair level holds no named group".into());
                }
                f.check(groups)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_level_names_its_next_entries_and_its_ring() {
        let g = Groups::default();
        let mut level = Level::new(1, 10, NO_GROUP, &g);
        assert_eq!(level.upcoming(), (Some(10), None));
        assert_eq!(level.ring(), (vec![NO_GROUP], 1));
        level.insert(2, 20, NO_GROUP, &g);
        level.insert(3, 30, NO_GROUP, &g);
        assert_eq!(level.upcoming(), (Some(10), Some(20)));
        level.remove(1, 10, NO_GROUP, &g);
        level.remove(2, 20, NO_GROUP, &g);
        level.remove(3, 30, NO_GROUP, &g);
        // Emptied: no next entry, and no group in line.
        assert_eq!(level.upcoming(), (None, None));
        assert_eq!(level.ring(), (Vec::new(), 0));
    }

    #[test]
    fn a_fair_level_names_its_next_entries_by_turn() {
        let mut g = Groups::default();
        let a = g.join(Some("a"));
        let b = g.join(Some("b"));
        let mut level = Level::new(1, 10, a, &g);
        level.insert(2, 20, b, &g);
        level.insert(3, 30, a, &g);
        assert_eq!(level.upcoming(), (Some(10), Some(20)));
    }

    #[test]
    fn the_implicit_group_takes_its_turn_and_the_level_turns_plain_again() {
        let mut g = Groups::default();
        let a = g.join(Some("a"));
        let mut level = Level::new(1, 1, NO_GROUP, &g);
        level.insert(2, 2, NO_GROUP, &g);
        assert!(matches!(level, Level::Plain(_)));
        level.insert(3, 3, a, &g);
        assert!(matches!(level, Level::Fair(_)));
        assert_eq!(level.oldest(), Some((1, 1)));
        assert_eq!(level.ring(), (vec![NO_GROUP, a], 1));
        assert_eq!(level.pop(&g), Some((1, 1, NO_GROUP)));
        assert_eq!(level.pop(&g), Some((3, 3, a)));
        assert!(
            matches!(level, Level::Plain(_)),
            "only the implicit group is left"
        );
        assert_eq!(level.pop(&g), Some((2, 2, NO_GROUP)));
        assert_eq!(level.pop(&g), None);
    }
}
