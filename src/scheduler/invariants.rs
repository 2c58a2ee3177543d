//! The scheduler's consistency checker: every internal invariant, checked in O(n), for tests
//! (the Rust unit tests and the Python model comparison call it after every step) and
//! debugging. It only reads.

use super::groups::NO_GROUP;
use super::record::State;
use super::Scheduler;
use hashbrown::HashMap;

impl Scheduler {
    /// Check every internal invariant (O(n)); for tests and debugging.
    pub fn check_consistency(&self) -> Result<(), String> {
        let (mut waiting, mut ready, mut running, mut dirty) = (0, 0, 0, 0);
        let mut last_ready: Option<(i64, u64)> = None;
        for (p, s, idx, gid) in self.ready.iter() {
            let rec = self.records.get(idx);
            if rec.state != State::Ready
                || rec.priority != p
                || rec.seq != s
                || gid != self.records.get(idx).group
            {
                return Err(format!(
                    "ready entry {:?} does not match its record",
                    self.records.key(idx)
                ));
            }
            if rec.at > self.clock {
                return Err(format!(
                    "ready key {:?} is ready in the future",
                    self.records.key(idx)
                ));
            }
            if let Some((lp, ls)) = last_ready {
                if lp == p && ls > s {
                    return Err("ready queue out of order".into());
                }
            }
            last_ready = Some((p, s));
        }
        for (at, s, idx) in self.waiting.iter() {
            let rec = self.records.get(idx);
            if rec.state != State::Waiting || rec.at != at || rec.seq != s {
                return Err(format!(
                    "waiting entry {:?} does not match its record",
                    self.records.key(idx)
                ));
            }
            if at <= self.clock {
                return Err(format!(
                    "waiting key {:?} is overdue",
                    self.records.key(idx)
                ));
            }
            if rec.batch && rec.deadline < rec.at {
                return Err(format!(
                    "waiting key {:?} is past its debounce cap",
                    self.records.key(idx)
                ));
            }
        }
        for (idx, s, dirty) in self.running.entries() {
            let rec = self.records.get(idx);
            let expected = if dirty {
                State::RunningDirty
            } else {
                State::Running
            };
            if rec.state != expected || rec.seq != s {
                return Err(format!(
                    "in-flight entry {:?} does not match its record",
                    self.records.key(idx)
                ));
            }
        }
        self.running.check()?;
        let mut per_group: HashMap<u32, u32> = HashMap::new();
        let mut flying: HashMap<u32, u32> = HashMap::new();
        for idx in self.records.slots() {
            let rec = self.records.get(idx);
            if rec.state != State::Free {
                *per_group.entry(rec.group).or_default() += 1;
                if matches!(rec.state, State::Running | State::RunningDirty) {
                    *flying.entry(rec.group).or_default() += 1;
                }
            } else if rec.group != NO_GROUP {
                return Err(format!("free slot {idx} is still in a group"));
            }
            match rec.state {
                State::Free => continue,
                State::Waiting => waiting += 1,
                State::Ready => ready += 1,
                State::Running => running += 1,
                State::RunningDirty => dirty += 1,
            }
            if self.records.find(self.records.key(idx)) != Some(idx) {
                return Err(format!("key {:?} is not indexed", self.records.key(idx)));
            }
        }
        let counts = (waiting, ready, running + dirty, dirty);
        let expected = (
            self.waiting.len(),
            self.ready.len(),
            self.running.len(),
            self.dirty,
        );
        if counts != expected {
            return Err(format!(
                "state counts {counts:?} differ from queue lengths {expected:?}"
            ));
        }
        if self.records.len() != waiting + ready + running + dirty {
            return Err("index length differs from live records".into());
        }
        if self.groups.cap() as usize != self.cfg.group_concurrency
            || (self.cfg.group_concurrency != 0 && !self.groups.counting())
        {
            return Err("the group cap differs from the settings".into());
        }
        self.groups.check(
            |gid| per_group.get(&gid).copied().unwrap_or(0),
            |gid| flying.get(&gid).copied().unwrap_or(0),
        )?;
        self.check_rings()?;
        self.waiting.check()?;
        self.ready.check_heads(&self.groups)
    }

    /// Each level's ring lists exactly the groups with ready keys at that level that are not
    /// held (a held group is in no ring), and every level with ready keys is listed.
    fn check_rings(&self) -> Result<(), String> {
        let mut ready: HashMap<i64, Vec<u32>> = HashMap::new();
        for (p, _, _, gid) in self.ready.iter() {
            let servable = ready.entry(p).or_default();
            if !self.groups.is_held(gid) {
                servable.push(gid);
            }
        }
        for (p, mut ring, turn) in self.ready.rings() {
            let Some(mut want) = ready.remove(&p) else {
                return Err(format!("ready level {p} has no ready keys"));
            };
            want.sort_unstable();
            want.dedup();
            ring.sort_unstable();
            if ring != want {
                return Err(format!(
                    "ready level {p}: the ring is not its groups that are not held"
                ));
            }
            if !ring.is_empty() && turn == 0 {
                return Err(format!("ready level {p}: the front group has no turn"));
            }
        }
        if !ready.is_empty() {
            return Err("a level with ready keys is not listed".into());
        }
        Ok(())
    }
}
