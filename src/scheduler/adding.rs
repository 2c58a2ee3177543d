//! Adding a key: queued, merged into its record, or a running key's follow-up.

use super::error::Error;
use super::record::State;
use super::schedule::{FollowUp, Schedule};
use super::time::{check_delay, check_now};
use super::{check_group, Scheduler};

impl Scheduler {
    /// Queue `key` to be ready `after` seconds from `now`, or merge into its record: a queued
    /// key keeps the earliest ready time and the highest priority; an in-flight key becomes
    /// dirty (its follow-up starts after `done`). Debounce applies as described on
    /// `Schedule::merge_add`.
    pub fn add(&mut self, key: &str, after: f64, priority: i64, now: f64) -> Result<(), Error> {
        self.add_in(None, key, after, priority, now)
    }

    /// `add`, for a key of fair group `group` (`None`: no group). The group is set when the
    /// key gets its record (an absent key); adds to a key that has one leave its group as it
    /// is, whatever group they name, until the record is dropped.
    #[inline]
    pub fn add_in(
        &mut self,
        group: Option<&str>,
        key: &str,
        after: f64,
        priority: i64,
        now: f64,
    ) -> Result<(), Error> {
        let after = check_delay("after", after)?;
        let group = check_group(group)?;
        let now = self.tick(check_now(now)?);
        self.add_one(group, key, after, priority, now)
    }

    /// `add` for each key in order, with one `now`.
    pub fn add_many<'k, I>(
        &mut self,
        keys: I,
        after: f64,
        priority: i64,
        now: f64,
    ) -> Result<(), Error>
    where
        I: IntoIterator<Item = &'k str>,
        I::IntoIter: Clone,
    {
        self.add_many_in(None, keys, after, priority, now)
    }

    /// `add_many`, every key of fair group `group` (as `add_in`).
    pub fn add_many_in<'k, I>(
        &mut self,
        group: Option<&str>,
        keys: I,
        after: f64,
        priority: i64,
        now: f64,
    ) -> Result<(), Error>
    where
        I: IntoIterator<Item = &'k str>,
        I::IntoIter: Clone,
    {
        let after = check_delay("after", after)?;
        let group = check_group(group)?;
        let now = self.tick(check_now(now)?);
        let keys = keys.into_iter();
        self.records.warm(keys.clone());
        for key in keys {
            self.add_one(group, key, after, priority, now)?;
        }
        Ok(())
    }

    pub(super) fn add_one(
        &mut self,
        group: Option<&str>,
        key: &str,
        after: f64,
        priority: i64,
        now: f64,
    ) -> Result<(), Error> {
        self.counters.adds += 1;
        let Some(idx) = self.records.find(key) else {
            let idx = self.records.insert(key).map_err(|_| Error::TooManyKeys)?;
            let rec = self.records.get_mut(idx);
            rec.group = self.groups.join(group);
            rec.priority = priority;
            let schedule = Schedule::merge_add(None, after, now, &self.cfg);
            self.enqueue(idx, schedule, now);
            return Ok(());
        };
        let rec = self.records.get_mut(idx);
        match rec.state {
            State::Ready => {
                self.counters.merges += 1;
                if priority > rec.priority {
                    let (old, seq) = (rec.priority, rec.seq);
                    rec.priority = priority;
                    // Same sequence number: it keeps its place in the FIFO by ready time.
                    let gid = rec.group;
                    self.ready.remove(old, seq, idx, gid, &self.groups);
                    self.ready.insert(priority, seq, idx, gid, &self.groups);
                }
            }
            State::Waiting => {
                self.counters.merges += 1;
                rec.priority = rec.priority.max(priority);
                let current = Schedule {
                    at: rec.at,
                    deadline: rec.batch.then_some(rec.deadline),
                };
                let (old_at, seq) = (rec.at, rec.seq);
                let next = Schedule::merge_add(Some(current), after, now, &self.cfg);
                if next.at <= now {
                    self.waiting.remove(old_at, seq, idx);
                    self.make_ready(idx, now);
                } else {
                    rec.at = next.at;
                    rec.batch = next.deadline.is_some();
                    rec.deadline = next.deadline.unwrap_or(0.0);
                    if next.at != old_at {
                        self.waiting.remove(old_at, seq, idx);
                        self.waiting.insert(next.at, seq, idx);
                    }
                }
            }
            State::Running => {
                rec.state = State::RunningDirty;
                self.dirty += 1;
                let follow_up = FollowUp {
                    schedule: Schedule::merge_add(None, after, now, &self.cfg),
                    priority,
                };
                if let Some(slot) = self.running.follow_up_mut(idx) {
                    *slot = Some(follow_up);
                }
            }
            State::RunningDirty => {
                self.counters.merges += 1;
                if let Some(Some(f)) = self.running.follow_up_mut(idx) {
                    f.schedule = Schedule::merge_add(Some(f.schedule), after, now, &self.cfg);
                    f.priority = f.priority.max(priority);
                } else {
                    debug_assert!(false, "dirty key without a follow-up");
                }
            }
            State::Free => unreachable!("the key index never points at a free slot"),
        }
        Ok(())
    }
}
