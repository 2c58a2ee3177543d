//! One test per transition and rule of the scheduler (see the module docs), each checking the
//! internal invariants as it goes.

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

// ---- absent → waiting / ready, and merges ----------------------------------------------

#[test]
fn add_makes_a_key_ready_at_once_or_waiting() {
    let mut s = default();
    add(&mut s, "now", 0.0, 0, 10.0);
    add(&mut s, "later", 5.0, 0, 10.0);
    assert_eq!(s.len(), 2);
    assert!(s.contains("now") && s.contains("later"));
    assert_eq!(s.stats(10.0).unwrap().depth, 1);
    assert_eq!(s.stats(10.0).unwrap().waiting, 1);
    assert_eq!(pop(&mut s, 10.0).as_deref(), Some("now"));
    assert_eq!(pop(&mut s, 14.9), None);
    assert_eq!(s.next_ready_at(), Some(15.0));
    assert_eq!(pop(&mut s, 15.0).as_deref(), Some("later"));
}

#[test]
fn duplicate_add_keeps_the_earlier_time_and_replaces_a_later_one() {
    let mut s = default();
    add(&mut s, "a", 10.0, 0, 0.0);
    add(&mut s, "a", 20.0, 0, 0.0); // later: ignored
    assert_eq!(s.next_ready_at(), Some(10.0));
    add(&mut s, "a", 3.0, 0, 0.0); // earlier: replaces
    assert_eq!(s.next_ready_at(), Some(3.0));
    assert_eq!(s.len(), 1);
    assert_eq!(pop(&mut s, 2.9), None);
    assert_eq!(pop(&mut s, 3.0).as_deref(), Some("a"));
    assert_eq!(pop(&mut s, 100.0), None, "one record, one hand-out");
    let c = s.stats(100.0).unwrap().counters;
    assert_eq!((c.adds, c.merges, c.pops), (3, 2, 1));
}

#[test]
fn add_to_waiting_key_with_no_delay_makes_it_ready() {
    let mut s = default();
    add(&mut s, "a", 10.0, 0, 0.0);
    add(&mut s, "a", 0.0, 0, 1.0);
    assert_eq!(s.stats(1.0).unwrap().depth, 1);
    assert_eq!(pop(&mut s, 1.0).as_deref(), Some("a"));
}

#[test]
fn merge_keeps_the_highest_priority() {
    let mut s = default();
    add(&mut s, "low", 0.0, 0, 0.0);
    add(&mut s, "a", 0.0, 1, 0.0);
    add(&mut s, "a", 0.0, -5, 0.0); // lower: ignored
    add(&mut s, "low", 0.0, 3, 0.0); // raised above "a"
    add(&mut s, "w", 1.0, 0, 0.0);
    add(&mut s, "w", 1.0, 9, 0.0); // raised while waiting
    assert_eq!(pop_all(&mut s, 1.0), ["w", "low", "a"]);
}

// ---- ready order -------------------------------------------------------------------------

#[test]
fn highest_priority_first_then_fifo_by_ready_time() {
    let mut s = default();
    add(&mut s, "a", 0.0, 0, 0.0);
    add(&mut s, "b", 0.0, 1, 0.0);
    add(&mut s, "c", 0.0, 0, 0.0);
    add(&mut s, "d", 0.0, 1, 0.0);
    add(&mut s, "init", 0.0, -100, 0.0);
    assert_eq!(pop_all(&mut s, 0.0), ["b", "d", "a", "c", "init"]);
}

#[test]
fn fifo_uses_the_time_a_waiting_key_became_ready_not_when_it_was_noticed() {
    let mut s = default();
    add(&mut s, "early", 5.0, 0, 0.0); // ready at 5
    add(&mut s, "mid", 7.0, 0, 0.0); // ready at 7
                                     // Nothing runs until 10, when "late" is added: the earlier ones were ready first.
    add(&mut s, "late", 0.0, 0, 10.0);
    assert_eq!(pop_all(&mut s, 10.0), ["early", "mid", "late"]);
    let st = s.stats(10.0).unwrap();
    // Queue durations 5, 3 and 0 seconds.
    assert!((st.queue_duration.sum - 8.0).abs() < 1e-12);
}

#[test]
fn raising_a_ready_key_keeps_its_age_in_the_new_level() {
    let mut s = default();
    add(&mut s, "old", 0.0, 0, 0.0);
    add(&mut s, "hi", 0.0, 5, 1.0);
    add(&mut s, "old", 0.0, 5, 2.0); // became ready at 0: ahead of "hi" (ready at 1)
    assert_eq!(pop_all(&mut s, 2.0), ["old", "hi"]);
}

#[test]
fn a_busy_key_does_not_block_a_ready_one_behind_it() {
    let mut s = default();
    add(&mut s, "busy", 0.0, 10, 0.0);
    add(&mut s, "other", 0.0, 0, 0.0);
    assert_eq!(pop(&mut s, 0.0).as_deref(), Some("busy"));
    add(&mut s, "busy", 0.0, 10, 0.5); // dirty: not in the ready order
    assert_eq!(pop(&mut s, 1.0).as_deref(), Some("other"));
    assert_eq!(pop(&mut s, 1.0), None);
}

#[test]
fn max_wait_lets_an_old_low_priority_key_overtake() {
    let mut s = sched(Config {
        max_wait: 10.0,
        ..Config::default()
    });
    add(&mut s, "low", 0.0, -100, 0.0);
    add(&mut s, "hi1", 0.0, 0, 5.0);
    add(&mut s, "hi2", 0.0, 0, 5.0);
    // At 10 "low" has waited exactly max_wait: not longer, so priority order still rules.
    assert_eq!(pop(&mut s, 10.0).as_deref(), Some("hi1"));
    assert_eq!(pop(&mut s, 10.5).as_deref(), Some("low"));
    assert_eq!(pop(&mut s, 10.5).as_deref(), Some("hi2"));
}

#[test]
fn max_wait_serves_overdue_keys_oldest_first() {
    let mut s = sched(Config {
        max_wait: 1.0,
        ..Config::default()
    });
    add(&mut s, "a", 0.0, -2, 0.0);
    add(&mut s, "b", 0.0, -1, 1.0);
    add(&mut s, "fresh", 0.0, 5, 3.0);
    assert_eq!(pop_all(&mut s, 3.0), ["a", "b", "fresh"]);
}

#[test]
fn infinite_max_wait_is_pure_priority_order() {
    let mut s = sched(Config {
        max_wait: f64::INFINITY,
        ..Config::default()
    });
    add(&mut s, "low", 0.0, -100, 0.0);
    add(&mut s, "hi", 0.0, 0, 1e6);
    assert_eq!(pop_all(&mut s, 1e7), ["hi", "low"]);
}

// ---- concurrency -------------------------------------------------------------------------

#[test]
fn concurrency_limit_caps_keys_in_flight() {
    let mut s = sched(Config {
        concurrency: 2,
        ..Config::default()
    });
    for k in ["a", "b", "c", "d"] {
        add(&mut s, k, 0.0, 0, 0.0);
    }
    assert_eq!(pop_all(&mut s, 0.0), ["a", "b"]);
    assert_eq!(pop(&mut s, 0.0), None);
    assert_eq!(s.in_flight(), 2);
    done(&mut s, "a", 1.0);
    assert_eq!(pop_all(&mut s, 1.0), ["c"]);
    // A dirty key still holds its slot.
    add(&mut s, "b", 0.0, 0, 1.0);
    assert_eq!(pop(&mut s, 1.0), None);
    done(&mut s, "c", 2.0);
    assert_eq!(pop_all(&mut s, 2.0), ["d"]);
}

// ---- in flight, dirty, done --------------------------------------------------------------

#[test]
fn add_to_an_in_flight_key_produces_exactly_one_follow_up_after_done() {
    let mut s = default();
    add(&mut s, "a", 0.0, 0, 0.0);
    assert_eq!(pop(&mut s, 0.0).as_deref(), Some("a"));
    assert_eq!(s.len(), 0);
    for i in 0..5 {
        add(&mut s, "a", 0.0, 0, 0.1 * f64::from(i));
    }
    assert!(s.contains("a") && s.is_in_flight("a"));
    assert_eq!(s.len(), 1);
    assert_eq!(s.stats(1.0).unwrap().dirty, 1);
    assert_eq!(pop(&mut s, 1.0), None, "never two hand-outs at once");
    done(&mut s, "a", 2.0);
    assert!(!s.is_in_flight("a"));
    assert_eq!(pop(&mut s, 2.0).as_deref(), Some("a"));
    assert_eq!(pop(&mut s, 2.0), None);
    done(&mut s, "a", 3.0);
    assert_eq!(s.len(), 0);
    assert!(!s.contains("a"));
    let c = s.stats(3.0).unwrap().counters;
    assert_eq!((c.adds, c.merges, c.requeues, c.done), (6, 4, 1, 2));
}

#[test]
fn a_follow_up_waits_for_its_own_ready_time() {
    let mut s = default();
    add(&mut s, "a", 0.0, 0, 0.0);
    pop(&mut s, 0.0);
    add(&mut s, "a", 10.0, 0, 1.0); // follow-up due at 11
    done(&mut s, "a", 2.0);
    assert_eq!(pop(&mut s, 10.9), None);
    assert_eq!(s.next_ready_at(), Some(11.0));
    assert_eq!(pop(&mut s, 11.0).as_deref(), Some("a"));
}

#[test]
fn a_follow_up_counts_as_ready_from_done_and_goes_to_the_back() {
    let mut s = default();
    add(&mut s, "a", 0.0, 0, 0.0);
    pop(&mut s, 0.0);
    add(&mut s, "a", 0.0, 0, 1.0); // dirty since 1
    add(&mut s, "b", 0.0, 0, 2.0);
    done(&mut s, "a", 3.0);
    assert_eq!(pop_all(&mut s, 3.0), ["b", "a"]);
}

#[test]
fn a_requeue_merges_with_a_dirty_follow_up_by_earliest_wins() {
    let mut s = default();
    add(&mut s, "a", 0.0, 0, 0.0);
    pop(&mut s, 0.0);
    add(&mut s, "a", 30.0, 0, 0.0); // follow-up due at 30
    s.done("a", Some(5.0), false, None, 1.0).unwrap(); // requeue due at 6: earlier wins
    assert_eq!(s.next_ready_at(), Some(6.0));
    assert_eq!(s.len(), 1);
    pop(&mut s, 6.0);
    add(&mut s, "a", 2.0, 0, 6.0); // follow-up due at 8
    s.done("a", Some(100.0), false, None, 7.0).unwrap(); // later: follow-up wins
    assert_eq!(s.next_ready_at(), Some(8.0));
    s.check_consistency().unwrap();
}

#[test]
fn done_with_requeue_after_waits_that_long_and_keeps_the_popped_priority() {
    let mut s = default();
    add(&mut s, "a", 0.0, 7, 0.0);
    pop(&mut s, 0.0);
    s.done("a", Some(5.0), false, None, 1.0).unwrap();
    assert_eq!(s.next_ready_at(), Some(6.0));
    add(&mut s, "b", 0.0, 6, 6.0);
    assert_eq!(pop_all(&mut s, 6.0), ["a", "b"]);
    // `priority` replaces it.
    s.done("a", Some(0.0), false, Some(-1), 7.0).unwrap();
    done(&mut s, "b", 7.0);
    add(&mut s, "c", 0.0, 0, 7.0);
    assert_eq!(pop_all(&mut s, 7.0), ["c", "a"]);
}

#[test]
fn requeue_after_zero_is_ready_at_once() {
    let mut s = default();
    add(&mut s, "a", 0.0, 0, 0.0);
    pop(&mut s, 0.0);
    s.done("a", Some(0.0), false, None, 1.0).unwrap();
    assert_eq!(pop(&mut s, 1.0).as_deref(), Some("a"));
}

#[test]
fn follow_up_priority_is_the_higher_of_its_adds_and_the_requeue() {
    let mut s = default();
    add(&mut s, "a", 0.0, 0, 0.0);
    pop(&mut s, 0.0);
    add(&mut s, "a", 0.0, -100, 0.0);
    add(&mut s, "a", 0.0, 3, 0.0);
    done(&mut s, "a", 1.0);
    add(&mut s, "b", 0.0, 2, 1.0);
    assert_eq!(pop_all(&mut s, 1.0), ["a", "b"]);
}

#[test]
fn done_for_a_key_not_in_flight_is_refused_and_changes_nothing() {
    let mut s = default();
    add(&mut s, "queued", 0.0, 0, 0.0);
    let before = s.stats(0.0).unwrap();
    for key in ["absent", "queued"] {
        assert_eq!(
            s.done(key, None, false, None, 5.0),
            Err(Error::NotInFlight(key.into()))
        );
    }
    s.check_consistency().unwrap();
    assert_eq!(s.stats(0.0).unwrap(), before);
}

// ---- failures and backoff ----------------------------------------------------------------

fn fail(s: &mut Scheduler, key: &str, now: f64) -> f64 {
    add(s, key, 0.0, 0, now);
    assert_eq!(pop(s, now).as_deref(), Some(key));
    s.done(key, None, true, None, now).unwrap();
    s.check_consistency().unwrap();
    let at = s.next_ready_at().unwrap();
    // Take it out again for the next round.
    assert_eq!(pop(s, at).as_deref(), Some(key));
    s.done(key, Some(0.0), true, None, at).unwrap();
    at - now
}

#[test]
fn backoff_grows_exponentially_with_jitter_bounds_and_caps() {
    let mut s = sched(Config {
        backoff_base: 1.0,
        backoff_max: 60.0,
        seed: 99,
        ..Config::default()
    });
    add(&mut s, "a", 0.0, 0, 0.0);
    let mut now = 0.0;
    for n in 1..=10u32 {
        assert_eq!(pop(&mut s, now).as_deref(), Some("a"));
        s.done("a", None, true, None, now).unwrap();
        assert_eq!(s.failures("a"), n);
        let delay = s.next_ready_at().unwrap() - now;
        let nominal = f64::from(1u32 << (n - 1));
        if nominal * 0.8 >= 60.0 {
            assert!(
                (delay - 60.0).abs() < 1e-9,
                "capped at backoff_max: {delay}"
            );
        } else {
            assert!(
                delay >= nominal * 0.8 - 1e-9 && delay <= (nominal * 1.2).min(60.0) + 1e-9,
                "failure {n}: {delay}"
            );
        }
        now += delay;
    }
    let c = s.stats(now).unwrap().counters;
    assert_eq!((c.failures, c.retries, c.requeues), (10, 10, 10));
}

#[test]
fn a_success_resets_the_backoff() {
    let mut s = sched(Config {
        backoff_base: 1.0,
        seed: 5,
        ..Config::default()
    });
    fail(&mut s, "a", 0.0);
    assert_eq!(s.failures("a"), 2);
    assert_eq!(pop(&mut s, 1e3).as_deref(), Some("a"));
    done(&mut s, "a", 1e3);
    assert_eq!(s.failures("a"), 0);
    assert_eq!(s.len(), 0, "a success with no requeue drops the record");
    let d = fail(&mut s, "a", 2e3);
    assert!((0.8..=1.2).contains(&d), "first failure again: {d}");
}

#[test]
fn forget_resets_the_failure_count() {
    let mut s = sched(Config {
        backoff_base: 1.0,
        seed: 5,
        ..Config::default()
    });
    for _ in 0..5 {
        add(&mut s, "a", 0.0, 0, 0.0);
        pop(&mut s, 1e4);
        s.done("a", Some(0.0), true, None, 1e4).unwrap();
    }
    assert_eq!(s.failures("a"), 5);
    s.forget("a");
    s.forget("absent");
    assert_eq!(s.failures("a"), 0);
    pop(&mut s, 1e4);
    s.done("a", None, true, None, 1e4).unwrap();
    let d = s.next_ready_at().unwrap() - 1e4;
    assert!((0.8..=1.2).contains(&d), "{d}");
}

#[test]
fn a_failed_dirty_key_runs_its_follow_up_without_backoff() {
    let mut s = sched(Config {
        backoff_base: 10.0,
        ..Config::default()
    });
    add(&mut s, "a", 0.0, 0, 0.0);
    pop(&mut s, 0.0);
    add(&mut s, "a", 0.0, 0, 0.5);
    s.done("a", None, true, None, 1.0).unwrap();
    assert_eq!(s.failures("a"), 1);
    assert_eq!(pop(&mut s, 1.0).as_deref(), Some("a"));
    assert_eq!(s.stats(1.0).unwrap().counters.retries, 0);
}

#[test]
fn same_seed_gives_the_same_backoff_sequence() {
    let run = |seed| {
        let mut s = sched(Config {
            seed,
            ..Config::default()
        });
        (0..5)
            .map(|i| fail(&mut s, "k", f64::from(i) * 1e3))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
}

// ---- debounce ----------------------------------------------------------------------------

fn debounced() -> Scheduler {
    sched(Config {
        debounce: 1.0,
        debounce_max: Some(3.0),
        ..Config::default()
    })
}

#[test]
fn debounce_postpones_with_a_trailing_edge() {
    let mut s = debounced();
    add(&mut s, "a", 0.0, 0, 0.0);
    assert_eq!(s.next_ready_at(), Some(1.0));
    assert_eq!(pop(&mut s, 0.9), None);
    add(&mut s, "a", 0.0, 0, 0.9);
    assert_eq!(s.next_ready_at(), Some(1.9));
    assert_eq!(pop(&mut s, 1.5), None);
    assert_eq!(pop(&mut s, 1.9).as_deref(), Some("a"));
}

#[test]
fn debounce_is_capped_by_debounce_max_from_the_first_add() {
    let mut s = debounced();
    let mut now = 0.0;
    while now < 5.0 {
        add(&mut s, "a", 0.0, 0, now);
        if let Some(k) = pop(&mut s, now) {
            assert_eq!(k, "a");
            assert!(now >= 3.0, "capped at 3, served at {now}");
            break;
        }
        now += 0.5;
    }
    assert_eq!(now, 3.0);
}

#[test]
fn debounce_default_cap_is_ten_times_debounce() {
    let s = sched(Config {
        debounce: 0.5,
        ..Config::default()
    });
    assert_eq!(s.config().debounce_max, Some(5.0));
}

#[test]
fn explicit_delays_are_not_debounced_and_bound_the_batch() {
    let mut s = debounced();
    add(&mut s, "x", 2.0, 0, 0.0); // explicit: due at 2
    add(&mut s, "x", 0.0, 0, 0.0); // debounced to 1: sooner, so a batch starts
    assert_eq!(s.next_ready_at(), Some(1.0));
    add(&mut s, "x", 0.0, 0, 0.8); // pushed to 1.8
    add(&mut s, "x", 0.0, 0, 1.5); // pushed to 2.5, but never past the explicit 2
    assert_eq!(s.next_ready_at(), Some(2.0));
    let mut s = debounced();
    add(&mut s, "y", 0.5, 0, 0.0); // explicit and sooner than the debounce time: it wins
    add(&mut s, "y", 0.0, 0, 0.0);
    assert_eq!(pop(&mut s, 0.5).as_deref(), Some("y"));
}

#[test]
fn requeues_are_not_debounced() {
    let mut s = debounced();
    add(&mut s, "a", 0.0, 0, 0.0);
    assert_eq!(pop(&mut s, 1.0).as_deref(), Some("a"));
    s.done("a", Some(0.0), false, None, 1.0).unwrap();
    assert_eq!(pop(&mut s, 1.0).as_deref(), Some("a"));
}

#[test]
fn adds_during_a_run_are_debounced_too() {
    let mut s = debounced();
    add(&mut s, "a", 0.0, 0, 0.0);
    pop(&mut s, 1.0);
    add(&mut s, "a", 0.0, 0, 1.2); // follow-up due at 2.2
    done(&mut s, "a", 1.5);
    assert_eq!(pop(&mut s, 2.1), None);
    assert_eq!(pop(&mut s, 2.2).as_deref(), Some("a"));
}

#[test]
fn a_ready_key_is_not_pushed_back_by_debounce() {
    let mut s = debounced();
    add(&mut s, "a", 0.0, 0, 0.0);
    add(&mut s, "a", 0.0, 0, 1.5); // ready since 1: the batch has fired
    assert_eq!(pop(&mut s, 1.5).as_deref(), Some("a"));
}

// ---- time, clamping, validation ----------------------------------------------------------

#[test]
fn huge_delays_are_clamped() {
    let mut s = default();
    add(&mut s, "inf", f64::INFINITY, 0, 0.0);
    add(&mut s, "max", f64::MAX, 0, 0.0);
    assert_eq!(s.next_ready_at(), Some(MAX_DELAY));
    add(&mut s, "b", 0.0, 0, 0.0);
    pop(&mut s, 0.0);
    s.done("b", Some(1e300), false, None, 0.0).unwrap();
    assert_eq!(pop_all(&mut s, MAX_DELAY), ["inf", "max", "b"]);
}

#[test]
fn bad_delays_and_times_are_refused_without_change() {
    let mut s = default();
    add(&mut s, "a", 0.0, 0, 0.0);
    pop(&mut s, 0.0);
    let before = s.stats(0.0).unwrap();
    assert!(matches!(
        s.add("b", f64::NAN, 0, 0.0),
        Err(Error::InvalidDelay { name: "after", .. })
    ));
    assert!(matches!(
        s.add_many(["b", "c"], -1.0, 0, 0.0),
        Err(Error::InvalidDelay { name: "after", .. })
    ));
    assert!(matches!(
        s.done("a", Some(-0.5), false, None, 0.0),
        Err(Error::InvalidDelay {
            name: "requeue_after",
            ..
        })
    ));
    assert!(matches!(
        s.add("b", 0.0, 0, f64::NAN),
        Err(Error::InvalidTime(_))
    ));
    assert!(matches!(s.pop(f64::INFINITY), Err(Error::InvalidTime(_))));
    assert!(s.is_in_flight("a"));
    assert_eq!(s.stats(0.0).unwrap(), before);
    s.check_consistency().unwrap();
}

#[test]
fn time_never_goes_backwards() {
    let mut s = default();
    add(&mut s, "a", 5.0, 0, 10.0); // due at 15
    assert_eq!(pop(&mut s, 1.0), None); // treated as 10
    add(&mut s, "b", 0.0, 0, 3.0); // treated as 10: ready since 10
    assert_eq!(s.next_ready_at(), Some(10.0));
    assert_eq!(pop_all(&mut s, 15.0), ["b", "a"]);
}

#[test]
fn config_is_validated() {
    let bad = [
        Config {
            debounce: -1.0,
            ..Config::default()
        },
        Config {
            debounce: 2.0,
            debounce_max: Some(1.0),
            ..Config::default()
        },
        Config {
            max_wait: f64::NAN,
            ..Config::default()
        },
        Config {
            backoff_base: f64::NAN,
            ..Config::default()
        },
        Config {
            backoff_max: -3.0,
            ..Config::default()
        },
    ];
    for c in bad {
        assert!(matches!(
            Scheduler::new(c),
            Err(Error::InvalidConfig { .. })
        ));
    }
}

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

// ---- fair groups ------------------------------------------------------------------------

fn add_in(s: &mut Scheduler, group: Option<&str>, key: &str, priority: i64, now: f64) {
    s.add_in(group, key, 0.0, priority, now).unwrap();
    s.check_consistency().unwrap();
}

/// Tenant a floods, then b and c add a few keys: they are served in turn, not behind a.
#[test]
fn groups_are_served_in_turn_fifo_inside_each() {
    let mut s = default();
    let a: Vec<String> = (0..100).map(|i| format!("a/{i}")).collect();
    s.add_many_in(Some("a"), a.iter().map(String::as_str), 0.0, 0, 0.0)
        .unwrap();
    add_in(&mut s, Some("b"), "b/0", 0, 0.0);
    add_in(&mut s, Some("b"), "b/1", 0, 0.0);
    add_in(&mut s, Some("c"), "c/0", 0, 0.0);
    add_in(&mut s, None, "plain", 0, 0.0);
    let got: Vec<String> = (0..8).filter_map(|_| pop(&mut s, 0.0)).collect();
    assert_eq!(
        got,
        ["a/0", "b/0", "c/0", "plain", "a/1", "b/1", "a/2", "a/3"]
    );
    assert_eq!(s.groups(), 3);
    assert_eq!(s.group_of("a/0"), Some("a"));
    assert_eq!(s.group_of("plain"), None);
    assert_eq!(s.group_of("absent"), None);
}

#[test]
fn weights_give_a_group_that_many_keys_per_turn() {
    let mut s = default();
    s.set_group_weight("big", 3).unwrap();
    assert_eq!((s.group_weight("big"), s.group_weight("small")), (3, 1));
    for i in 0..6 {
        add_in(&mut s, Some("big"), &format!("big/{i}"), 0, 0.0);
        add_in(&mut s, Some("small"), &format!("small/{i}"), 0, 0.0);
    }
    let got: Vec<String> = (0..8).filter_map(|_| pop(&mut s, 0.0)).collect();
    assert_eq!(
        got,
        ["big/0", "big/1", "big/2", "small/0", "big/3", "big/4", "big/5", "small/1"]
    );
    assert!(s.set_group_weight("big", 0).is_err());
    assert!(s.set_group_weight("", 2).is_err());
    assert_eq!(s.group_weight("big"), 3, "a refused weight changes nothing");
}

/// Priorities come before groups: a higher level is served first, and each level keeps its
/// own ring.
#[test]
fn priorities_come_before_groups() {
    let mut s = default();
    add_in(&mut s, Some("a"), "a/low", -1, 0.0);
    add_in(&mut s, Some("a"), "a/0", 0, 0.0);
    add_in(&mut s, Some("a"), "a/1", 0, 0.0);
    add_in(&mut s, Some("b"), "b/0", 0, 0.0);
    add_in(&mut s, Some("b"), "b/high", 5, 0.0);
    let got = pop_all(&mut s, 0.0);
    assert_eq!(got, ["b/high", "a/0", "b/0", "a/1", "a/low"]);
}

/// An overdue key picks its priority level; the level's ring picks the group. Without named
/// groups that is the oldest key itself (the rule as it always was).
#[test]
fn an_overdue_key_puts_its_level_first_and_the_ring_picks_the_group() {
    let mut s = sched(Config {
        max_wait: 10.0,
        ..Config::default()
    });
    add_in(&mut s, Some("a"), "a/0", 0, 0.0);
    add_in(&mut s, Some("b"), "b/0", 0, 1.0);
    add_in(&mut s, Some("a"), "a/1", 0, 2.0);
    add_in(&mut s, Some("c"), "c/high", 1, 2.0);
    add_in(&mut s, Some("c"), "c/high2", 1, 2.0);
    // At t=20 every level-0 key is overdue: level 0 goes first, in ring order.
    assert_eq!(pop(&mut s, 20.0).as_deref(), Some("a/0"));
    assert_eq!(pop(&mut s, 20.0).as_deref(), Some("b/0"));
    // The oldest ready key is now a/1 (t=2), the same age as c/high: seq decides, a/1 first.
    assert_eq!(pop(&mut s, 20.0).as_deref(), Some("a/1"));
    assert_eq!(pop_all(&mut s, 20.0), ["c/high", "c/high2"]);
}

/// A key's group is set when it gets its record; later adds naming another group (or none)
/// leave it, through in-flight and requeue, until the record is dropped.
#[test]
fn a_key_keeps_its_group_until_its_record_is_dropped() {
    let mut s = default();
    add_in(&mut s, Some("a"), "k", 0, 0.0);
    add_in(&mut s, Some("b"), "k", 0, 0.0);
    add_in(&mut s, None, "k", 0, 0.0);
    assert_eq!(s.group_of("k"), Some("a"));
    assert_eq!(pop(&mut s, 0.0).as_deref(), Some("k"));
    add_in(&mut s, Some("b"), "k", 0, 0.0); // dirty
    done(&mut s, "k", 0.0);
    assert_eq!(s.group_of("k"), Some("a"));
    assert_eq!((s.groups(), s.group_of("k")), (1, Some("a")));
    assert_eq!(pop(&mut s, 0.0).as_deref(), Some("k"));
    done(&mut s, "k", 0.0);
    assert_eq!((s.groups(), s.group_of("k")), (0, None));
    add_in(&mut s, Some("b"), "k", 0, 0.0);
    assert_eq!(s.group_of("k"), Some("b"));
}

/// A million short-lived groups leave nothing behind: every structure shrinks back.
#[test]
fn short_lived_groups_leave_no_memory_behind() {
    let mut s = default();
    for i in 0..20_000 {
        let group = format!("tenant-{i}");
        add_in(&mut s, Some(&group), &format!("{group}/x"), i % 3, 0.0);
        s.add_in(Some(&group), &format!("{group}/y"), 0.0, 0, 0.0)
            .unwrap();
        for key in pop_all(&mut s, 0.0) {
            s.done(&key, None, false, None, 0.0).unwrap();
        }
        assert_eq!(s.groups(), 0);
    }
    s.check_consistency().unwrap();
    assert!(s.groups.footprint() <= 6, "{}", s.groups.footprint());
}

#[test]
fn an_empty_group_name_is_refused_and_changes_nothing() {
    let mut s = default();
    assert!(matches!(
        s.add_in(Some(""), "k", 0.0, 0, 0.0),
        Err(Error::InvalidConfig { name: "group", .. })
    ));
    assert!(s.add_many_in(Some(""), ["k"], 0.0, 0, 0.0).is_err());
    assert_eq!(s.len(), 0);
    assert_eq!(s.stats(0.0).unwrap().counters.adds, 0);
}

/// A key raised to a higher priority leaves its group's queue at the old level (the group
/// leaves that ring if it was its last key) and joins the new level's ring at the back.
#[test]
fn a_raised_key_moves_its_group_between_rings() {
    let mut s = default();
    add_in(&mut s, Some("a"), "a/0", 0, 0.0);
    add_in(&mut s, Some("b"), "b/0", 0, 0.0);
    add_in(&mut s, Some("c"), "c/0", 0, 0.0);
    add_in(&mut s, Some("b"), "b/1", 0, 0.0);
    add_in(&mut s, Some("a"), "a/0", 3, 0.0); // a leaves level 0
    add_in(&mut s, Some("x"), "b/0", 3, 0.0); // the group named is ignored: still b
    assert_eq!(pop_all(&mut s, 0.0), ["a/0", "b/0", "b/1", "c/0"]);
}

/// Keys of one group raised out of order into a level: the group's queue there is left with
/// only an entry that arrived late (below its back at the time), and an older key raised in
/// after it is the group's new first, and so the level's oldest. The sequence a differential
/// run against the model found (group `None` on a re-add keeps the key's group).
#[test]
fn an_older_key_raised_into_a_group_with_only_late_keys_is_its_head() {
    let mut s = default();
    let steps: [(&[&str], Option<&str>, i64); 4] = [
        (&["ns/k0", "ns/k3", "ns/k5"], Some("g1"), -1),
        (&["ns/k5", "ns/k3"], None, 0),
        (&["ns/k5"], None, 1),
        (&["ns/k0"], None, 0),
    ];
    for (keys, group, priority) in steps {
        s.add_many_in(group, keys.iter().copied(), 0.0, priority, 0.0)
            .unwrap();
        s.check_consistency().unwrap();
    }
    assert_eq!(s.group_of("ns/k0"), Some("g1"));
    assert_eq!(pop_all(&mut s, 0.0), ["ns/k5", "ns/k0", "ns/k3"]);
}

/// The same shape with distinct ready times: the level's oldest key is the one raised in
/// last, which `next_ready_at` reports and the `max_wait` rule serves first (oldest first,
/// across levels).
#[test]
fn max_wait_sees_an_older_key_raised_into_a_group_with_only_late_keys() {
    let mut s = sched(Config {
        max_wait: 1.0,
        ..Config::default()
    });
    for (t, key) in ["a", "b", "c", "d"].into_iter().enumerate() {
        s.add_in(Some("g"), key, 0.0, -1, t as f64).unwrap();
    }
    // Level 0 gets d, then c (late: below d); d moves on to level 1, so level 0's queue of
    // g holds only the late c. b goes to level 1, and a, the oldest, to level 0.
    for (key, priority) in [("d", 0), ("c", 0), ("d", 1), ("b", 1), ("a", 0)] {
        s.add_in(None, key, 0.0, priority, 4.0).unwrap();
    }
    assert_eq!(
        s.next_ready_at(),
        Some(0.0),
        "a, ready since 0, is the oldest"
    );
    // Everything is overdue at 10: oldest first, whatever the level.
    assert_eq!(pop(&mut s, 10.0).as_deref(), Some("a"));
    assert_eq!(pop_all(&mut s, 10.0), ["b", "c", "d"]);
}

#[test]
fn done_many_ends_each_key_as_done_would_and_a_dirty_one_comes_back() {
    let mut s = default();
    for k in ["a", "b", "c"] {
        add(&mut s, k, 0.0, 0, 0.0);
    }
    assert_eq!(pop_all(&mut s, 0.0), ["a", "b", "c"]);
    add(&mut s, "b", 0.0, 0, 1.0); // triggered while in flight: one follow-up
    s.done_many(["a", "b", "c"], 2.0).unwrap();
    s.check_consistency().unwrap();
    assert_eq!((s.len(), s.in_flight()), (1, 0));
    assert!(s.contains("b") && !s.contains("a") && !s.contains("c"));
    let st = s.stats(2.0).unwrap();
    assert_eq!((st.counters.done, st.work_duration.count), (3, 3));
    assert_eq!(st.work_duration.sum, 6.0);
}

#[test]
fn done_many_stops_at_the_first_key_not_in_flight() {
    let mut s = default();
    for k in ["a", "b"] {
        add(&mut s, k, 0.0, 0, 0.0);
    }
    assert_eq!(pop_all(&mut s, 0.0), ["a", "b"]);
    let err = s.done_many(["a", "x", "b"], 1.0).unwrap_err();
    assert_eq!(err, Error::NotInFlight("x".into()));
    s.check_consistency().unwrap();
    assert!(!s.is_in_flight("a") && s.is_in_flight("b"));
    assert!(s.done_many(["b", "b"], 1.0).is_err());
    assert_eq!(s.in_flight(), 0);
}

/// A key raised into a priority where its group already has ready keys keeps its age, so it
/// becomes the group's first there: the level's oldest key must be it.
#[test]
fn a_raised_key_becomes_its_groups_first_at_the_new_priority() {
    let mut s = default();
    add_in(&mut s, Some("g"), "old", 0, 0.0);
    add_in(&mut s, Some("h"), "other", 1, 1.0);
    add_in(&mut s, Some("g"), "new", 1, 2.0);
    add_in(&mut s, Some("g"), "old", 1, 3.0);
    s.check_consistency().unwrap();
    assert_eq!(
        s.next_ready_at(),
        Some(0.0),
        "the raised key is the oldest ready key"
    );
    // h joined the level first, so it has the first turn; inside g the raised key is first.
    assert_eq!(pop_all(&mut s, 3.0), ["other", "old", "new"]);
}

// ---- a cap on keys in flight per group ------------------------------------------------------

fn capped(cap: usize) -> Scheduler {
    sched(Config {
        group_concurrency: cap,
        max_wait: f64::INFINITY,
        ..Config::default()
    })
}

fn add_group(s: &mut Scheduler, group: &str, n: usize, priority: i64, now: f64) {
    for i in 0..n {
        add_in(s, Some(group), &format!("{group}/{i}"), priority, now);
    }
}

/// A group with the cap in flight is held: the other groups are served as if it had no
/// ready keys, and once one of its keys is done it is served again.
#[test]
fn a_group_at_the_cap_is_held_and_the_others_are_served() {
    let mut s = capped(2);
    add_group(&mut s, "a", 5, 0, 0.0);
    add_group(&mut s, "b", 2, 0, 0.0);
    add_in(&mut s, None, "plain", 0, 0.0);
    let got: Vec<String> = (0..6).filter_map(|_| pop(&mut s, 0.0)).collect();
    // a reaches 2 in flight after a/1: held; b after b/1; keys without a group are not capped.
    assert_eq!(got, ["a/0", "b/0", "plain", "a/1", "b/1"]);
    assert_eq!(s.in_flight(), 5);
    done(&mut s, "a/0", 1.0);
    assert_eq!(pop(&mut s, 1.0).as_deref(), Some("a/2"));
    assert_eq!(pop(&mut s, 1.0), None, "held again at 2 in flight");
    done(&mut s, "b/0", 1.0);
    assert_eq!(pop(&mut s, 1.0), None, "b has no ready keys left");
    done(&mut s, "a/1", 1.0);
    assert_eq!(pop_all(&mut s, 1.0), ["a/3"]);
}

/// `pop_many` counts the keys it takes against their groups before it starts them.
#[test]
fn pop_many_holds_a_group_within_one_batch() {
    let mut s = capped(2);
    add_group(&mut s, "a", 5, 0, 0.0);
    add_group(&mut s, "b", 5, 0, 0.0);
    assert_eq!(pop_all(&mut s, 0.0), ["a/0", "b/0", "a/1", "b/1"]);
    s.done_many(["a/0", "b/1"], 1.0).unwrap();
    s.check_consistency().unwrap();
    assert_eq!(pop_all(&mut s, 1.0), ["a/2", "b/2"]);
}

/// A released group joins the ring at the back, like a group that just got its first
/// ready key: the groups that waited meanwhile go first.
#[test]
fn a_released_group_rejoins_the_ring_at_the_back() {
    let mut s = capped(1);
    for g in ["a", "b", "c", "d"] {
        add_group(&mut s, g, 2, 0, 0.0);
    }
    assert_eq!(pop(&mut s, 0.0).as_deref(), Some("a/0"));
    done(&mut s, "a/0", 1.0);
    // a was held while b, c and d kept their places: it comes back behind them.
    let got: Vec<String> = (0..4).filter_map(|_| pop(&mut s, 1.0)).collect();
    assert_eq!(got, ["b/0", "c/0", "d/0", "a/1"]);
}

/// A group held while it is the front, in the middle of its turn, hands the turn on; on
/// release it starts a fresh turn of its weight.
#[test]
fn weights_and_caps_a_held_front_hands_its_turn_on() {
    let mut s = capped(2);
    s.set_group_weight("a", 3).unwrap();
    add_group(&mut s, "a", 6, 0, 0.0);
    add_group(&mut s, "b", 6, 0, 0.0);
    // a's turn is 3 keys, but it is held after 2; b's turn (weight 1) comes, then b again
    // (alone in the ring), until it is held too.
    let got: Vec<String> = (0..5).filter_map(|_| pop(&mut s, 0.0)).collect();
    assert_eq!(got, ["a/0", "a/1", "b/0", "b/1"]);
    done(&mut s, "b/0", 1.0);
    done(&mut s, "a/0", 1.0);
    // b rejoined first, then a behind it: b takes its turn of 1 (and is held), then a takes
    // one key (held again at 2).
    assert_eq!(pop_all(&mut s, 1.0), ["b/2", "a/2"]);
    s.done_many(["a/1", "a/2"], 2.0).unwrap();
    // a is alone in the ring with a fresh turn of 3, and the cap ends it after 2.
    assert_eq!(pop_all(&mut s, 2.0), ["a/3", "a/4"]);
}

/// A level whose ready keys all belong to held groups is skipped: a lower priority is
/// served (no head-of-line blocking across levels), and the level comes back on release.
#[test]
fn a_level_with_only_held_groups_is_skipped_to_a_lower_priority() {
    let mut s = capped(1);
    add_group(&mut s, "hi", 3, 5, 0.0);
    add_in(&mut s, Some("lo"), "lo/0", 0, 0.0);
    add_in(&mut s, Some("lo"), "lo/1", 0, 0.0);
    assert_eq!(pop(&mut s, 0.0).as_deref(), Some("hi/0"));
    assert_eq!(pop(&mut s, 0.0).as_deref(), Some("lo/0"));
    assert_eq!(pop(&mut s, 0.0), None);
    // A key of the held group raised to yet another priority stays held there.
    add_in(&mut s, None, "hi/2", 9, 0.0);
    assert_eq!(pop(&mut s, 0.0), None);
    done(&mut s, "hi/0", 1.0);
    assert_eq!(
        pop(&mut s, 1.0).as_deref(),
        Some("hi/2"),
        "priority 9 first"
    );
    done(&mut s, "lo/0", 1.0);
    assert_eq!(pop(&mut s, 1.0).as_deref(), Some("lo/1"));
    done(&mut s, "hi/2", 2.0);
    assert_eq!(pop_all(&mut s, 2.0), ["hi/1"]);
}

/// `max_wait` looks at the oldest key that can be served: a held group's overdue key does
/// not put its level first, and `next_ready_at` does not report it.
#[test]
fn max_wait_and_next_ready_at_ignore_held_keys() {
    let mut s = sched(Config {
        group_concurrency: 1,
        max_wait: 10.0,
        ..Config::default()
    });
    add_in(&mut s, Some("a"), "a/0", 0, 0.0);
    add_in(&mut s, Some("a"), "a/1", 0, 0.0);
    assert_eq!(pop(&mut s, 0.0).as_deref(), Some("a/0"));
    assert_eq!(s.next_ready_at(), None, "a/1 is held");
    s.add_in(Some("w"), "w/0", 50.0, 0, 0.0).unwrap();
    assert_eq!(
        s.next_ready_at(),
        Some(50.0),
        "the waiting key, not the held one"
    );
    add_in(&mut s, Some("c"), "c/lo", 0, 19.0);
    add_in(&mut s, Some("b"), "b/hi", 1, 20.0);
    assert_eq!(s.next_ready_at(), Some(19.0));
    // a/1 has waited 21 s > max_wait, but it is held: priority order serves b/hi first.
    assert_eq!(pop(&mut s, 21.0).as_deref(), Some("b/hi"));
    assert_eq!(pop(&mut s, 21.0).as_deref(), Some("c/lo"));
    assert_eq!(pop(&mut s, 21.0), None);
    assert_eq!(s.stats(21.0).unwrap().oldest_ready_age, 0.0);
    done(&mut s, "a/0", 22.0);
    assert_eq!(s.next_ready_at(), Some(0.0), "released: ready since 0");
    assert_eq!(pop(&mut s, 22.0).as_deref(), Some("a/1"));
}

/// Held only affects popping: a held group's keys can be added, merged, made dirty and
/// raised; a dirty key's follow-up goes back to its group's queue after `done`.
#[test]
fn a_held_groups_keys_are_still_added_merged_and_raised() {
    let mut s = capped(1);
    add_group(&mut s, "a", 3, 0, 0.0);
    add_in(&mut s, Some("b"), "b/0", 0, 0.0);
    assert_eq!(pop(&mut s, 0.0).as_deref(), Some("a/0"));
    add_in(&mut s, Some("a"), "a/0", 0, 0.5); // dirty
    add_in(&mut s, Some("a"), "a/1", 0, 0.5); // merged
    add_in(&mut s, Some("a"), "a/2", 3, 0.5); // raised, still held
    add_in(&mut s, Some("a"), "a/3", 3, 0.5); // new
    s.forget("a/0"); // resets failures only: a/0 stays in flight, a stays held
    assert!(s.is_in_flight("a/0"));
    assert_eq!(pop_all(&mut s, 1.0), ["b/0"]);
    done(&mut s, "a/0", 2.0);
    // Released: priority 3 first (a/2, ready since 0, then a/3); then a is held again.
    assert_eq!(pop_all(&mut s, 2.0), ["a/2"]);
    done(&mut s, "a/2", 3.0);
    assert_eq!(pop_all(&mut s, 3.0), ["a/3"]);
    done(&mut s, "a/3", 4.0);
    // a/1, then the follow-up of a/0 (ready since its done at 2).
    assert_eq!(pop_all(&mut s, 4.0), ["a/1"]);
    done(&mut s, "a/1", 5.0);
    assert_eq!(pop_all(&mut s, 5.0), ["a/0"]);
    done(&mut s, "a/0", 6.0);
    done(&mut s, "b/0", 6.0);
    assert_eq!((s.groups(), s.len(), s.in_flight()), (0, 0, 0));
}

/// A mixed workload with a cap, checked step by step: no named group ever has more than
/// the cap in flight (counted here, not by the scheduler), and a pop that hands out nothing
/// with a free slot leaves only keys of groups at the cap.
#[test]
fn caps_hold_under_a_random_workload() {
    for cap in [1usize, 2, 3] {
        let mut s = sched(Config {
            concurrency: 6,
            group_concurrency: cap,
            max_wait: 1.0,
            seed: 5,
            ..Config::default()
        });
        s.set_group_weight("g1", 2).unwrap();
        let mut rng = SplitMix64::new(cap as u64);
        let groups = [None, Some("g0"), Some("g1"), Some("g2")];
        let mut running: Vec<String> = Vec::new();
        let mut group_of: std::collections::HashMap<String, Option<&str>> = Default::default();
        let mut now = 0.0;
        for _ in 0..6_000 {
            now += rng.next_unit() * 0.05;
            let i = rng.next_u64() % 40;
            let g = groups[(i % 4) as usize];
            let k = format!("k{i}");
            match rng.next_u64() % 5 {
                0 | 1 => {
                    let after = if rng.next_u64() % 2 == 0 { 0.0 } else { 0.3 };
                    let prio = (rng.next_u64() % 3) as i64;
                    s.add_in(g, &k, after, prio, now).unwrap();
                    group_of.entry(k).or_insert(g);
                }
                2 => {
                    let asked = 1 + 2 * (rng.next_u64() % 2) as usize;
                    let got: Vec<String> = if asked == 1 {
                        s.pop(now).unwrap().map(str::to_owned).into_iter().collect()
                    } else {
                        let mut out = Vec::new();
                        s.pop_many(asked, now, |k| out.push(k.to_owned())).unwrap();
                        out
                    };
                    running.extend(got.iter().cloned());
                    if got.len() < asked && running.len() < 6 {
                        // Nothing more handed out with a slot free: every ready key is of a
                        // group at the cap.
                        for (key, g) in &group_of {
                            if s.inspect(key, now).unwrap().map(|i| i.state)
                                == Some(KeyState::Ready)
                            {
                                let flying = running
                                    .iter()
                                    .filter(|r| group_of[*r] == *g && g.is_some())
                                    .count();
                                assert_eq!(flying, cap, "{key} of {g:?} was held back");
                            }
                        }
                    }
                }
                _ => {
                    if !running.is_empty() {
                        let j = (rng.next_u64() % running.len() as u64) as usize;
                        let k = running.swap_remove(j);
                        s.done(&k, None, rng.next_u64() % 4 == 0, None, now)
                            .unwrap();
                        if !s.contains(&k) {
                            group_of.remove(&k);
                        }
                    }
                }
            }
            for g in groups.iter().flatten() {
                let flying = running.iter().filter(|r| group_of[*r] == Some(*g)).count();
                assert!(flying <= cap, "{g} has {flying} in flight, cap {cap}");
            }
            assert!(s.in_flight() <= 6);
            s.check_consistency().unwrap();
        }
    }
}

#[test]
fn a_cap_above_u32_is_refused() {
    let err = Scheduler::new(Config {
        group_concurrency: MAX_GROUP_CONCURRENCY + 1,
        ..Config::default()
    })
    .unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidConfig {
            name: "group_concurrency",
            ..
        }
    ));
    assert_eq!(
        sched(Config {
            group_concurrency: 3,
            ..Config::default()
        })
        .config()
        .group_concurrency,
        3
    );
}

/// A group's own cap, kept by name like a weight: set on a scheduler without a default cap
/// it starts the counting (keys already in flight count), lowering it below the keys in
/// flight holds the group until enough of them end, raising it releases the group to the
/// back of its rings, 0 lifts the cap for that group, `None` returns to the default.
#[test]
fn a_groups_own_cap_holds_and_releases_it_at_once() {
    let mut s = default();
    add_group(&mut s, "a", 6, 0, 0.0);
    add_group(&mut s, "b", 3, 0, 0.0);
    assert_eq!(pop_all(&mut s, 0.0).len(), 9, "no cap yet");
    add_group(&mut s, "a", 6, 0, 1.0); // a/0..a/5 dirty: they come back after done
    add_in(&mut s, Some("a"), "a/new", 0, 1.0);
    add_in(&mut s, Some("b"), "b/new", 0, 1.0);
    // a/new is ready in the ring: lowering a's cap below its keys in flight parks it.
    s.set_group_concurrency("a", Some(1)).unwrap();
    assert_eq!(s.group_concurrency_of("a"), 1);
    let held = s.inspect("a/new", 1.0).unwrap().unwrap();
    assert_eq!((held.held, held.group_concurrency), (true, Some(1)));
    assert_eq!(
        pop_all(&mut s, 1.0),
        ["b/new"],
        "a has 6 in flight, its cap is 1"
    );
    for i in 0..5 {
        done(&mut s, &format!("a/{i}"), 2.0);
        assert_eq!(
            pop_all(&mut s, 2.0),
            Vec::<String>::new(),
            "still 1 or more"
        );
    }
    done(&mut s, "a/5", 2.0);
    assert_eq!(
        pop_all(&mut s, 2.0),
        ["a/new"],
        "below the cap after the sixth"
    );
    // Raised: released at once (a/new and two more in flight).
    s.set_group_concurrency("a", Some(3)).unwrap();
    s.check_consistency().unwrap();
    assert_eq!(pop_all(&mut s, 3.0), ["a/0", "a/1"]);
    // No cap for a: the rest of its keys.
    s.set_group_concurrency("a", Some(0)).unwrap();
    assert_eq!(pop_all(&mut s, 3.0), ["a/2", "a/3", "a/4", "a/5"]);
    s.set_group_concurrency("a", None).unwrap();
    assert_eq!(s.group_concurrency_of("a"), 0, "the default: no cap");
    assert!(s.set_group_concurrency("", Some(1)).is_err());
    assert!(s
        .set_group_concurrency("a", Some(MAX_GROUP_CONCURRENCY + 1))
        .is_err());
}

/// With a default cap, a group's own cap overrides it, in both directions, and outlives
/// the group's keys.
#[test]
fn a_groups_own_cap_overrides_the_default_and_is_kept_by_name() {
    let mut s = capped(1);
    s.set_group_concurrency("wide", Some(3)).unwrap();
    s.set_group_concurrency("free", Some(0)).unwrap();
    add_group(&mut s, "wide", 5, 0, 0.0);
    add_group(&mut s, "free", 4, 0, 0.0);
    add_group(&mut s, "one", 4, 0, 0.0);
    let got = pop_all(&mut s, 0.0);
    let of = |g: &str| got.iter().filter(|k| k.starts_with(g)).count();
    assert_eq!((of("wide"), of("free"), of("one")), (3, 4, 1));
    for k in got {
        done(&mut s, &k, 1.0);
    }
    for k in pop_all(&mut s, 1.0) {
        done(&mut s, &k, 2.0);
    }
    assert_eq!(pop_all(&mut s, 2.0), ["one/2"]);
    done(&mut s, "one/2", 3.0);
    assert_eq!(pop_all(&mut s, 3.0), ["one/3"]);
    done(&mut s, "one/3", 4.0);
    assert_eq!(s.groups(), 0);
    assert_eq!(
        (
            s.group_concurrency_of("wide"),
            s.group_concurrency_of("one")
        ),
        (3, 1)
    );
}
