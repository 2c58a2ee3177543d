//! The keyed scheduler: one record per key, a priority/FIFO ready queue, a waiting queue by
//! ready time, in-flight bookkeeping with dirty follow-ups, debounce, per-key backoff and the
//! counters behind the workqueue metrics.
//!
//! This module is plain Rust with no Python types; `crate::binding` wraps it.
//!
//! # States and transitions
//!
//! A key is absent (no record), waiting (ready at a future time), ready, in flight (handed out
//! by `pop`), or in flight and dirty (in flight with a follow-up queued). Every operation
//! changes that one record, and each queue holds only the keys in its state:
//!
//! ```text
//!            add (after > 0, or debounced)            due (any op's `now` reaches it)
//!  absent ────────────────────────────────► waiting ─────────────────────────────► ready
//!    │  ▲            add (ready now)                                                 │
//!    │  └───────────────────────────────────────────────────────────────────────┐   │ pop
//!    └──────────────────────────────────────────────────────────────────────────│─► │
//!                                         done, no requeue                      │   ▼
//!  waiting/ready ◄──── done (requeue_after, failed, or dirty) ◄──────────── in flight
//!                                                                           │  ▲
//!                                                                       add │  │ add (merge)
//!                                                                           ▼  │
//!                                                                   in flight + dirty
//! ```
//!
//! # Time
//!
//! Times are `f64` seconds on the caller's monotonic clock. Every operation that takes `now`
//! first advances the scheduler's clock to `max(now, latest now seen)` (so a caller whose
//! clock reading lost a race for the lock does not move time backwards) and moves every
//! waiting key that is due to the ready queue, in ready-time order. Because of that, keys
//! enter the ready queue in the order they became ready, and one increasing sequence number
//! gives FIFO order inside a priority with no time comparisons.
//!
//! # Files
//!
//! `config` (settings and their defaults), `error` (why an operation is refused), `time`
//! (checks on times and delays), `schedule` (ready-time and debounce merging), `record`,
//! `index` and `keys` (the per-key records, the key index and the key texts), `sorted` (the
//! append-mostly ordered queue), `queues` (the waiting and ready queues built on it),
//! `level` (one ready priority level, plain or fair), `fair` (a level serving its groups in
//! turn), `groups` (group numbers, weights, caps and which groups are held), `names` and
//! `tournament` (building blocks of the groups), `running` (the keys in flight), `backoff`,
//! `stats` (counters and histograms), `inspect` (one key's state and a queue summary, for
//! debugging), `invariants` (the consistency checker); this file holds the scheduler's
//! operations.
//!
//! Below this file no module uses one that uses it back (docs/scheduler.md, "Inside", lists
//! what each uses). `inspect` and `invariants` use this file's `Scheduler` because they add
//! its methods, and this file re-exports `inspect`'s types.

mod backoff;
mod config;
mod error;
mod fair;
mod groups;
mod index;
mod inspect;
mod invariants;
mod keys;
mod level;
mod names;
mod queues;
mod record;
mod running;
mod schedule;
mod sorted;
mod stats;
#[cfg(test)]
mod tests;
mod time;
mod tournament;

pub use backoff::SplitMix64;
use config::Settings;
pub use config::{Config, MAX_GROUP_CONCURRENCY};
pub use error::Error;
pub use groups::MAX_WEIGHT;
use groups::{Groups, NO_GROUP};
pub use inspect::{GroupCounts, KeyInspection, KeyState, OldestReady, QueueSummary};
use queues::{Ready, Waiting};
use record::{Records, State};
use running::Running;
use schedule::{FollowUp, Schedule};
use stats::Histogram;
pub use stats::{Counters, HistogramSnapshot, Stats, BUCKETS};
pub use time::{check_delay, check_now, MAX_DELAY};

/// A group name must not be empty: `None` is the way to say "no group".
fn check_group(group: Option<&str>) -> Result<Option<&str>, Error> {
    match group {
        Some("") => Err(Error::InvalidConfig {
            name: "group",
            message: "must be a non-empty str or None, got ''".into(),
        }),
        g => Ok(g),
    }
}

/// The scheduler. Not synchronised: the binding wraps it in a mutex.
#[derive(Debug)]
pub struct Scheduler {
    cfg: Settings,
    records: Records,
    waiting: Waiting,
    ready: Ready,
    /// Each key's fair group, and the groups' weights.
    groups: Groups,
    /// In-flight keys in pop order, with the follow-ups of dirty ones.
    running: Running<FollowUp>,
    dirty: usize,
    next_seq: u64,
    /// The latest `now` seen; every waiting key's ready time is later than this.
    clock: f64,
    rng: SplitMix64,
    counters: Counters,
    queue_duration: Histogram,
    work_duration: Histogram,
    /// The slots `pop_many` takes from the ready queue before it starts them (kept to reuse
    /// its allocation).
    batch: Vec<u32>,
}

impl Scheduler {
    /// A scheduler with the given settings; refuses the ones `Settings::new` refuses.
    pub fn new(config: Config) -> Result<Self, Error> {
        let cfg = Settings::new(&config)?;
        // `Settings::new` refuses a cap above `u32::MAX`.
        let cap = u32::try_from(cfg.group_concurrency).unwrap_or(u32::MAX);
        Ok(Self {
            cfg,
            records: Records::default(),
            waiting: Waiting::default(),
            ready: Ready::default(),
            groups: Groups::with_cap(cap),
            running: Running::default(),
            dirty: 0,
            next_seq: 0,
            clock: f64::NEG_INFINITY,
            rng: SplitMix64::new(config.seed),
            counters: Counters::default(),
            queue_duration: Histogram::default(),
            work_duration: Histogram::default(),
            batch: Vec::new(),
        })
    }

    /// The settings in effect (with `debounce_max` resolved and delays clamped).
    pub fn config(&self) -> Config {
        self.cfg.to_config()
    }

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

    fn add_one(
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

    fn pop_one(&mut self, now: f64) -> Option<u32> {
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
    fn take_ready(&mut self, now: f64, taken: usize) -> Option<u32> {
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
    fn count_start(&mut self, gid: u32) {
        if gid != NO_GROUP && self.groups.flight_started(gid) {
            self.ready.hold(gid, &self.groups);
        }
    }

    /// A key of group `gid` leaves flight while keys are counted: count it, and release the
    /// group if that takes it below its cap (before the key itself is queued again, if it
    /// is).
    fn count_end(&mut self, gid: u32) {
        if gid != NO_GROUP && self.groups.flight_ended(gid) {
            self.ready.release(gid, &self.groups);
        }
    }

    /// Hand out `idx`, just taken from the ready queue: it is in flight from `now`.
    #[inline]
    fn start(&mut self, idx: u32, now: f64) {
        let seq = self.bump_seq();
        let rec = self.records.get_mut(idx);
        self.queue_duration.observe(now - rec.at);
        rec.state = State::Running;
        rec.at = now;
        rec.seq = seq;
        self.running.insert(seq, idx);
        self.counters.pops += 1;
    }

    /// End the in-flight state of `key`.
    ///
    /// A dirty key is queued with its follow-up's ready time, merged (earliest wins) with
    /// `now + requeue_after` if given. Otherwise: `requeue_after` queues it that far ahead;
    /// `failed` without `requeue_after` queues it after the key's backoff; else the record is
    /// dropped. The requeue's priority is `priority`, or the priority the key was popped with;
    /// a dirty follow-up takes the higher of that and its adds' priority. `failed` counts a
    /// consecutive failure; a success resets the count.
    pub fn done(
        &mut self,
        key: &str,
        requeue_after: Option<f64>,
        failed: bool,
        priority: Option<i64>,
        now: f64,
    ) -> Result<(), Error> {
        let requeue_after = requeue_after
            .map(|v| check_delay("requeue_after", v))
            .transpose()?;
        let now = check_now(now)?;
        let idx = match self.records.find(key) {
            Some(idx)
                if matches!(
                    self.records.get(idx).state,
                    State::Running | State::RunningDirty
                ) =>
            {
                idx
            }
            _ => return Err(Error::NotInFlight(key.to_owned())),
        };
        let now = self.tick(now);
        if self.groups.counting() {
            self.count_end(self.records.get(idx).group);
        }
        let rec = self.records.get_mut(idx);
        let follow_up = self.running.remove(idx);
        if follow_up.is_some() {
            self.dirty -= 1;
        }
        self.work_duration.observe(now - rec.at);
        self.counters.done += 1;
        if failed {
            rec.failures = rec.failures.saturating_add(1);
            self.counters.failures += 1;
        } else {
            rec.failures = 0;
        }
        let priority = priority.unwrap_or(rec.priority);
        let next = match (follow_up, requeue_after) {
            (Some(f), after) => {
                let schedule = match after {
                    Some(after) => f.schedule.merge_time(now + after),
                    None => f.schedule,
                };
                Some((schedule, f.priority.max(priority)))
            }
            (None, Some(after)) => Some((
                Schedule {
                    at: now + after,
                    deadline: None,
                },
                priority,
            )),
            (None, None) if failed => {
                self.counters.retries += 1;
                let delay = backoff::delay(
                    self.cfg.backoff_base,
                    self.cfg.backoff_max,
                    rec.failures,
                    &mut self.rng,
                );
                Some((
                    Schedule {
                        at: now + delay,
                        deadline: None,
                    },
                    priority,
                ))
            }
            (None, None) => None,
        };
        match next {
            Some((schedule, priority)) => {
                self.counters.requeues += 1;
                rec.priority = priority;
                self.enqueue(idx, schedule, now);
            }
            None => {
                self.groups.leave(rec.group);
                self.records.remove(idx);
            }
        }
        Ok(())
    }

    /// Set the weight of fair group `group`: among ready keys of one priority it is served up
    /// to `weight` keys in a row per turn (default 1). Kept for the group's later keys too.
    pub fn set_group_weight(&mut self, group: &str, weight: u32) -> Result<(), Error> {
        let Some(group) = check_group(Some(group))? else {
            unreachable!("a named group stays named");
        };
        if weight == 0 {
            return Err(Error::InvalidConfig {
                name: "weight",
                message: format!("must be an int in [1, {MAX_WEIGHT}], got 0"),
            });
        }
        self.groups.set_weight(group, weight);
        Ok(())
    }

    /// The weight of fair group `group` (1 unless set).
    pub fn group_weight(&self, group: &str) -> u32 {
        self.groups.weight_of(group)
    }

    /// Give fair group `group` its own cap on keys in flight (`Some(0)`: none for it; `None`:
    /// the scheduler's `group_concurrency` again). Kept by name, like a weight. A group that
    /// now has its cap in flight is held at once; one that no longer has it is released
    /// (rejoining its rings at the back). On a scheduler created without a cap the first
    /// call starts counting keys in flight: O(keys in flight), once.
    pub fn set_group_concurrency(&mut self, group: &str, cap: Option<usize>) -> Result<(), Error> {
        let Some(group) = check_group(Some(group))? else {
            unreachable!("a named group stays named");
        };
        let cap = match cap.map(u32::try_from) {
            None => None,
            Some(Ok(cap)) => Some(cap),
            Some(Err(_)) => {
                return Err(Error::InvalidConfig {
                    name: "group_concurrency",
                    message: format!(
                        "must be an int in [0, {MAX_GROUP_CONCURRENCY}] or None, got {}",
                        cap.unwrap_or_default()
                    ),
                })
            }
        };
        if !self.groups.counting() {
            let records = &self.records;
            let in_flight = self.running.iter().map(|(_, idx)| records.get(idx).group);
            self.groups.start_counting(in_flight);
        }
        match self.groups.set_cap(group, cap) {
            Some((gid, false, true)) => self.ready.hold(gid, &self.groups),
            Some((gid, true, false)) => self.ready.release(gid, &self.groups),
            _ => {}
        }
        Ok(())
    }

    /// The cap on keys in flight of fair group `group` (its own if set, else
    /// `group_concurrency`; 0: none).
    pub fn group_concurrency_of(&self, group: &str) -> u32 {
        self.groups.cap_of(group)
    }

    /// The fair group of `key` (`None` for an absent key or one without a group).
    pub fn group_of(&self, key: &str) -> Option<&str> {
        let idx = self.records.find(key)?;
        self.groups.name(self.records.get(idx).group)
    }

    /// Named groups with at least one key (queued or in flight).
    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// `done` of each key in order, all with one `now` and no requeue, failure or priority:
    /// how a batch of successful reconciles ends. Stops at the first key that is not in
    /// flight (`Error::NotInFlight`): the keys before it are done, the ones after it are not.
    pub fn done_many<'k, I>(&mut self, keys: I, now: f64) -> Result<(), Error>
    where
        I: IntoIterator<Item = &'k str>,
        I::IntoIter: Clone,
    {
        let keys = keys.into_iter();
        self.records.warm(keys.clone());
        let now = self.tick(check_now(now)?);
        for key in keys {
            self.done(key, None, false, None, now)?;
        }
        Ok(())
    }

    /// Reset the consecutive-failure count of `key` (no effect on an absent key).
    pub fn forget(&mut self, key: &str) {
        if let Some(idx) = self.records.find(key) {
            self.records.get_mut(idx).failures = 0;
        }
    }

    /// The consecutive-failure count of `key` (0 for an absent key).
    pub fn failures(&self, key: &str) -> u32 {
        self.records
            .find(key)
            .map_or(0, |idx| self.records.get(idx).failures)
    }

    /// The earliest time a queued key is or becomes ready: when a key is ready, the time the
    /// oldest ready key became ready (never later than the latest `now` seen); otherwise the
    /// earliest waiting ready time; `None` when nothing is queued. Dirty follow-ups are not
    /// counted (they wait for `done`), nor is the concurrency limit.
    ///
    /// It needs no `now`: promoting due keys would not change the answer.
    pub fn next_ready_at(&self) -> Option<f64> {
        match self.ready.oldest() {
            Some((_, _, idx)) => Some(self.records.get(idx).at),
            None => self.waiting.first_at(),
        }
    }

    /// Keys queued: ready + waiting + dirty (an in-flight key without a follow-up is not).
    pub fn len(&self) -> usize {
        self.ready.len() + self.waiting.len() + self.dirty
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is queued: waiting, ready, or in flight with a follow-up.
    pub fn contains(&self, key: &str) -> bool {
        self.records.find(key).is_some_and(|idx| {
            matches!(
                self.records.get(idx).state,
                State::Waiting | State::Ready | State::RunningDirty
            )
        })
    }

    /// Whether `key` is in flight (popped and not yet done).
    pub fn is_in_flight(&self, key: &str) -> bool {
        self.records.find(key).is_some_and(|idx| {
            matches!(
                self.records.get(idx).state,
                State::Running | State::RunningDirty
            )
        })
    }

    /// Keys in flight, dirty ones included.
    pub fn in_flight(&self) -> usize {
        self.running.len()
    }

    /// Counts, ages and histograms as of `now` (due waiting keys are promoted first, so
    /// `depth` counts them as ready).
    pub fn stats(&mut self, now: f64) -> Result<Stats, Error> {
        let now = self.tick(check_now(now)?);
        let oldest_ready_age = self
            .ready
            .oldest()
            .map_or(0.0, |(_, _, idx)| now - self.records.get(idx).at);
        let mut longest_running = 0.0;
        let mut unfinished_work = 0.0;
        for (i, (_, idx)) in self.running.iter().enumerate() {
            let running = now - self.records.get(idx).at;
            if i == 0 {
                longest_running = running;
            }
            unfinished_work += running;
        }
        Ok(Stats {
            depth: self.ready.len(),
            waiting: self.waiting.len(),
            in_flight: self.running.len(),
            dirty: self.dirty,
            len: self.len(),
            counters: self.counters.clone(),
            oldest_ready_age,
            longest_running,
            unfinished_work,
            queue_duration: self.queue_duration.snapshot(),
            work_duration: self.work_duration.snapshot(),
        })
    }

    /// Advance the clock to `now` (never backwards) and promote every due waiting key, in
    /// ready-time order; returns the clock.
    fn tick(&mut self, now: f64) -> f64 {
        let now = self.clock.max(now);
        self.clock = now;
        while let Some((at, idx)) = self.waiting.pop_due(now) {
            // It became ready at its ready time, not when we noticed.
            self.make_ready(idx, at);
        }
        now
    }

    fn bump_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// Put a key that is in no queue into the ready queue, ready since `since`.
    fn make_ready(&mut self, idx: u32, since: f64) {
        let seq = self.bump_seq();
        let rec = self.records.get_mut(idx);
        rec.state = State::Ready;
        rec.at = since;
        rec.seq = seq;
        rec.batch = false;
        self.ready
            .insert(rec.priority, seq, idx, rec.group, &self.groups);
    }

    /// Put a key that is in no queue into the queue its schedule calls for. A key due now
    /// counts as ready since `now` (for a follow-up that waited for `done`, that is when it
    /// could first run).
    fn enqueue(&mut self, idx: u32, schedule: Schedule, now: f64) {
        if schedule.at <= now {
            self.make_ready(idx, now);
            return;
        }
        let seq = self.bump_seq();
        let rec = self.records.get_mut(idx);
        rec.state = State::Waiting;
        rec.at = schedule.at;
        rec.seq = seq;
        rec.batch = schedule.deadline.is_some();
        rec.deadline = schedule.deadline.unwrap_or(0.0);
        self.waiting.insert(schedule.at, seq, idx);
    }
}
