//! One priority level of the ready queue with named groups, serving its groups in turn.
//!
//! Among ready keys of one priority the scheduler serves groups by weighted round robin
//! (deficit round robin where every key costs one): the group at the front of the level's
//! ring is served up to its weight in a row, FIFO inside the group, then the ring moves on. A
//! group is in a level's ring exactly while it has ready keys there, and joins at the back.
//!
//! A group that is held (`Groups::is_held`: its cap of keys in flight reached) is *parked* at
//! every level where it has ready keys: a member of the level (its queue kept, in order) but
//! out of the ring and out of the `heads` tournament, so `pop` and the level's oldest key (for
//! `max_wait`) see the level as if the group had no ready keys there. A key of a held group
//! that becomes ready joins its parked queue. When the group is released it joins each such
//! ring at the back, as a group that just got its first ready key there.

mod members;

use super::groups::{Groups, NO_GROUP};
use super::sorted::Sorted;
use super::tournament::Tournament;
use members::{Member, Members};

/// A priority level with named groups: a FIFO per group and a ring of the groups that have
/// ready keys here and are not held (held ones are parked members: `Member::parked`).
#[derive(Debug, Default)]
pub struct Fair {
    members: Members,
    /// The sequence number of each ringed group's first (oldest) entry here, by group
    /// number: the winner is the group holding the level's oldest key that can be served.
    heads: Tournament,
    /// The group served next (`None`: no group has ready keys).
    front: Option<u32>,
    /// Keys the front group may still take in its current turn (at least 1).
    turn: u32,
}

impl Fair {
    /// A level turning fair: the entries of its plain FIFO, if any, become the queue of
    /// `NO_GROUP`, the first group in the ring.
    pub fn from_plain(queue: Sorted<u64>, groups: &Groups) -> Box<Self> {
        let mut fair = Box::<Fair>::default();
        if let Some((head, i)) = queue.first() {
            fair.join(NO_GROUP, queue, groups);
            fair.heads.set(NO_GROUP, head, i);
        }
        fair
    }

    /// No group but `NO_GROUP` has ready keys here: the level can be plain again.
    #[inline]
    pub fn only_implicit(&self) -> bool {
        self.members.len() <= 1 && self.members.keys().all(|g| g == NO_GROUP)
    }

    /// Take out the ready keys of `NO_GROUP` (an empty queue if it has none), for the plain
    /// level this one becomes (`only_implicit`).
    pub fn take_implicit(&mut self) -> Sorted<u64> {
        self.members
            .remove(&NO_GROUP)
            .map_or_else(Sorted::default, |m| m.queue)
    }

    /// No ready entries at all (held groups' included).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.members.len() == 0
    }

    /// Ready entries, held groups' included.
    pub fn len(&self) -> usize {
        self.members.values().map(|m| m.queue.len).sum()
    }

    /// Live entries as (sequence, slot, group), group by group (for checks).
    pub fn entries(&self) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
        self.members
            .iter()
            .flat_map(|(g, m)| m.queue.entries().into_iter().map(move |(s, i)| (s, i, g)))
    }

    /// Ready entries per group here.
    pub fn counts(&self) -> Vec<(u32, usize)> {
        self.members.iter().map(|(g, m)| (g, m.queue.len)).collect()
    }

    /// What is left of the front group's turn.
    pub fn turn(&self) -> u32 {
        self.turn
    }

    pub fn insert(&mut self, seq: u64, idx: u32, gid: u32, groups: &Groups) {
        match self.members.get_mut(&gid) {
            Some(m) => {
                // A newly ready key is appended behind the group's first; a raised key, with
                // its older sequence number, may be the new first (also when it goes to the
                // back of an emptied deque, ahead of late keys). A parked group's first is
                // not in the tournament.
                if m.queue.insert(seq, idx) && !m.parked {
                    self.heads.set(gid, seq, idx);
                }
            }
            None => {
                let mut queue = Sorted::default();
                queue.insert(seq, idx);
                if groups.is_held(gid) {
                    let parked = Member {
                        queue,
                        prev: gid,
                        next: gid,
                        parked: true,
                    };
                    self.members.insert(gid, parked);
                } else {
                    self.join(gid, queue, groups);
                    self.heads.set(gid, seq, idx);
                }
            }
        }
    }

    /// Link `gid` in at the back of the ring (just before the front).
    #[inline]
    fn join(&mut self, gid: u32, queue: Sorted<u64>, groups: &Groups) {
        let (prev, next) = self.back_links(gid, groups);
        let member = Member {
            queue,
            prev,
            next,
            parked: false,
        };
        self.members.insert(gid, member);
    }

    /// Make room for `gid` at the back of the ring (a group taking the first place gets the
    /// front and a fresh turn): its neighbours point at it; returns its (prev, next).
    #[inline]
    fn back_links(&mut self, gid: u32, groups: &Groups) -> (u32, u32) {
        match self.front {
            None => {
                self.front = Some(gid);
                self.turn = groups.weight(gid);
                (gid, gid)
            }
            Some(front) => {
                let back = self.members[&front].prev;
                self.link(back, |m| m.next = gid);
                self.link(front, |m| m.prev = gid);
                (back, front)
            }
        }
    }

    /// Take `gid`, a ringed member, out of the ring and the tournament; a front that goes
    /// hands the turn to the next.
    fn unlink(&mut self, gid: u32, prev: u32, next: u32, groups: &Groups) {
        self.heads.clear(gid);
        if next == gid {
            self.front = None;
            return;
        }
        self.link(prev, |p| p.next = next);
        self.link(next, |n| n.prev = prev);
        if self.front == Some(gid) {
            self.front = Some(next);
            self.turn = groups.weight(next);
        }
    }

    /// Group `gid` is held: if it has ready keys here, they leave the ring and the
    /// tournament (the group keeps its queue). True if it had.
    pub fn park(&mut self, gid: u32, groups: &Groups) -> bool {
        let Some(m) = self.members.get_mut(&gid).filter(|m| !m.parked) else {
            return false;
        };
        m.parked = true;
        let (prev, next) = (m.prev, m.next);
        self.unlink(gid, prev, next, groups);
        true
    }

    /// Group `gid` is released: if it has ready keys here, it joins the ring at the back
    /// and its first key the tournament. True if it had.
    pub fn unpark(&mut self, gid: u32, groups: &Groups) -> bool {
        let Some(first) = self
            .members
            .get(&gid)
            .filter(|m| m.parked)
            .map(|m| m.queue.first())
        else {
            return false;
        };
        let (prev, next) = self.back_links(gid, groups);
        self.link(gid, |m| {
            (m.prev, m.next, m.parked) = (prev, next, false);
        });
        if let Some((seq, idx)) = first {
            self.heads.set(gid, seq, idx);
        }
        true
    }

    /// Ready entries of the groups in the ring (the ones that can be served).
    pub fn servable_len(&self) -> usize {
        self.members
            .values()
            .filter(|m| !m.parked)
            .map(|m| m.queue.len)
            .sum()
    }

    fn link(&mut self, gid: u32, f: impl FnOnce(&mut Member)) {
        if let Some(m) = self.members.get_mut(&gid) {
            f(m);
        }
    }

    /// Drop `gid` (its queue is empty): unlink it, unless parked; a front that leaves hands
    /// the turn to the next.
    #[inline]
    fn leave(&mut self, gid: u32, groups: &Groups) {
        let Some(m) = self.members.remove(&gid) else {
            return;
        };
        if !m.parked {
            self.unlink(gid, m.prev, m.next, groups);
        }
    }

    pub fn remove(&mut self, seq: u64, idx: u32, gid: u32, groups: &Groups) {
        let Some(m) = self.members.get_mut(&gid) else {
            debug_assert!(false, "ready group missing");
            return;
        };
        let head = m.queue.first();
        m.queue.remove(seq, idx);
        if head == Some((seq, idx)) {
            match m.queue.first() {
                Some((next, i)) if !m.parked => self.heads.set(gid, next, i),
                Some(_) => {}
                None => self.leave(gid, groups),
            }
        }
    }

    #[cfg(test)]
    pub fn next(&self) -> Option<(u64, u32, u32)> {
        let gid = self.front?;
        let (seq, idx) = self.members.get(&gid)?.queue.first()?;
        Some((seq, idx, gid))
    }

    /// The slots of the next entry and, roughly, of the one after (a hint for prefetching:
    /// the second ignores tombstones and late entries).
    #[inline]
    pub fn upcoming(&self) -> (Option<u32>, Option<u32>) {
        let Some(m) = self.front.and_then(|gid| self.members.get(&gid)) else {
            return (None, None);
        };
        let after = if self.turn > 1 || Some(m.next) == self.front {
            m.queue.second_slot()
        } else {
            self.members
                .get(&m.next)
                .and_then(|n| n.queue.first())
                .map(|(_, i)| i)
        };
        (m.queue.first().map(|(_, i)| i), after)
    }

    #[inline]
    pub fn pop(&mut self, groups: &Groups) -> Option<(u64, u32, u32)> {
        let gid = self.front?;
        let m = self.members.get_mut(&gid)?;
        // The front group's first key, which is its head.
        let (seq, idx) = m.queue.first()?;
        m.queue.remove(seq, idx);
        let (after, next) = (m.queue.first(), m.next);
        match after {
            Some((head, i)) => {
                self.heads.set(gid, head, i);
                // Its turn goes on, or the ring moves on (it is now the back).
                self.turn -= 1;
                if self.turn == 0 {
                    self.front = Some(next);
                    self.turn = groups.weight(next);
                }
            }
            None => self.leave(gid, groups),
        }
        Some((seq, idx, gid))
    }

    #[inline]
    pub fn oldest(&self) -> Option<(u64, u32)> {
        self.heads.min().map(|(seq, _, idx)| (seq, idx))
    }

    #[inline]
    pub fn oldest_seq(&self) -> Option<u64> {
        self.heads.min().map(|(seq, _, _)| seq)
    }

    /// The groups here in ring order from the front.
    pub fn ring(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let Some(front) = self.front else {
            return out;
        };
        let mut gid = front;
        loop {
            out.push(gid);
            gid = self.members[&gid].next;
            if gid == front || out.len() > self.members.len() {
                return out;
            }
        }
    }

    /// The pops before the entry `seq` of group `gid` is served, if nothing is added or
    /// removed meanwhile, and its rank inside its group: (at this level, in its group).
    ///
    /// Round robin makes this exact in O(groups here) after the rank: the key is served in
    /// its group's turn `t` (counting the front's current turn as turn 0), so each group
    /// before it in the ring gets `t + 1` turns first and each group after it `t`, each turn
    /// as many keys as its weight (the front's current one: what is left of it), and no
    /// group gives more than the keys it has.
    pub fn ahead(&self, seq: u64, gid: u32, groups: &Groups) -> (usize, usize) {
        let Some(m) = self.members.get(&gid) else {
            return (0, 0);
        };
        let rank = m.queue.rank(seq) as u64;
        if m.parked {
            // Not in line at all until released: only its rank in its group means anything.
            return (rank as usize, rank as usize);
        }
        let ring = self.ring();
        // The keys a group at ring position `i` takes in its first `turns` turns.
        let take = |i: usize, g: u32, turns: u64| -> u64 {
            if turns == 0 {
                return 0;
            }
            let weight = u64::from(groups.weight(g));
            let first = if i == 0 { u64::from(self.turn) } else { weight };
            first.saturating_add((turns - 1).saturating_mul(weight))
        };
        let Some(k) = ring.iter().position(|&g| g == gid) else {
            debug_assert!(false, "ready group not in the ring");
            return (0, 0);
        };
        let first = take(k, gid, 1);
        let turn = if rank < first {
            0
        } else {
            1 + (rank - first) / u64::from(groups.weight(gid))
        };
        let others: u64 = ring
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != k)
            .map(|(i, &g)| {
                let turns = if i < k { turn + 1 } else { turn };
                take(i, g, turns).min(self.members[&g].queue.len as u64)
            })
            .sum();
        ((rank + others) as usize, rank as usize)
    }

    pub fn check(&self, groups: &Groups) -> Result<(), String> {
        let ring = self.ring();
        let mut seen: Vec<u32> = ring.clone();
        seen.sort_unstable();
        seen.dedup();
        let ringed = self.members.values().filter(|m| !m.parked).count();
        if seen.len() != ring.len()
            || ring.len() != ringed
            || ring.iter().any(|g| self.members[g].parked)
        {
            return Err("group ring does not list each group that is not held once".into());
        }
        if !ring.is_empty() && self.turn == 0 {
            return Err("front group has no turn left".into());
        }
        let mut oldest: Option<u64> = None;
        for (gid, m) in &self.members {
            m.queue.check().map_err(|e| format!("group {gid}: {e}"))?;
            let Some((head, _)) = m.queue.first() else {
                return Err(format!("group {gid} is empty but in the level"));
            };
            if m.parked != groups.is_held(gid) {
                return Err(format!("group {gid} is parked iff held: not so"));
            }
            if m.parked {
                if self.heads.get(gid).is_some() {
                    return Err(format!("held group {gid} has a head in the tournament"));
                }
                continue;
            }
            if self.heads.get(gid) != m.queue.first() {
                return Err(format!("group {gid} head is stale"));
            }
            oldest = Some(oldest.map_or(head, |o| o.min(head)));
            if self.members[&m.next].prev != gid {
                return Err(format!("group {gid} ring links are broken"));
            }
        }
        // Every group here has its head in the tournament and no other group has one (so
        // the winner is the oldest of them).
        self.heads.check()?;
        if self
            .heads
            .entries()
            .any(|(gid, _)| self.members.get(&gid).is_none_or(|m| m.parked))
            || self.heads.min().map(|(seq, _, _)| seq) != oldest
        {
            return Err("group heads are stale".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
