//! Fair groups: turns, weights, priorities before groups, and `done_many`.

use super::*;

// ---- fair groups ------------------------------------------------------------------------

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
