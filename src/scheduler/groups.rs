//! Fair groups: which group each key belongs to, and how one priority level of the ready
//! queue serves its groups in turn.
//!
//! A key may belong to a named group (a tenant, a namespace); keys without one form the
//! implicit group `NO_GROUP`. Among ready keys of one priority the scheduler serves groups by
//! weighted round robin (deficit round robin where every key costs one): the group at the
//! front of the level's ring is served up to its weight in a row, FIFO inside the group, then
//! the ring moves on. A group is in a level's ring exactly while it has ready keys there, and
//! joins at the back. A level that only ever sees `NO_GROUP` stays a plain FIFO (`Level::Plain`)
//! and costs what it cost before groups existed.
//!
//! `Groups` interns group names as small numbers and counts each group's keys (records of
//! any state), so a group with no keys left is forgotten at once: many short-lived groups
//! cost no memory once their keys are gone. Weights set with `set_weight` are kept by name
//! (they are configuration, and outlive the keys).
//!
//! With a cap on keys in flight per group (`Config::group_concurrency`, or one group's own
//! set with `set_cap`), `Groups` also counts each named group's keys in flight, and a group
//! with its cap in flight is *held*:
//! at every level where it has ready keys it is *parked*, a member of the level (its queue
//! kept, in order) but out of the ring and out of the `heads` tournament, so `pop` and the
//! level's oldest key (for `max_wait`) see the level as if the group had no ready keys
//! there. A key of a held group that becomes ready joins its parked queue. When one of its
//! keys ends and it drops below the cap it is released: it joins each such ring at the back,
//! as a group that just got its first ready key there.

use super::names::Names;
use super::sorted::Sorted;
use super::tournament::Tournament;
use hashbrown::HashMap;

/// The group number of keys without a group.
pub const NO_GROUP: u32 = 0;

/// The largest weight `set_weight` accepts.
pub const MAX_WEIGHT: u32 = u32::MAX;

#[derive(Debug, Default, Clone, Copy)]
struct Live {
    /// Records (of any state) in this group.
    keys: u32,
    weight: u32,
    /// Keys in flight, counted once any cap is set (`Groups::counting`; else 0).
    in_flight: u32,
    /// Its cap on keys in flight (0: none): its own if set, else the default.
    cap: u32,
}

/// Group names ↔ numbers, per-group key counts and weights. Each key's group number is kept
/// in its record (`Record::group`), which every operation on the key reads anyway.
#[derive(Debug)]
pub struct Groups {
    /// Group numbers are the names' numbers (`NO_GROUP`, 0, is never a name's).
    names: Names,
    /// By group number; `live[0]` is `NO_GROUP`, and numbers without a name hold zeros.
    live: Vec<Live>,
    weights: HashMap<Box<str>, u32>,
    /// The most keys of one named group in flight, for groups without their own (0: no cap).
    cap: u32,
    /// Groups' own caps by name (0: no cap for that group), kept like weights.
    caps: HashMap<Box<str>, u32>,
    /// Keys in flight are counted: a cap is or was set (with none, nothing is counted).
    counting: bool,
}

impl Default for Groups {
    fn default() -> Self {
        Self::with_cap(0)
    }
}

impl Groups {
    /// Groups whose keys in flight are capped at `cap` per named group (0: no cap).
    pub fn with_cap(cap: u32) -> Self {
        Self {
            names: Names::default(),
            live: vec![Live {
                keys: 0,
                weight: 1,
                in_flight: 0,
                cap: 0,
            }],
            weights: HashMap::new(),
            cap,
            caps: HashMap::new(),
            counting: cap != 0,
        }
    }

    /// The default cap on keys in flight per named group (0: none).
    pub fn cap(&self) -> u32 {
        self.cap
    }

    /// Whether keys in flight are counted (a cap is or was set): the one check `pop` and
    /// `done` pay when there is none.
    #[inline]
    pub fn counting(&self) -> bool {
        self.counting
    }

    /// Whether group `gid` has its cap in flight: its ready keys are not served. Never true
    /// without a cap, nor for `NO_GROUP` (its keys are not counted).
    #[inline]
    pub fn is_held(&self, gid: u32) -> bool {
        self.counting && {
            let live = &self.live[gid as usize];
            live.cap != 0 && live.in_flight >= live.cap
        }
    }

    /// A key of named group `gid` was handed out (only called while counting): true when
    /// that makes the group held.
    #[inline]
    pub fn flight_started(&mut self, gid: u32) -> bool {
        debug_assert!(self.counting && gid != NO_GROUP);
        let live = &mut self.live[gid as usize];
        live.in_flight += 1;
        live.in_flight == live.cap
    }

    /// A key of named group `gid` left flight (only called while counting): true when that
    /// releases the group (it was held, and is now below its cap).
    #[inline]
    pub fn flight_ended(&mut self, gid: u32) -> bool {
        debug_assert!(self.counting && gid != NO_GROUP);
        let live = &mut self.live[gid as usize];
        live.in_flight -= 1;
        live.cap != 0 && live.in_flight + 1 == live.cap
    }

    /// Start counting keys in flight: `in_flight` lists the group of each key in flight
    /// (called once, when the first cap is set on a scheduler created without one).
    pub fn start_counting(&mut self, in_flight: impl Iterator<Item = u32>) {
        if self.counting {
            return;
        }
        self.counting = true;
        for gid in in_flight.filter(|&g| g != NO_GROUP) {
            self.live[gid as usize].in_flight += 1;
        }
    }

    /// Give the group called `name` its own cap (`None`: the default again; 0: none), for
    /// its live keys and any it gets later. Returns its number and whether it was and is
    /// held, if it has keys (the caller parks or releases it). Counting must be on.
    pub fn set_cap(&mut self, name: &str, cap: Option<u32>) -> Option<(u32, bool, bool)> {
        debug_assert!(self.counting);
        match cap {
            Some(cap) => self.caps.insert(name.into(), cap),
            None => self.caps.remove(name),
        };
        let gid = self.names.find(name)?;
        let was = self.is_held(gid);
        self.live[gid as usize].cap = self.cap_of(name);
        Some((gid, was, self.is_held(gid)))
    }

    /// The cap the group called `name` has or will have (0: none).
    pub fn cap_of(&self, name: &str) -> u32 {
        self.caps.get(name).copied().unwrap_or(self.cap)
    }

    /// The cap of group `gid` (0: none; always 0 for `NO_GROUP`).
    pub fn cap_of_group(&self, gid: u32) -> u32 {
        self.live[gid as usize].cap
    }

    /// A new record belongs to `name` (`None`: no group): its group number, for the record.
    #[inline]
    pub fn join(&mut self, name: Option<&str>) -> u32 {
        let Some(name) = name else {
            return NO_GROUP;
        };
        let (gid, new) = self.names.intern(name);
        if new {
            self.start(gid, name);
        }
        self.live[gid as usize].keys += 1;
        gid
    }

    /// A group numbered `gid` just got its name: no keys yet, and the weight set for it.
    #[cold]
    fn start(&mut self, gid: u32, name: &str) {
        let i = gid as usize;
        if self.live.len() <= i {
            self.live.resize(i + 1, Live::default());
        }
        self.live[i] = Live {
            keys: 0,
            weight: self.weights.get(name).copied().unwrap_or(1),
            in_flight: 0,
            cap: self.cap_of(name),
        };
    }

    /// A record of group `gid` is dropped: the group loses a key, and is forgotten with its
    /// last.
    #[inline]
    pub fn leave(&mut self, gid: u32) {
        if gid == NO_GROUP {
            return;
        }
        let live = &mut self.live[gid as usize];
        live.keys -= 1;
        if live.keys == 0 {
            debug_assert_eq!(live.in_flight, 0, "a key in flight keeps its record");
            *live = Live::default();
            self.names.remove(gid);
        }
    }

    /// The name of group `gid` (`None` for `NO_GROUP`).
    pub fn name(&self, gid: u32) -> Option<&str> {
        self.names.get(gid)
    }

    /// The weight of group `gid` (1 for `NO_GROUP`).
    pub fn weight(&self, gid: u32) -> u32 {
        self.live[gid as usize].weight
    }

    /// Set the weight of the group called `name` (the caller checks `weight >= 1`), for its
    /// live keys and any it gets later. A group in the middle of its turn finishes that turn
    /// with the old weight.
    pub fn set_weight(&mut self, name: &str, weight: u32) {
        debug_assert!(weight >= 1);
        if weight == 1 {
            self.weights.remove(name);
        } else {
            self.weights.insert(name.into(), weight);
        }
        if let Some(gid) = self.names.find(name) {
            self.live[gid as usize].weight = weight;
        }
    }

    /// The weight the group called `name` has or will have.
    pub fn weight_of(&self, name: &str) -> u32 {
        self.weights.get(name).copied().unwrap_or(1)
    }

    /// Named groups with at least one key.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// The named groups with keys: (number, name, records of any state, weight).
    pub fn named(&self) -> impl Iterator<Item = (u32, &str, u32, u32)> + '_ {
        self.names.ids().map(|gid| {
            let live = &self.live[gid as usize];
            let name = self.names.get(gid).unwrap_or_default();
            (gid, name, live.keys, live.weight)
        })
    }

    /// Memory held for groups, in entries (for the test that empty groups are dropped).
    #[cfg(test)]
    pub fn footprint(&self) -> usize {
        self.names.footprint() + self.live.len()
    }

    /// Check the key counts against `count(gid)` (records per group, from the slab), the
    /// counts of keys in flight against `flying(gid)` (in-flight records per group; all 0
    /// until a cap is set), the caps and the names against the live groups. (A group may
    /// have more than its cap in flight: a cap lowered below its count.)
    pub fn check(
        &self,
        count: impl Fn(u32) -> u32,
        flying: impl Fn(u32) -> u32,
    ) -> Result<(), String> {
        if self.live[NO_GROUP as usize].in_flight != 0 {
            return Err("keys without a group are counted in flight".into());
        }
        self.names.check()?;
        for (gid, live) in self.live.iter().enumerate().skip(1) {
            let gid = gid as u32;
            let name = self.names.get(gid);
            if name.is_some() != (live.keys > 0) {
                return Err(format!("group {gid} is indexed wrongly"));
            }
            if live.keys != count(gid) {
                return Err(format!("group {name:?} key count is stale"));
            }
            let want = if self.counting { flying(gid) } else { 0 };
            if live.in_flight != want {
                return Err(format!("group {name:?} in-flight count is stale"));
            }
            if let Some(name) = name {
                if live.weight != self.weight_of(name) {
                    return Err(format!("group {name:?} weight is stale"));
                }
                if live.cap != self.cap_of(name) {
                    return Err(format!("group {name:?} cap is stale"));
                }
            }
        }
        Ok(())
    }
}

/// One group's ready keys at one level, and its neighbours in the level's ring.
#[derive(Debug)]
struct Member {
    queue: Sorted<u64>,
    prev: u32,
    next: u32,
    /// Its group is held (`Groups::is_held`): out of the ring and the tournament (`prev`
    /// and `next` mean nothing), its keys kept in order until it is released.
    parked: bool,
}

/// The groups of one fair level by group number: a vector indexed by the number (numbers
/// are small and reused, `Groups` hands them out densely), so the lookups on every add and
/// pop are an index, not a hash. Shaped like the map it replaces. A slot is the member
/// alone, its number being its index: with the number in it too, a slot outgrew a cache line.
#[derive(Debug, Default)]
struct Members {
    slots: Vec<Option<Member>>,
    len: usize,
}

impl Members {
    #[inline]
    fn get(&self, gid: &u32) -> Option<&Member> {
        self.slots.get(*gid as usize)?.as_ref()
    }

    #[inline]
    fn get_mut(&mut self, gid: &u32) -> Option<&mut Member> {
        self.slots.get_mut(*gid as usize)?.as_mut()
    }

    fn insert(&mut self, gid: u32, member: Member) {
        let i = gid as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].replace(member).is_none() {
            self.len += 1;
        }
    }

    fn remove(&mut self, gid: &u32) -> Option<Member> {
        let m = self.slots.get_mut(*gid as usize)?.take()?;
        self.len -= 1;
        Some(m)
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &Member)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(g, m)| Some((g as u32, m.as_ref()?)))
    }

    fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.iter().map(|(g, _)| g)
    }

    fn values(&self) -> impl Iterator<Item = &Member> + '_ {
        self.iter().map(|(_, m)| m)
    }
}

impl std::ops::Index<&u32> for Members {
    type Output = Member;

    fn index(&self, gid: &u32) -> &Member {
        self.get(gid).expect("group in the level")
    }
}

impl<'a> IntoIterator for &'a Members {
    type Item = (u32, &'a Member);
    type IntoIter = Box<dyn Iterator<Item = (u32, &'a Member)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

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
    fn insert(&mut self, seq: u64, idx: u32, gid: u32, groups: &Groups) {
        match self.members.get_mut(&gid) {
            Some(m) => {
                // An entry at the back is not the group's first (the group has one already);
                // one that went elsewhere (a raised key, with its older sequence number) may
                // be. A parked group's first is not in the tournament.
                if !m.queue.insert(seq, idx) && !m.parked && m.queue.first() == Some((seq, idx)) {
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
    fn park(&mut self, gid: u32, groups: &Groups) -> bool {
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
    fn unpark(&mut self, gid: u32, groups: &Groups) -> bool {
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
    fn servable_len(&self) -> usize {
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

    fn remove(&mut self, seq: u64, idx: u32, gid: u32, groups: &Groups) {
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
    fn next(&self) -> Option<(u64, u32, u32)> {
        let gid = self.front?;
        let (seq, idx) = self.members.get(&gid)?.queue.first()?;
        Some((seq, idx, gid))
    }

    /// The slots of the next entry and, roughly, of the one after (a hint for prefetching:
    /// the second ignores tombstones and late entries).
    #[inline]
    fn upcoming(&self) -> (Option<u32>, Option<u32>) {
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
    fn pop(&mut self, groups: &Groups) -> Option<(u64, u32, u32)> {
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
    fn oldest(&self) -> Option<(u64, u32)> {
        self.heads.min().map(|(seq, _, idx)| (seq, idx))
    }

    #[inline]
    fn oldest_seq(&self) -> Option<u64> {
        self.heads.min().map(|(seq, _, _)| seq)
    }

    /// The groups here in ring order from the front.
    fn ring(&self) -> Vec<u32> {
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
    fn ahead(&self, seq: u64, gid: u32, groups: &Groups) -> (usize, usize) {
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

    fn check(&self, groups: &Groups) -> Result<(), String> {
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
                let mut fair = Box::<Fair>::default();
                if let Some((head, i)) = q.first() {
                    fair.join(NO_GROUP, std::mem::take(q), groups);
                    fair.heads.set(NO_GROUP, head, i);
                }
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
            if f.members.len() <= 1 && f.members.keys().all(|g| g == NO_GROUP) {
                let q = f
                    .members
                    .remove(&NO_GROUP)
                    .map_or_else(Sorted::default, |m| m.queue);
                *self = Level::Plain(q);
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
            Level::Fair(f) => f.members.len() == 0,
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
            Level::Fair(f) => f.members.values().map(|m| m.queue.len).sum(),
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
            Level::Fair(f) => f
                .members
                .iter()
                .flat_map(|(g, m)| m.queue.entries().into_iter().map(move |(s, i)| (s, i, g)))
                .collect(),
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
            Level::Fair(f) => f.members.iter().map(|(g, m)| (g, m.queue.len)).collect(),
        }
    }

    /// The groups in ring order from the front, and the front's remaining turn.
    pub fn ring(&self) -> (Vec<u32>, u32) {
        match self {
            Level::Plain(q) if q.len > 0 => (vec![NO_GROUP], 1),
            Level::Plain(_) => (Vec::new(), 0),
            Level::Fair(f) => (f.ring(), f.turn),
        }
    }

    pub fn check(&self, groups: &Groups) -> Result<(), String> {
        match self {
            Level::Plain(q) => q.check(),
            Level::Fair(f) => {
                if f.members.keys().all(|g| g == NO_GROUP) {
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

    fn groups(names: &[(&str, u32)]) -> (Groups, Vec<u32>) {
        let mut g = Groups::default();
        let mut ids = Vec::new();
        for &(name, weight) in names {
            g.set_weight(name, weight);
            ids.push(g.join(Some(name)));
        }
        (g, ids)
    }

    fn drain(level: &mut Level, groups: &Groups) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some((_, _, gid)) = level.pop(groups) {
            level.check(groups).unwrap();
            out.push(gid);
        }
        out
    }

    #[test]
    fn groups_take_turns_fifo_inside_each() {
        let (g, ids) = groups(&[("a", 1), ("b", 1), ("c", 1)]);
        let (a, b, c) = (ids[0], ids[1], ids[2]);
        let mut level = Level::new(1, 1, a, &g);
        // a floods first, then b and c arrive.
        for seq in 2..=5 {
            level.insert(seq, seq as u32, a, &g);
        }
        level.insert(6, 6, b, &g);
        level.insert(7, 7, c, &g);
        level.insert(8, 8, b, &g);
        level.check(&g).unwrap();
        let mut seqs = Vec::new();
        while let Some((seq, _, _)) = level.pop(&g) {
            seqs.push(seq);
        }
        assert_eq!(seqs, [1, 6, 7, 2, 8, 3, 4, 5]);
        assert!(level.is_empty());
    }

    #[test]
    fn a_weight_is_that_many_keys_in_a_row() {
        let (g, ids) = groups(&[("a", 3), ("b", 1)]);
        let (a, b) = (ids[0], ids[1]);
        let mut level = Level::new(1, 1, a, &g);
        for seq in 2..=8 {
            level.insert(seq, seq as u32, if seq % 2 == 0 { b } else { a }, &g);
        }
        // a: 1 3 5 7; b: 2 4 6 8.
        assert_eq!(drain(&mut level, &g), [a, a, a, b, a, b, b, b]);
    }

    #[test]
    fn the_implicit_group_takes_its_turn_and_the_level_turns_plain_again() {
        let (g, ids) = groups(&[("a", 1)]);
        let a = ids[0];
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

    #[test]
    fn removing_the_front_group_hands_the_turn_on() {
        let (g, ids) = groups(&[("a", 2), ("b", 3), ("c", 1)]);
        let (a, b, c) = (ids[0], ids[1], ids[2]);
        let mut level = Level::new(1, 1, a, &g);
        level.insert(2, 2, b, &g);
        level.insert(3, 3, c, &g);
        level.insert(4, 4, b, &g);
        // a's only key leaves (raised to another priority): b is the front, with b's turn.
        level.remove(1, 1, a, &g);
        level.check(&g).unwrap();
        assert_eq!(level.ring(), (vec![b, c], 3));
        assert_eq!(level.oldest(), Some((2, 2)));
        // c leaves from the middle: the turn stays.
        level.remove(3, 3, c, &g);
        assert_eq!(level.ring(), (vec![b], 3));
        assert_eq!(drain(&mut level, &g), [b, b]);
    }

    #[test]
    fn a_group_that_empties_rejoins_at_the_back() {
        let (g, ids) = groups(&[("a", 1), ("b", 1), ("c", 1)]);
        let (a, b, c) = (ids[0], ids[1], ids[2]);
        let mut level = Level::new(1, 1, a, &g);
        level.insert(2, 2, b, &g);
        level.insert(3, 3, c, &g);
        assert_eq!(level.pop(&g), Some((1, 1, a)));
        level.insert(4, 4, a, &g);
        assert_eq!(level.ring(), (vec![b, c, a], 1));
        assert_eq!(drain(&mut level, &g), [b, c, a]);
    }

    #[test]
    fn a_group_is_forgotten_with_its_last_key() {
        let mut g = Groups::default();
        g.set_weight("t", 4);
        for round in 0..10_000u32 {
            let name = format!("tenant-{round}");
            let first = g.join(Some(&name));
            assert_eq!(g.join(Some(&name)), first);
            g.leave(first);
            assert_eq!(g.len(), 1);
            g.leave(first);
            assert_eq!(g.len(), 0);
        }
        assert!(g.footprint() <= 6, "{}", g.footprint());
        let t = g.join(Some("t"));
        assert_eq!(g.weight(t), 4, "a weight outlives the group's keys");
        assert_eq!(g.name(t), Some("t"));
        assert_eq!((g.join(None), g.name(NO_GROUP)), (NO_GROUP, None));
        g.check(|gid| u32::from(gid == t), |_| 0).unwrap();
        assert!(g.check(|_| 2, |_| 0).is_err());
    }

    #[test]
    fn a_new_weight_applies_to_live_groups_from_their_next_turn() {
        let (mut g, ids) = groups(&[("a", 1), ("b", 1)]);
        let (a, b) = (ids[0], ids[1]);
        let mut level = Level::new(1, 1, a, &g);
        for seq in 2..=7 {
            level.insert(seq, seq as u32, if seq <= 4 { a } else { b }, &g);
        }
        g.set_weight("a", 2);
        assert_eq!(g.weight(a), 2);
        // a's current turn was 1; its next is 2.
        assert_eq!(drain(&mut level, &g), [a, b, a, a, b, a, b]);
        g.set_weight("a", 1);
        assert_eq!(g.weight_of("a"), 1);
    }
}
