//! The two ordered queues of queued keys: waiting keys by ready time, ready keys by priority
//! and age. In-flight keys are in neither, so no operation ever steps over a busy key.
//!
//! Both are built on `Sorted` (`super::sorted`), an ordered queue tuned for keys that mostly
//! arrive in increasing order: ready keys are appended in the order they become ready, and
//! waiting keys mostly have ready times later than all before them (a controller's requeue
//! delay is usually one constant).

mod waiting;

use super::groups::Groups;
use super::level::Level;
use std::cmp::Reverse;
use std::collections::{btree_map, BTreeMap, BTreeSet};
pub use waiting::Waiting;

/// Ready keys in serving order: highest priority first; within a priority, groups in turn
/// (`super::level`), and by sequence number inside a group, which the scheduler hands out in
/// the order keys become ready, so it is FIFO by ready time. Without named groups a level is
/// one FIFO.
///
/// Each group's keys at a level are a `Sorted` queue by sequence number: a newly ready key
/// always has the highest sequence number yet, so it is appended, and the next key is taken
/// from the front, both O(1). The exception, a ready key raised from a lower priority (it
/// keeps its older sequence number, and so its age), lands in the queue's ordered `late` set.
///
/// For the `max_wait` rule `heads` orders the oldest entry of each level by age: the oldest
/// ready key overall is the first head. That costs one entry per distinct priority, not per
/// key.
///
/// With a cap on keys in flight per group, the keys of a held group (`Groups::is_held`) are
/// ready but cannot be served: their levels keep them parked, out of the rings and of each
/// level's oldest key, so `levels` and `heads` hold only what can be served, and a level
/// whose ready keys are all of held groups moves to `held` until one of them is released.
/// `pop_first` therefore still takes the first level of `levels`, and the oldest head is the
/// oldest key that can be served: a held group never holds up another group's key or a
/// lower priority level.
#[derive(Debug, Default)]
pub struct Ready {
    /// Levels with a key that can be served.
    levels: BTreeMap<Reverse<i64>, Level>,
    /// Levels whose ready keys are all of held groups (none but with a group cap).
    held: BTreeMap<Reverse<i64>, Level>,
    heads: BTreeSet<(u64, i64)>,
    len: usize,
    /// Priorities to move between `levels` and `held` (kept to reuse its allocation).
    moves: Vec<i64>,
}

/// Level `p`'s head in `heads` moves from `old` to `new` (sequence numbers; `None`: no
/// head): the one place a parked or released group changes what `max_wait` sees.
fn refile(heads: &mut BTreeSet<(u64, i64)>, p: i64, old: Option<u64>, new: Option<u64>) {
    if new == old {
        return;
    }
    if let Some(h) = old {
        heads.remove(&(h, p));
    }
    if let Some(h) = new {
        heads.insert((h, p));
    }
}

/// A ready entry: (priority, sequence, slot).
pub type Entry = (i64, u64, u32);

/// A ready entry taken out to be served: (priority, sequence, slot, group).
pub type Taken = (i64, u64, u32, u32);

/// A ready key's place in line (`Ready::ahead`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ahead {
    /// Keys of its priority served before it.
    pub at_priority: usize,
    /// Keys of higher priorities (all served first).
    pub higher: usize,
    /// Keys of its own group and priority served before it.
    pub in_group: usize,
}

impl Ready {
    #[inline]
    pub fn insert(&mut self, priority: i64, seq: u64, idx: u32, gid: u32, groups: &Groups) {
        self.len += 1;
        let level = match self.levels.entry(Reverse(priority)) {
            btree_map::Entry::Vacant(v) => {
                let level = match self.held.is_empty() {
                    true => None,
                    false => self.held.remove(&Reverse(priority)),
                };
                let level = match level {
                    None => Level::new(seq, idx, gid, groups),
                    Some(mut level) => {
                        level.insert(seq, idx, gid, groups);
                        level
                    }
                };
                match level.oldest_seq() {
                    Some(head) => {
                        v.insert(level);
                        self.heads.insert((head, priority));
                    }
                    None => {
                        // A key of a held group, and no other key here can be served.
                        self.held.insert(Reverse(priority), level);
                    }
                }
                return;
            }
            btree_map::Entry::Occupied(o) => o.into_mut(),
        };
        let old_head = level.oldest_seq();
        level.insert(seq, idx, gid, groups);
        if let Some(head_seq) = old_head.filter(|&h| seq < h) {
            // An older key (raised from a lower priority) is the new head, unless its group
            // is held.
            if let Some(new_head) = level.oldest_seq().filter(|&h| h != head_seq) {
                self.heads.remove(&(head_seq, priority));
                self.heads.insert((new_head, priority));
            }
        }
    }

    #[inline]
    pub fn remove(&mut self, priority: i64, seq: u64, idx: u32, gid: u32, groups: &Groups) {
        let Some(level) = self.levels.get_mut(&Reverse(priority)) else {
            self.remove_held(priority, seq, idx, gid, groups);
            return;
        };
        let old_head = level.oldest_seq();
        level.remove(seq, idx, gid, groups);
        self.len -= 1;
        if old_head == Some(seq) {
            self.new_head(priority, seq);
        }
    }

    /// `remove` from a level in `held` (a key of a held group); the level goes with its last
    /// key.
    #[cold]
    fn remove_held(&mut self, priority: i64, seq: u64, idx: u32, gid: u32, groups: &Groups) {
        let Some(level) = self.held.get_mut(&Reverse(priority)) else {
            debug_assert!(false, "ready level missing");
            return;
        };
        level.remove(seq, idx, gid, groups);
        self.len -= 1;
        if level.is_empty() {
            self.held.remove(&Reverse(priority));
        }
    }

    /// The oldest entry of level `priority`, `seq`, left it: file its next oldest, or drop
    /// the level if it is empty, or move it to `held` if its keys left are all held.
    #[inline]
    fn new_head(&mut self, priority: i64, seq: u64) {
        self.heads.remove(&(seq, priority));
        match self.levels[&Reverse(priority)].oldest() {
            Some((next, _)) => {
                self.heads.insert((next, priority));
            }
            None => {
                if let Some(level) = self.levels.remove(&Reverse(priority)) {
                    if !level.is_empty() {
                        self.held.insert(Reverse(priority), level);
                    }
                }
            }
        }
    }

    /// Group `gid` just became held: at every level where it has ready keys they leave the
    /// ring (O(priority levels): every servable level is looked at, not the keys).
    pub fn hold(&mut self, gid: u32, groups: &Groups) {
        let mut moves = std::mem::take(&mut self.moves);
        for (&Reverse(p), level) in &mut self.levels {
            let old_head = level.oldest_seq();
            if !level.park(gid, groups) {
                continue;
            }
            let new_head = level.oldest_seq();
            refile(&mut self.heads, p, old_head, new_head);
            if new_head.is_none() {
                moves.push(p); // a level in `levels` had a head: it changed to none
            }
        }
        for p in moves.drain(..) {
            if let Some(level) = self.levels.remove(&Reverse(p)) {
                self.held.insert(Reverse(p), level);
            }
        }
        self.moves = moves;
    }

    /// Group `gid` was just released: at every level where it has ready keys it joins the
    /// ring at the back (O(priority levels), both maps looked at).
    pub fn release(&mut self, gid: u32, groups: &Groups) {
        for (&Reverse(p), level) in &mut self.levels {
            let old_head = level.oldest_seq();
            if level.unpark(gid, groups) {
                refile(&mut self.heads, p, old_head, level.oldest_seq());
            }
        }
        if self.held.is_empty() {
            return;
        }
        let mut moves = std::mem::take(&mut self.moves);
        for (&Reverse(p), level) in &mut self.held {
            if level.unpark(gid, groups) {
                moves.push(p);
            }
        }
        for p in moves.drain(..) {
            if let Some(level) = self.held.remove(&Reverse(p)) {
                if let Some(h) = level.oldest_seq() {
                    self.heads.insert((h, p));
                }
                self.levels.insert(Reverse(p), level);
            }
        }
        self.moves = moves;
    }

    /// Remove and return the next key of level `priority` (its group's turn moves on).
    #[inline]
    pub fn pop_at(&mut self, priority: i64, groups: &Groups) -> Option<Taken> {
        let level = self.levels.get_mut(&Reverse(priority))?;
        let old_head = level.oldest_seq();
        let (seq, idx, gid) = level.pop(groups)?;
        self.len -= 1;
        // The last key that can be served here is the level's head, so a level left with
        // none (empty, or only held groups' keys) always goes through `new_head`.
        if old_head == Some(seq) {
            self.new_head(priority, seq);
        }
        Some((priority, seq, idx, gid))
    }

    /// Remove and return the next key in priority order.
    #[inline]
    pub fn pop_first(&mut self, groups: &Groups) -> Option<Taken> {
        let &Reverse(priority) = self.levels.keys().next()?;
        self.pop_at(priority, groups)
    }

    /// The next key in priority order.
    #[cfg(test)]
    #[inline]
    pub fn first(&self) -> Option<Entry> {
        let (&Reverse(priority), level) = self.levels.iter().next()?;
        level.next().map(|(s, i, _)| (priority, s, i))
    }

    /// The slots of the next key in priority order and, roughly, of the one after (a
    /// prefetch hint; the one after is looked for at the first priority only).
    #[inline]
    pub fn upcoming(&self) -> (Option<u32>, Option<u32>) {
        self.levels
            .values()
            .next()
            .map_or((None, None), Level::upcoming)
    }

    /// The key that has been ready the longest, of any priority.
    #[inline]
    pub fn oldest(&self) -> Option<Entry> {
        let &(seq, priority) = self.heads.first()?;
        let (_, idx) = self.levels.get(&Reverse(priority))?.oldest()?;
        Some((priority, seq, idx))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// How many priorities have ready keys.
    #[inline]
    pub fn priorities(&self) -> usize {
        self.levels.len()
    }

    /// The ready keys served before the one at (`priority`, `seq`) of group `gid`, the
    /// `max_wait` rule aside: how many at its priority (exact, turns of the groups
    /// included), how many at higher priorities, and how many of its own group at its
    /// priority. Keys of held groups are not served, and not counted, until released (for
    /// a key of a held group only `in_group` means anything).
    pub fn ahead(&self, priority: i64, seq: u64, gid: u32, groups: &Groups) -> Ahead {
        let (at_priority, in_group) = self
            .levels
            .get(&Reverse(priority))
            .or_else(|| self.held.get(&Reverse(priority)))
            .map_or((0, 0), |level| level.ahead(seq, gid, groups));
        let higher = self
            .levels
            .range(..Reverse(priority))
            .map(|(_, level)| level.servable_len())
            .sum();
        Ahead {
            at_priority,
            higher,
            in_group,
        }
    }

    /// Every level, held ones included, from the highest priority (O(levels log levels)).
    fn all_levels(&self) -> Vec<(i64, &Level)> {
        let mut all: Vec<(i64, &Level)> = self
            .levels
            .iter()
            .chain(&self.held)
            .map(|(&Reverse(p), level)| (p, level))
            .collect();
        all.sort_unstable_by_key(|&(p, _)| Reverse(p));
        all
    }

    /// Ready keys at each priority (held groups' included), from the highest.
    pub fn levels(&self) -> impl Iterator<Item = (i64, usize)> + '_ {
        self.all_levels()
            .into_iter()
            .map(|(p, level)| (p, level.len()))
    }

    /// Ready keys of each group (`NO_GROUP` included), summed over the levels, in no order.
    pub fn by_group(&self) -> impl Iterator<Item = (u32, usize)> + '_ {
        self.levels
            .values()
            .chain(self.held.values())
            .flat_map(Level::counts)
    }

    /// Live entries as (priority, sequence, slot, group), level by level from the highest
    /// priority, each level in age order (held groups' included).
    pub fn iter(&self) -> impl Iterator<Item = (i64, u64, u32, u32)> + '_ {
        self.all_levels().into_iter().flat_map(|(p, level)| {
            level
                .entries()
                .into_iter()
                .map(move |(s, i, g)| (p, s, i, g))
        })
    }

    /// Each level's groups in ring order from the front, with the front's remaining turn
    /// (held levels included, with empty rings).
    pub fn rings(&self) -> impl Iterator<Item = (i64, Vec<u32>, u32)> + '_ {
        self.all_levels().into_iter().map(|(p, level)| {
            let (ring, turn) = level.ring();
            (p, ring, turn)
        })
    }

    /// Check the levels and `heads` against the entries: a level in `levels` has a key that
    /// can be served and its head is its oldest such key; one in `held` has keys, none of
    /// which can be served.
    pub fn check_heads(&self, groups: &Groups) -> Result<(), String> {
        let mut heads = BTreeSet::new();
        let mut total = 0;
        for (&Reverse(p), level) in &self.held {
            level
                .check(groups)
                .map_err(|e| format!("held ready level {p}: {e}"))?;
            if level.is_empty() || level.oldest().is_some() || level.servable_len() != 0 {
                return Err(format!("held ready level {p} is empty or can be served"));
            }
            if self.levels.contains_key(&Reverse(p)) {
                return Err(format!("ready level {p} is both held and not"));
            }
            total += level.len();
        }
        for (&Reverse(p), level) in &self.levels {
            level
                .check(groups)
                .map_err(|e| format!("ready level {p}: {e}"))?;
            match level.oldest() {
                Some((head, _)) => heads.insert((head, p)),
                None => return Err(format!("ready level {p} has no key to serve")),
            };
            total += level.len();
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
mod tests;
