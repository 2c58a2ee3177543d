//! Handing keys out: the next ready one by priority, fair group and age, up to the
//! concurrency limit and each group's cap.

use super::error::Error;
use super::groups::NO_GROUP;
use super::record::State;
use super::time::check_now;
use super::Scheduler;

impl Scheduler {
    /// Hand out the next ready key (it is in flight until `done`), or `None` when no key is
    /// ready or `concurrency` keys are already in flight.
    pub fn pop(&mut self, now: f64) -> Result<Option<&str>, Error> {
        let now = self.tick(check_now(now)?);
        Ok(self.pop_one(now).map(|idx| self.records.key(idx)))
    }

    /// `pop` up to `max` times with one `now`, passing each key to `out`; returns the count.
    pub fn pop_many(
        &mut self,
        max: usize,
        now: f64,
        mut out: impl FnMut(&str),
    ) -> Result<usize, Error> {
        let now = self.tick(check_now(now)?);
        // First take the keys from the ready queue, then start them: the records of keys
        // taken in turn from many groups lie far apart, and looking them all up in one
        // loop (`Records::warm_slots`) lets the CPU wait for their cache misses together.
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        while batch.len() < max {
            let Some(idx) = self.take_ready(now, batch.len()) else {
                break;
            };
            batch.push(idx);
        }
        self.records.warm_slots(&batch);
        for &idx in &batch {
            self.start(idx, now);
            out(self.records.key(idx));
        }
        let n = batch.len();
        self.batch = batch;
        Ok(n)
    }

    pub(super) fn pop_one(&mut self, now: f64) -> Option<u32> {
        let idx = self.take_ready(now, 0)?;
        self.start(idx, now);
        // While the caller works on this key, have the cache fetch what the next pops will
        // read: fair groups take keys out of arrival order, so their records and key texts
        // are seldom next to this one in memory, and with many keys not in cache. The next
        // key's record was asked for on the last pop, so its text can be asked for now; the
        // record of the key after it is asked for in turn.
        let (next, after) = self.ready.upcoming();
        if let Some(next) = next {
            self.records.prefetch_key(next);
        }
        if let Some(after) = after {
            self.records.prefetch(after);
        }
        Some(idx)
    }

    /// Take the next key from the ready queue, unless `concurrency` keys would be in flight
    /// with the `taken` ones not yet started. With a group cap the key counts against its
    /// group from here (`pop_many` starts its keys after taking them all), and a group that
    /// reaches the cap is held before the next take.
    #[inline]
    pub(super) fn take_ready(&mut self, now: f64, taken: usize) -> Option<u32> {
        if self.cfg.concurrency > 0 && self.running.len() + taken >= self.cfg.concurrency {
            return None;
        }
        // Anti-starvation: once the oldest ready key has waited past max_wait its priority
        // level goes first; within the level, groups keep their turns (with no named group
        // here, that is the oldest key itself). With one priority level that is the level
        // served anyway, so the oldest key's record is not read.
        let (_, _, idx, gid) = if self.ready.priorities() > 1 {
            match self.ready.oldest() {
                Some((p, _, i)) if now - self.records.get(i).at > self.cfg.max_wait => {
                    self.ready.pop_at(p, &self.groups)?
                }
                _ => self.ready.pop_first(&self.groups)?,
            }
        } else {
            self.ready.pop_first(&self.groups)?
        };
        // The one branch a pop pays for the caps when there is none.
        if self.groups.counting() {
            self.count_start(gid);
        }
        Some(idx)
    }

    /// A key of group `gid` goes in flight while keys are counted: count it, and hold the
    /// group if that reaches its cap.
    pub(super) fn count_start(&mut self, gid: u32) {
        if gid != NO_GROUP && self.groups.flight_started(gid) {
            self.ready.hold(gid, &self.groups);
        }
    }

    /// A key of group `gid` leaves flight while keys are counted: count it, and release the
    /// group if that takes it below its cap (before the key itself is queued again, if it
    /// is).
    pub(super) fn count_end(&mut self, gid: u32) {
        if gid != NO_GROUP && self.groups.flight_ended(gid) {
            self.ready.release(gid, &self.groups);
        }
    }

    /// Hand out `idx`, just taken from the ready queue: it is in flight from `now`.
    #[inline]
    pub(super) fn start(&mut self, idx: u32, now: f64) {
        let seq = self.bump_seq();
        let rec = self.records.get_mut(idx);
        self.queue_duration.observe(now - rec.at);
        rec.state = State::Running;
        rec.at = now;
        rec.seq = seq;
        self.running.insert(seq, idx);
        self.counters.pops += 1;
    }
}
