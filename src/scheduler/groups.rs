//! Fair groups: which group each key belongs to, each group's weight and cap, and which
//! groups are held. How one priority level serves its groups in turn is `super::fair`'s.
//!
//! A key may belong to a named group (a tenant, a namespace); keys without one form the
//! implicit group `NO_GROUP`. `Groups` interns group names as small numbers and counts each
//! group's keys (records of any state), so a group with no keys left is forgotten at once:
//! many short-lived groups cost no memory once their keys are gone. Weights set with
//! `set_weight` are kept by name (they are configuration, and outlive the keys).
//!
//! With a cap on keys in flight per group (`Config::group_concurrency`, or one group's own
//! set with `set_cap`), `Groups` also counts each named group's keys in flight, and a group
//! with its cap in flight is *held*: its ready keys are not served (each level parks them,
//! `super::fair`) until one of its keys ends and it drops below the cap, which releases it.

use super::names::Names;
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_group_is_held_at_its_cap_and_released_below_it() {
        let mut g = Groups::with_cap(2);
        let a = g.join(Some("a"));
        assert!(!g.flight_started(a));
        assert!(
            g.flight_started(a),
            "the second key in flight reaches the cap"
        );
        assert!(g.is_held(a));
        assert!(g.flight_ended(a), "one below the cap: released");
        assert!(!g.is_held(a));
        // Its own cap of 1 holds it with its one key in flight; the default releases it.
        assert_eq!(g.set_cap("a", Some(1)), Some((a, false, true)));
        assert_eq!(g.set_cap("a", None), Some((a, true, false)));
        // A cap set before the group has keys is kept by name; 0 is no cap.
        assert_eq!(g.set_cap("b", Some(0)), None);
        let b = g.join(Some("b"));
        assert_eq!(g.cap_of_group(b), 0);
        for _ in 0..3 {
            assert!(!g.flight_started(b));
        }
        assert!(!g.is_held(b) && !g.is_held(NO_GROUP));
        g.check(|_| 1, |gid| if gid == a { 1 } else { 3 }).unwrap();
        assert!(g.check(|_| 1, |_| 1).is_err(), "a stale in-flight count");
    }

    #[test]
    fn counting_starts_with_the_keys_already_in_flight() {
        let mut g = Groups::default();
        let a = g.join(Some("a"));
        assert!(!g.counting() && !g.is_held(a));
        g.start_counting([a, NO_GROUP, a].into_iter());
        assert!(g.counting());
        assert_eq!(
            g.set_cap("a", Some(2)),
            Some((a, false, true)),
            "two in flight"
        );
        g.check(|_| 1, |_| 2).unwrap();
    }
}
