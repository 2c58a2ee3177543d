//! What the scheduler holds: a key's failures, the next ready time, counts, and the
//! statistics behind the workqueue metrics.

use super::error::Error;
use super::record::State;
use super::stats::Stats;
use super::time::check_now;
use super::Scheduler;

impl Scheduler {
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
}
