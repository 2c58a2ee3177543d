//! A key's way from absent to ready and in flight: adds and merges, the ready order,
//! the concurrency limit, in flight, dirty and done.

use super::*;

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
