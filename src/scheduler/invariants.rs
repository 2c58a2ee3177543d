//! The scheduler's consistency checker: every internal invariant, checked in O(n), for tests
//! (the Rust unit tests and the Python model comparison call it after every step) and
//! debugging. It only reads.

use super::record::State;
use super::Scheduler;

impl Scheduler {
    /// Check every internal invariant (O(n)); for tests and debugging.
    pub fn check_consistency(&self) -> Result<(), String> {
        let (mut waiting, mut ready, mut running, mut dirty) = (0, 0, 0, 0);
        let mut last_ready: Option<(i64, u64)> = None;
        for (p, s, idx) in self.ready.iter() {
            let rec = self.records.get(idx);
            if rec.state != State::Ready || rec.priority != p || rec.seq != s {
                return Err(format!(
                    "ready entry {:?} does not match its record",
                    rec.key
                ));
            }
            if rec.at > self.clock {
                return Err(format!("ready key {:?} is ready in the future", rec.key));
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
                    rec.key
                ));
            }
            if at <= self.clock {
                return Err(format!("waiting key {:?} is overdue", rec.key));
            }
            if rec.batch && rec.deadline < rec.at {
                return Err(format!(
                    "waiting key {:?} is past its debounce cap",
                    rec.key
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
                    rec.key
                ));
            }
        }
        self.running.check()?;
        for idx in self.records.slots() {
            let rec = self.records.get(idx);
            match rec.state {
                State::Free => continue,
                State::Waiting => waiting += 1,
                State::Ready => ready += 1,
                State::Running => running += 1,
                State::RunningDirty => dirty += 1,
            }
            if self.records.find(&rec.key) != Some(idx) {
                return Err(format!("key {:?} is not indexed", rec.key));
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
        self.waiting.check()?;
        self.ready.check_heads()
    }
}
