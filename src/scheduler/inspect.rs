//! Looking into the queue, for the question "why is this key not running?": one key's state
//! (`Scheduler::inspect`) and a summary of the whole queue (`Scheduler::queue_summary`).
//!
//! Both are read-only apart from the clock: like `stats`, they first advance it to `now`,
//! which promotes the waiting keys that are due, so a key whose ready time has passed shows
//! as ready. Nothing here runs on `add`, `pop` or `done`: the answers are computed from the
//! records and queues those keep anyway.
//!
//! Costs: `inspect` is one key lookup plus, for a ready key, its rank in its priority level
//! (a binary search, plus a count of the level's tombstones and out-of-order entries, which
//! are compacted past 32 and past half the level) and a sum over the priority levels above
//! it. `queue_summary` is O(priority levels + keys in flight); it does not split waiting keys
//! by priority, which would take a scan of every waiting key under the scheduler's lock.

use super::error::Error;
use super::record::State;
use super::time::check_now;
use super::Scheduler;

/// Where a key is in its life cycle, as `inspect` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Queued with a ready time in the future (`ready_at`).
    Waiting,
    /// Ready since `since`, waiting for a free slot and its turn.
    Ready,
    /// Handed out by `pop` at `since`, not done yet.
    InFlight,
    /// In flight, and triggered again meanwhile: it runs again after `done`.
    InFlightDirty,
}

impl KeyState {
    /// The state's name in the Python API and the JSON of the debug endpoint.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Ready => "ready",
            Self::InFlight => "in_flight",
            Self::InFlightDirty => "in_flight_dirty",
        }
    }
}

/// One key's record, as `Scheduler::inspect` reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyInspection {
    pub state: KeyState,
    /// Queued: the merged priority. In flight: the priority it was popped with.
    pub priority: i64,
    /// Consecutive failures (reset by a success or `forget`).
    pub failures: u32,
    /// The backoff of the latest failure before jitter, `min(backoff_max, backoff_base ×
    /// 2^(failures-1))` (the delay drawn was 0.8 to 1.2 times this); `None` with no failure.
    pub backoff: Option<f64>,
    /// Waiting: when it becomes ready. Dirty: the follow-up's ready time (it cannot start
    /// before `done`). Otherwise `None`.
    pub ready_at: Option<f64>,
    /// Ready: since when. In flight: since when it runs. Otherwise `None`.
    pub since: Option<f64>,
    /// Ready: the ready keys of its priority served before it (0: it is next at its level),
    /// the fair groups' turns included: the exact number of pops at its priority before it,
    /// if nothing is added meanwhile and no group becomes held or released. `None` for a
    /// held key, which is not in line until its group is released.
    pub ahead_at_priority: Option<usize>,
    /// Ready: the ready keys of its own group and priority served before it.
    pub ahead_in_group: Option<usize>,
    /// Ready: the ready keys of higher priorities that can be served (all served first,
    /// `max_wait` aside); held groups' keys are not counted. `None` for a held key.
    pub ahead_higher: Option<usize>,
    /// Ready, and its group has its cap of keys in flight: it is not served until one of
    /// them ends.
    pub held: bool,
    /// Its group's cap on keys in flight (`None`: no group, or no cap).
    pub group_concurrency: Option<u32>,
    /// Dirty: the follow-up's priority.
    pub follow_up_priority: Option<i64>,
    /// The key's fair group (`None`: no group), in every state.
    pub group: Option<String>,
}

/// The ready key that has waited longest, of any priority.
#[derive(Debug, Clone, PartialEq)]
pub struct OldestReady {
    pub key: String,
    pub priority: i64,
    pub since: f64,
    pub group: Option<String>,
}

/// One named fair group's keys, in `QueueSummary::by_group`.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupCounts {
    pub group: String,
    /// Records of any state: waiting, ready and in flight.
    pub keys: usize,
    pub ready: usize,
    pub in_flight: usize,
    pub weight: u32,
    /// Its cap on keys in flight (0: none).
    pub group_concurrency: u32,
    /// It has its cap of keys in flight: its ready keys wait for one to end.
    pub held: bool,
}

/// Counts by state and by priority, and the keys at the heads of the queues.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSummary {
    pub ready: usize,
    pub waiting: usize,
    /// In flight, dirty ones included.
    pub in_flight: usize,
    /// In flight with a follow-up queued.
    pub dirty: usize,
    /// The concurrency limit (0: none).
    pub concurrency: usize,
    /// The cap on keys in flight per named group, for groups without their own (0: none).
    pub group_concurrency: usize,
    /// Ready keys by priority, from the highest.
    pub ready_by_priority: Vec<(i64, usize)>,
    /// Keys in flight by the priority they were popped with, from the highest.
    pub in_flight_by_priority: Vec<(i64, usize)>,
    /// The oldest ready key that can be served (held groups' keys are not).
    pub oldest_ready: Option<OldestReady>,
    /// The earliest ready time of a waiting key.
    pub next_ready_at: Option<f64>,
    /// The clock the answer was computed at (the latest `now` seen).
    pub now: f64,
    /// Each named fair group with keys, by name (keys without a group are not listed).
    pub by_group: Vec<GroupCounts>,
}

/// The backoff before jitter after `failures` consecutive failures (see `backoff::delay`).
fn nominal_backoff(base: f64, max: f64, failures: u32) -> Option<f64> {
    if failures == 0 {
        return None;
    }
    let exponent = (failures - 1).min(1023) as i32;
    Some((base * 2f64.powi(exponent)).min(max))
}

impl Scheduler {
    /// The state of `key` as of `now`, or `None` when it has no record (never queued, or
    /// done with nothing to follow).
    pub fn inspect(&mut self, key: &str, now: f64) -> Result<Option<KeyInspection>, Error> {
        let now = check_now(now)?;
        self.tick(now);
        let Some(idx) = self.records.find(key) else {
            return Ok(None);
        };
        let rec = self.records.get(idx);
        let mut out = KeyInspection {
            state: KeyState::Waiting,
            priority: rec.priority,
            failures: rec.failures,
            backoff: nominal_backoff(self.cfg.backoff_base, self.cfg.backoff_max, rec.failures),
            ready_at: None,
            since: None,
            ahead_at_priority: None,
            ahead_in_group: None,
            ahead_higher: None,
            follow_up_priority: None,
            group: None,
            held: false,
            group_concurrency: None,
        };
        let gid = self.records.get(idx).group;
        out.group = self.groups.name(gid).map(str::to_owned);
        out.group_concurrency = Some(self.groups.cap_of_group(gid)).filter(|&c| c != 0);
        match rec.state {
            State::Waiting => out.ready_at = Some(rec.at),
            State::Ready => {
                out.state = KeyState::Ready;
                out.since = Some(rec.at);
                let ahead = self.ready.ahead(rec.priority, rec.seq, gid, &self.groups);
                out.ahead_in_group = Some(ahead.in_group);
                if self.groups.is_held(gid) {
                    out.held = true;
                } else {
                    out.ahead_at_priority = Some(ahead.at_priority);
                    out.ahead_higher = Some(ahead.higher);
                }
            }
            State::Running => {
                out.state = KeyState::InFlight;
                out.since = Some(rec.at);
            }
            State::RunningDirty => {
                out.state = KeyState::InFlightDirty;
                out.since = Some(rec.at);
                if let Some(Some(f)) = self.running.follow_up(idx) {
                    out.ready_at = Some(f.schedule.at);
                    out.follow_up_priority = Some(f.priority);
                }
            }
            State::Free => unreachable!("the key index never points at a free slot"),
        }
        Ok(Some(out))
    }

    /// Each named group's keys, ready keys, keys in flight and weight, by name
    /// (O(groups × priority levels + keys in flight)).
    fn group_counts(&self) -> Vec<GroupCounts> {
        if self.groups.len() == 0 {
            return Vec::new();
        }
        let mut counts: hashbrown::HashMap<u32, GroupCounts> = self
            .groups
            .named()
            .map(|(gid, name, keys, weight)| {
                let c = GroupCounts {
                    group: name.to_owned(),
                    keys: keys as usize,
                    ready: 0,
                    in_flight: 0,
                    weight,
                    group_concurrency: self.groups.cap_of_group(gid),
                    held: self.groups.is_held(gid),
                };
                (gid, c)
            })
            .collect();
        for (gid, n) in self.ready.by_group() {
            if let Some(c) = counts.get_mut(&gid) {
                c.ready += n;
            }
        }
        for (idx, _, _) in self.running.entries() {
            if let Some(c) = counts.get_mut(&self.records.get(idx).group) {
                c.in_flight += 1;
            }
        }
        let mut out: Vec<GroupCounts> = counts.into_values().collect();
        out.sort_unstable_by(|a, b| a.group.cmp(&b.group));
        out
    }

    /// Counts by state and priority, the oldest ready key and the next waiting time, as of
    /// `now` (O(priority levels + keys in flight)).
    pub fn queue_summary(&mut self, now: f64) -> Result<QueueSummary, Error> {
        let now = self.tick(check_now(now)?);
        let oldest_ready = self.ready.oldest().map(|(priority, _, idx)| {
            let rec = self.records.get(idx);
            OldestReady {
                key: self.records.key(idx).to_string(),
                priority,
                since: rec.at,
                group: self
                    .groups
                    .name(self.records.get(idx).group)
                    .map(str::to_owned),
            }
        });
        let mut in_flight: Vec<(i64, usize)> = Vec::new();
        for (idx, _, _) in self.running.entries() {
            let priority = self.records.get(idx).priority;
            match in_flight.iter_mut().find(|(p, _)| *p == priority) {
                Some((_, n)) => *n += 1,
                None => in_flight.push((priority, 1)),
            }
        }
        in_flight.sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
        Ok(QueueSummary {
            by_group: self.group_counts(),
            ready: self.ready.len(),
            waiting: self.waiting.len(),
            in_flight: self.running.len(),
            dirty: self.dirty,
            concurrency: self.cfg.concurrency,
            group_concurrency: self.cfg.group_concurrency,
            ready_by_priority: self.ready.levels().collect(),
            in_flight_by_priority: in_flight,
            oldest_ready,
            next_ready_at: self.waiting.first_at(),
            now,
        })
    }
}

#[cfg(test)]
mod tests;
