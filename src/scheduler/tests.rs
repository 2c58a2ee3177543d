//! One test per transition and rule of the scheduler (see the module docs), each checking the
//! internal invariants as it goes.
//!
//! The shared helpers are here; the tests, by concern, in `tests/`.

mod caps;
mod fair;
mod order;
mod retries;
mod stats;

use super::*;

fn sched(config: Config) -> Scheduler {
    Scheduler::new(config).expect("valid config")
}

fn default() -> Scheduler {
    sched(Config::default())
}

/// Pop at `now`, checking consistency, as an owned key.
fn pop(s: &mut Scheduler, now: f64) -> Option<String> {
    let k = s.pop(now).unwrap().map(str::to_owned);
    s.check_consistency().unwrap();
    k
}

fn pop_all(s: &mut Scheduler, now: f64) -> Vec<String> {
    let mut out = Vec::new();
    s.pop_many(usize::MAX, now, |k| out.push(k.to_owned()))
        .unwrap();
    s.check_consistency().unwrap();
    out
}

fn add(s: &mut Scheduler, key: &str, after: f64, priority: i64, now: f64) {
    s.add(key, after, priority, now).unwrap();
    s.check_consistency().unwrap();
}

fn done(s: &mut Scheduler, key: &str, now: f64) {
    s.done(key, None, false, None, now).unwrap();
    s.check_consistency().unwrap();
}

fn add_in(s: &mut Scheduler, group: Option<&str>, key: &str, priority: i64, now: f64) {
    s.add_in(group, key, 0.0, priority, now).unwrap();
    s.check_consistency().unwrap();
}
