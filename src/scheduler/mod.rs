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
//! debugging), `invariants` (the consistency checker); this file holds the `Scheduler`, its
//! clock and the moves of a key into the queues, and its operations are one file per
//! concern: `adding`, `popping` (handing keys out), `finishing` (`done`), `group_settings`
//! (fair groups' weights and caps) and `queries` (counts and statistics).
//!
//! Below this file no module uses one that uses it back (docs/scheduler.md, "Inside", lists
//! what each uses). The operations' files, `inspect` and `invariants` use this file's
//! `Scheduler` because they add its methods, and this file re-exports `inspect`'s types.

mod adding;
mod backoff;
mod config;
mod error;
mod fair;
mod finishing;
mod group_settings;
mod groups;
mod index;
mod inspect;
mod invariants;
mod keys;
mod level;
mod names;
mod popping;
mod queries;
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
use groups::Groups;
pub use groups::MAX_WEIGHT;
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
