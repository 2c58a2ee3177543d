//! A key's run ending: done (requeued, retried after a backoff, or its follow-up
//! queued), done in batches, and its failures forgotten.

use super::backoff;
use super::error::Error;
use super::record::State;
use super::schedule::Schedule;
use super::time::{check_delay, check_now};
use super::Scheduler;

impl Scheduler {
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
}
