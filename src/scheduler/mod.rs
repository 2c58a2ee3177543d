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

mod backoff;
mod index;
mod queues;
mod record;
mod running;
mod stats;
#[cfg(test)]
mod tests;

use std::fmt;

pub use backoff::SplitMix64;
use queues::{Ready, Waiting};
use record::{Records, State};
use running::Running;
use stats::Histogram;
pub use stats::{Counters, HistogramSnapshot, Stats, BUCKETS};

/// The longest delay the scheduler accepts, in seconds (180 days, as kube-runtime clamps
/// requeues): longer delays, including infinity, are cut to this. It keeps every sum of a
/// time and a delay finite and far from overflow.
pub const MAX_DELAY: f64 = 15_552_000.0;

/// Why an operation was refused. A refused operation changes nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A delay or duration argument that is NaN or negative.
    InvalidDelay { name: &'static str, value: f64 },
    /// A `now` that is NaN or infinite.
    InvalidTime(f64),
    /// A configuration value out of range.
    InvalidConfig { name: &'static str, message: String },
    /// `done` for a key that is not in flight.
    NotInFlight(String),
    /// More than `u32::MAX` keys at once.
    TooManyKeys,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidDelay { name, value } => {
                write!(f, "{name} must be a number of seconds >= 0, got {value}")
            }
            Error::InvalidTime(value) => {
                write!(f, "now must be a finite number of seconds, got {value}")
            }
            Error::InvalidConfig { name, message } => write!(f, "{name} {message}"),
            Error::NotInFlight(key) => write!(f, "key {key:?} is not in flight"),
            Error::TooManyKeys => write!(f, "too many keys for one scheduler (max 2**32 - 1)"),
        }
    }
}

impl std::error::Error for Error {}

/// Scheduler settings, as given by the caller (validated by `Scheduler::new`).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Most keys in flight at once; 0 means no limit.
    pub concurrency: usize,
    /// Seconds an add that would make a key ready now waits instead (0 disables debounce).
    pub debounce: f64,
    /// Longest a debounce batch may be pushed back, from its first add; default 10 × debounce.
    pub debounce_max: Option<f64>,
    /// A ready key older than this is served before keys of higher priority.
    pub max_wait: f64,
    /// The first failure's backoff, in seconds.
    pub backoff_base: f64,
    /// The longest backoff, in seconds.
    pub backoff_max: f64,
    /// Seed of the jitter generator.
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            concurrency: 0,
            debounce: 0.0,
            debounce_max: None,
            max_wait: 30.0,
            backoff_base: 0.005,
            backoff_max: 300.0,
            seed: 0,
        }
    }
}

/// Validated settings: every delay clamped to `MAX_DELAY`, `debounce_max` resolved.
#[derive(Debug, Clone)]
struct Settings {
    concurrency: usize,
    debounce: f64,
    debounce_max: f64,
    max_wait: f64,
    backoff_base: f64,
    backoff_max: f64,
}

/// Check a delay argument: NaN or negative is an error, anything above `MAX_DELAY`
/// (infinity included) is clamped. `+ 0.0` turns `-0.0` into `0.0` so that every copy of the
/// semantics (the Python model too) orders equal times the same way.
pub fn check_delay(name: &'static str, value: f64) -> Result<f64, Error> {
    if value.is_nan() || value < 0.0 {
        return Err(Error::InvalidDelay { name, value });
    }
    Ok(value.min(MAX_DELAY) + 0.0)
}

/// Check a `now` argument: it must be finite.
pub fn check_now(now: f64) -> Result<f64, Error> {
    if now.is_finite() {
        Ok(now + 0.0)
    } else {
        Err(Error::InvalidTime(now))
    }
}

/// A requested ready time, and the debounce batch it belongs to.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Schedule {
    at: f64,
    /// Set while the ready time is a debounce time: the latest time further debounced adds
    /// may push it to (the batch's `debounce_max` cap, or an earlier explicitly requested
    /// ready time).
    deadline: Option<f64>,
}

impl Schedule {
    /// Merge an add into the current schedule (`None` for a key with no pending run).
    ///
    /// An add with `after == 0` while debounce is on would make the key ready now, so it is
    /// debounced: it moves the ready time to `now + debounce` (trailing edge), but never past
    /// the batch's deadline. Any other add is an explicit time and merges by earliest-wins,
    /// which also caps the batch's deadline.
    fn merge_add(current: Option<Schedule>, after: f64, now: f64, cfg: &Settings) -> Schedule {
        let debounced = cfg.debounce > 0.0 && after == 0.0;
        match (current, debounced) {
            (None, false) => Schedule {
                at: now + after,
                deadline: None,
            },
            (None, true) => Schedule {
                at: now + cfg.debounce,
                deadline: Some(now + cfg.debounce_max),
            },
            (Some(s), false) => s.merge_time(now + after),
            (Some(s), true) => match s.deadline {
                Some(deadline) => Schedule {
                    at: (now + cfg.debounce).min(deadline),
                    deadline: Some(deadline),
                },
                // The key is already due at an explicit time; a debounce batch only starts if
                // it would run sooner than that, and may then not be pushed past it.
                None if now + cfg.debounce < s.at => Schedule {
                    at: now + cfg.debounce,
                    deadline: Some((now + cfg.debounce_max).min(s.at)),
                },
                None => s,
            },
        }
    }

    /// Earliest-wins merge of an explicit ready time (never debounced).
    fn merge_time(self, at: f64) -> Schedule {
        Schedule {
            at: self.at.min(at),
            deadline: self.deadline.map(|d| d.min(at)),
        }
    }
}

/// The follow-up of a dirty in-flight key: merged ready time and priority of the adds that
/// arrived while it ran.
#[derive(Debug, Clone, Copy)]
struct FollowUp {
    schedule: Schedule,
    priority: i64,
}

/// The scheduler. Not synchronised: the binding wraps it in a mutex.
#[derive(Debug)]
pub struct Scheduler {
    cfg: Settings,
    records: Records,
    waiting: Waiting,
    ready: Ready,
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
}

impl Scheduler {
    /// A scheduler with the given settings; refuses NaN or negative durations and a
    /// `debounce_max` shorter than `debounce`.
    pub fn new(config: Config) -> Result<Self, Error> {
        let duration = |name: &'static str, v: f64| {
            check_delay(name, v).map_err(|_| Error::InvalidConfig {
                name,
                message: format!("must be a number of seconds >= 0, got {v}"),
            })
        };
        let debounce = duration("debounce", config.debounce)?;
        let debounce_max = match config.debounce_max {
            Some(v) => duration("debounce_max", v)?,
            None => (debounce * 10.0).min(MAX_DELAY),
        };
        if debounce_max < debounce {
            return Err(Error::InvalidConfig {
                name: "debounce_max",
                message: format!("must be >= debounce ({debounce}), got {debounce_max}"),
            });
        }
        if config.max_wait.is_nan() || config.max_wait < 0.0 {
            return Err(Error::InvalidConfig {
                name: "max_wait",
                message: format!("must be a number of seconds >= 0, got {}", config.max_wait),
            });
        }
        let cfg = Settings {
            concurrency: config.concurrency,
            debounce,
            debounce_max,
            // Not clamped: infinity simply switches the rule off.
            max_wait: config.max_wait,
            backoff_base: duration("backoff_base", config.backoff_base)?,
            backoff_max: duration("backoff_max", config.backoff_max)?,
        };
        Ok(Self {
            cfg,
            records: Records::default(),
            waiting: Waiting::default(),
            ready: Ready::default(),
            running: Running::default(),
            dirty: 0,
            next_seq: 0,
            clock: f64::NEG_INFINITY,
            rng: SplitMix64::new(config.seed),
            counters: Counters::default(),
            queue_duration: Histogram::default(),
            work_duration: Histogram::default(),
        })
    }

    /// The settings in effect (with `debounce_max` resolved and delays clamped).
    pub fn config(&self) -> Config {
        Config {
            concurrency: self.cfg.concurrency,
            debounce: self.cfg.debounce,
            debounce_max: Some(self.cfg.debounce_max),
            max_wait: self.cfg.max_wait,
            backoff_base: self.cfg.backoff_base,
            backoff_max: self.cfg.backoff_max,
            seed: 0,
        }
    }

    /// Queue `key` to be ready `after` seconds from `now`, or merge into its record: a queued
    /// key keeps the earliest ready time and the highest priority; an in-flight key becomes
    /// dirty (its follow-up starts after `done`). Debounce applies as described on
    /// `Schedule::merge_add`.
    pub fn add(&mut self, key: &str, after: f64, priority: i64, now: f64) -> Result<(), Error> {
        let after = check_delay("after", after)?;
        let now = self.tick(check_now(now)?);
        self.add_one(key, after, priority, now)
    }

    /// `add` for each key in order, with one `now`.
    pub fn add_many<'k>(
        &mut self,
        keys: impl IntoIterator<Item = &'k str>,
        after: f64,
        priority: i64,
        now: f64,
    ) -> Result<(), Error> {
        let after = check_delay("after", after)?;
        let now = self.tick(check_now(now)?);
        for key in keys {
            self.add_one(key, after, priority, now)?;
        }
        Ok(())
    }

    fn add_one(&mut self, key: &str, after: f64, priority: i64, now: f64) -> Result<(), Error> {
        self.counters.adds += 1;
        let Some(idx) = self.records.find(key) else {
            let idx = self.records.insert(key).map_err(|_| Error::TooManyKeys)?;
            self.records.get_mut(idx).priority = priority;
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
                    self.ready.remove(old, seq, idx);
                    self.ready.insert(priority, seq, idx);
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
        Ok(self.pop_one(now).map(|idx| &*self.records.get(idx).key))
    }

    /// `pop` up to `max` times with one `now`, passing each key to `out`; returns the count.
    pub fn pop_many(
        &mut self,
        max: usize,
        now: f64,
        mut out: impl FnMut(&str),
    ) -> Result<usize, Error> {
        let now = self.tick(check_now(now)?);
        let mut n = 0;
        while n < max {
            let Some(idx) = self.pop_one(now) else { break };
            out(&self.records.get(idx).key);
            n += 1;
        }
        Ok(n)
    }

    fn pop_one(&mut self, now: f64) -> Option<u32> {
        if self.cfg.concurrency > 0 && self.running.len() >= self.cfg.concurrency {
            return None;
        }
        // Anti-starvation: the oldest ready key goes first once it has waited past max_wait.
        let (_, _, idx) = match self.ready.oldest() {
            Some(e) if now - self.records.get(e.2).at > self.cfg.max_wait => {
                self.ready.remove(e.0, e.1, e.2);
                e
            }
            _ => self.ready.pop_first()?,
        };
        let seq = self.bump_seq();
        let rec = self.records.get_mut(idx);
        self.queue_duration.observe(now - rec.at);
        rec.state = State::Running;
        rec.at = now;
        rec.seq = seq;
        self.running.insert(seq, idx);
        self.counters.pops += 1;
        Some(idx)
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
            None => self.records.remove(idx),
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
        self.ready.insert(rec.priority, seq, idx);
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
