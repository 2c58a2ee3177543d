//! Failures and their backoff, debounce, and the checks on times, delays and settings.

use super::*;

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
