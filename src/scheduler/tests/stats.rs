//! Statistics, a random workload kept consistent, and what mutation testing found.

use super::*;

// ---- stats -------------------------------------------------------------------------------

#[test]
fn stats_report_counts_ages_and_running_time() {
    let mut s = default();
    add(&mut s, "a", 0.0, 0, 0.0);
    add(&mut s, "b", 0.0, 0, 1.0);
    add(&mut s, "c", 0.0, 0, 2.0);
    add(&mut s, "w", 50.0, 0, 2.0);
    assert_eq!(pop_all(&mut s, 4.0).len(), 3);
    add(&mut s, "a", 0.0, 0, 4.0);
    add(&mut s, "d", 0.0, 0, 5.0);
    let st = s.stats(6.0).unwrap();
    assert_eq!(
        (st.depth, st.waiting, st.in_flight, st.dirty, st.len),
        (1, 1, 3, 1, 3)
    );
    assert_eq!(st.oldest_ready_age, 1.0);
    assert_eq!(st.longest_running, 2.0);
    assert_eq!(st.unfinished_work, 6.0);
    assert_eq!(st.queue_duration.count, 3);
    assert_eq!(st.queue_duration.sum, 4.0 + 3.0 + 2.0);
    assert_eq!(st.work_duration.count, 0);
    done(&mut s, "b", 6.5);
    let st = s.stats(6.5).unwrap();
    assert_eq!(st.work_duration.count, 1);
    assert_eq!(st.work_duration.sum, 2.5);
    assert_eq!(st.work_duration.buckets[9], (10.0, 1));
    assert_eq!(st.work_duration.buckets[8], (1.0, 0));
}

#[test]
fn many_keys_stay_consistent() {
    // A deterministic mixed workload, checked against the invariants at every step.
    let mut s = sched(Config {
        concurrency: 7,
        debounce: 0.3,
        max_wait: 2.0,
        seed: 11,
        ..Config::default()
    });
    let mut rng = SplitMix64::new(2024);
    let mut running: Vec<String> = Vec::new();
    let mut now = 0.0;
    for _ in 0..20_000 {
        now += rng.next_unit() * 0.05;
        let k = format!("k{}", rng.next_u64() % 200);
        match rng.next_u64() % 4 {
            0 | 1 => {
                let after = if rng.next_u64() % 2 == 0 {
                    0.0
                } else {
                    rng.next_unit()
                };
                let prio = (rng.next_u64() % 3) as i64 - 1;
                s.add(&k, after, prio, now).unwrap();
            }
            2 => match s.pop(now).unwrap() {
                Some(k) => {
                    let k = k.to_owned();
                    assert!(!running.contains(&k), "{k} handed out twice");
                    running.push(k);
                }
                None => {
                    // Nothing popped: either every slot is taken, or no key is due yet.
                    let due = s.next_ready_at().is_some_and(|at| at <= now);
                    assert!(
                        running.len() == 7 || !due,
                        "a due key was not popped with {} of 7 slots taken at {now}",
                        running.len()
                    );
                }
            },
            _ => {
                if !running.is_empty() {
                    let i = (rng.next_u64() % running.len() as u64) as usize;
                    let k = running.swap_remove(i);
                    let failed = rng.next_u64() % 3 == 0;
                    s.done(&k, None, failed, None, now).unwrap();
                }
            }
        }
        assert!(s.in_flight() <= 7);
        assert_eq!(s.in_flight(), running.len());
        s.check_consistency().unwrap();
    }
}

// ---- found by mutation testing (scripts/mutants rust) -------------------------------------

#[test]
fn priority_still_orders_keys_late_on_the_clock() {
    // Anti-starvation is about how long a key has waited, not about the clock's reading.
    let mut s = default();
    add(&mut s, "low", 0.0, 0, 1000.0);
    add(&mut s, "high", 0.0, 1, 1000.0);
    assert_eq!(pop_all(&mut s, 1000.0), ["high", "low"]);
}

#[test]
fn pop_many_stops_at_max_and_the_counters_count_what_happened() {
    let mut s = default();
    assert!(s.is_empty());
    add(&mut s, "a", 0.0, 0, 0.0);
    add(&mut s, "a", 0.0, 0, 0.0);
    add(&mut s, "b", 0.0, 0, 0.0);
    add(&mut s, "c", 0.0, 0, 0.0);
    assert!(!s.is_empty());
    let mut out = Vec::new();
    assert_eq!(s.pop_many(2, 0.0, |k| out.push(k.to_owned())).unwrap(), 2);
    assert_eq!(out, ["a", "b"]);
    let st = s.stats(0.0).unwrap();
    assert_eq!(
        (st.counters.adds, st.counters.merges, st.counters.pops),
        (4, 1, 2)
    );
}

#[test]
fn stats_measure_the_longest_running_key_and_the_unfinished_work() {
    let mut s = default();
    add(&mut s, "a", 0.0, 0, 1.0);
    assert_eq!(pop(&mut s, 1.0).as_deref(), Some("a"));
    add(&mut s, "b", 0.0, 0, 3.0);
    assert_eq!(pop(&mut s, 3.0).as_deref(), Some("b"));
    let st = s.stats(10.0).unwrap();
    assert_eq!(st.longest_running, 9.0);
    assert_eq!(st.unfinished_work, 16.0);
}

#[test]
fn errors_say_what_was_wrong() {
    assert_eq!(
        Error::NotInFlight("k".into()).to_string(),
        "key \"k\" is not in flight"
    );
    assert!(Error::TooManyKeys.to_string().contains("too many keys"));
}
