//! The unit tests of `inspect.rs`.

use super::*;
use crate::scheduler::Config;

fn sched(concurrency: usize) -> Scheduler {
    Scheduler::new(Config {
        concurrency,
        backoff_base: 1.0,
        backoff_max: 60.0,
        ..Config::default()
    })
    .unwrap()
}

fn state(s: &mut Scheduler, key: &str, now: f64) -> Option<KeyState> {
    s.inspect(key, now).unwrap().map(|i| i.state)
}

#[test]
fn an_absent_key_has_no_inspection() {
    let mut s = sched(0);
    assert_eq!(s.inspect("nope", 0.0).unwrap(), None);
    s.add("a", 0.0, 0, 0.0).unwrap();
    s.pop(0.0).unwrap();
    s.done("a", None, false, None, 1.0).unwrap();
    assert_eq!(s.inspect("a", 1.0).unwrap(), None, "done and dropped");
}

#[test]
fn each_state_with_its_times() {
    let mut s = sched(0);
    s.add("w", 5.0, 3, 10.0).unwrap();
    let w = s.inspect("w", 11.0).unwrap().unwrap();
    assert_eq!(w.state, KeyState::Waiting);
    assert_eq!((w.ready_at, w.since, w.priority), (Some(15.0), None, 3));
    assert_eq!(w.ahead_at_priority, None);
    // Its ready time passes: inspecting promotes it, ready since its ready time.
    let r = s.inspect("w", 16.0).unwrap().unwrap();
    assert_eq!(r.state, KeyState::Ready);
    assert_eq!((r.ready_at, r.since), (None, Some(15.0)));
    assert_eq!((r.ahead_at_priority, r.ahead_higher), (Some(0), Some(0)));
    assert_eq!(s.pop(17.0).unwrap(), Some("w"));
    let f = s.inspect("w", 18.0).unwrap().unwrap();
    assert_eq!((f.state, f.since), (KeyState::InFlight, Some(17.0)));
    s.add("w", 2.0, 7, 18.0).unwrap();
    let d = s.inspect("w", 18.5).unwrap().unwrap();
    assert_eq!(d.state, KeyState::InFlightDirty);
    assert_eq!((d.since, d.ready_at), (Some(17.0), Some(20.0)));
    assert_eq!((d.priority, d.follow_up_priority), (3, Some(7)));
    s.check_consistency().unwrap();
}

#[test]
fn failures_and_the_backoff_before_jitter() {
    let mut s = sched(0);
    s.add("k", 0.0, 0, 0.0).unwrap();
    let mut backoffs = Vec::new();
    for i in 0..8 {
        let now = 1000.0 * f64::from(i);
        s.pop(now).unwrap();
        s.done("k", None, true, None, now).unwrap();
        let k = s.inspect("k", now).unwrap().unwrap();
        assert_eq!(k.state, KeyState::Waiting);
        assert_eq!(k.failures, i as u32 + 1);
        let delay = k.ready_at.unwrap() - now;
        let nominal = k.backoff.unwrap();
        assert!(
            (0.8 * nominal..=1.2 * nominal).contains(&delay) || delay == 60.0,
            "{delay} vs {nominal}"
        );
        backoffs.push(nominal);
    }
    assert_eq!(backoffs, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]);
    // A success resets the count: no backoff.
    s.pop(9000.0).unwrap();
    s.done("k", Some(5.0), false, None, 9000.0).unwrap();
    let k = s.inspect("k", 9000.0).unwrap().unwrap();
    assert_eq!((k.failures, k.backoff), (0, None));
}

#[test]
fn position_counts_the_keys_ahead_at_the_priority_and_above() {
    let mut s = sched(1);
    for (i, key) in ["a", "b", "c", "d"].iter().enumerate() {
        s.add(key, 0.0, 0, i as f64).unwrap();
    }
    s.add("hi", 0.0, 5, 4.0).unwrap();
    let ahead = |s: &mut Scheduler, k: &str| {
        let i = s.inspect(k, 5.0).unwrap().unwrap();
        (i.ahead_at_priority.unwrap(), i.ahead_higher.unwrap())
    };
    assert_eq!(ahead(&mut s, "a"), (0, 1));
    assert_eq!(ahead(&mut s, "d"), (3, 1));
    assert_eq!(ahead(&mut s, "hi"), (0, 0));
    // "b" leaves the middle of the level (raised to priority 5, keeping its age): a
    // tombstone at level 0 that the rank must not count, an older entry at level 5.
    s.add("b", 0.0, 5, 5.0).unwrap();
    assert_eq!(ahead(&mut s, "d"), (2, 2));
    assert_eq!(ahead(&mut s, "b"), (0, 0), "older than hi, so first");
    assert_eq!(ahead(&mut s, "hi"), (1, 0));
    assert_eq!(s.pop(6.0).unwrap(), Some("b"));
    assert_eq!(state(&mut s, "hi", 6.0), Some(KeyState::Ready));
    assert_eq!(ahead(&mut s, "hi"), (0, 0));
    assert_eq!(ahead(&mut s, "c"), (1, 1));
    s.check_consistency().unwrap();
}

#[test]
fn position_matches_the_serving_order_under_churn() {
    // Many keys at three priorities, some raised and some popped: each ready key's
    // position is its index in the order `pop` would serve them (max_wait is far off).
    let mut s = sched(0);
    let mut rng = super::super::SplitMix64::new(3);
    for i in 0..300u64 {
        let p = (rng.next_u64() % 3) as i64;
        s.add(&format!("k{i}"), 0.0, p, i as f64 * 1e-3).unwrap();
        if rng.next_u64() % 5 == 0 {
            let j = rng.next_u64() % (i + 1);
            s.add(&format!("k{j}"), 0.0, 2, i as f64 * 1e-3).unwrap();
        }
    }
    let order: Vec<(i64, u64, u32, u32)> = s.ready.iter().collect();
    for (pos, &(p, _, idx, _)) in order.iter().enumerate() {
        let key = s.records.key(idx).to_string();
        let i = s.inspect(&key, 1.0).unwrap().unwrap();
        assert_eq!(i.priority, p);
        let (at, higher) = (i.ahead_at_priority.unwrap(), i.ahead_higher.unwrap());
        assert_eq!(at + higher, pos, "{key}");
    }
}

/// With fair groups and weights, each ready key's position is the exact number of pops
/// before it: inspect every ready key, then pop them all and compare.
#[test]
fn position_on_a_fair_level_is_the_exact_number_of_pops_before_it() {
    for seed in 0..20u64 {
        let mut s = sched(0);
        let mut rng = super::super::SplitMix64::new(seed);
        s.set_group_weight("a", 3).unwrap();
        s.set_group_weight("c", 2).unwrap();
        let groups = [Some("a"), Some("b"), Some("c"), None];
        for i in 0..120u64 {
            let g = groups[(rng.next_u64() % 4) as usize];
            let p = (rng.next_u64() % 2) as i64;
            let now = i as f64 * 1e-3;
            s.add_in(g, &format!("k{i}"), 0.0, p, now).unwrap();
            // Some pops mid-way, so the front group is part-way through its turn.
            if rng.next_u64() % 7 == 0 {
                s.pop(now).unwrap();
            }
            if rng.next_u64() % 9 == 0 {
                let j = rng.next_u64() % (i + 1);
                s.add(&format!("k{j}"), 0.0, 1, now).unwrap();
            }
        }
        let keys: Vec<String> = s
            .ready
            .iter()
            .map(|(_, _, idx, _)| s.records.key(idx).to_string())
            .collect();
        // (position, key, rank in its group, (priority, group)).
        let mut want = Vec::new();
        for key in &keys {
            let i = s.inspect(key, 1.0).unwrap().unwrap();
            let pos = i.ahead_at_priority.unwrap() + i.ahead_higher.unwrap();
            let class = (i.priority, i.group);
            want.push((pos, key.clone(), i.ahead_in_group.unwrap(), class));
        }
        want.sort();
        assert!(
            want.iter().enumerate().all(|(i, w)| w.0 == i),
            "seed {seed}"
        );
        let popped: Vec<String> =
            std::iter::from_fn(|| s.pop(1.0).unwrap().map(str::to_owned)).collect();
        let order: Vec<&String> = want.iter().map(|w| &w.1).collect();
        assert_eq!(popped.iter().collect::<Vec<_>>(), order, "seed {seed}");
        for (pos, key, in_group, class) in &want {
            let before = want[..*pos].iter().filter(|w| &w.3 == class).count();
            assert_eq!(*in_group, before, "{key}");
        }
    }
}

#[test]
fn a_key_and_the_summary_name_the_groups() {
    let mut s = sched(1);
    s.set_group_weight("big", 4).unwrap();
    for i in 0..5 {
        s.add_in(Some("big"), &format!("big/{i}"), 0.0, 0, 0.0)
            .unwrap();
    }
    s.add_in(Some("small"), "small/0", 0.0, 0, 1.0).unwrap();
    s.add_in(None, "plain", 30.0, 0, 1.0).unwrap();
    assert_eq!(s.pop(2.0).unwrap(), Some("big/0"));
    let i = s.inspect("small/0", 2.0).unwrap().unwrap();
    assert_eq!(i.group.as_deref(), Some("small"));
    // big has 3 keys left of its turn of 4: they go first.
    assert_eq!((i.ahead_at_priority, i.ahead_in_group), (Some(3), Some(0)));
    let b = s.inspect("big/4", 2.0).unwrap().unwrap();
    assert_eq!((b.ahead_at_priority, b.ahead_in_group), (Some(4), Some(3)));
    let f = s.inspect("big/0", 2.0).unwrap().unwrap();
    assert_eq!(
        (f.state, f.group.as_deref()),
        (KeyState::InFlight, Some("big"))
    );
    let w = s.inspect("plain", 2.0).unwrap().unwrap();
    assert_eq!((w.state, w.group), (KeyState::Waiting, None));
    let q = s.queue_summary(2.0).unwrap();
    let counts = |g: &GroupCounts| (g.group.clone(), g.keys, g.ready, g.in_flight, g.weight);
    assert_eq!(
        q.by_group.iter().map(counts).collect::<Vec<_>>(),
        [("big".into(), 5, 4, 1, 4), ("small".into(), 1, 1, 0, 1)]
    );
    assert!(q.by_group.iter().all(|g| !g.held), "no cap, nothing held");
    assert_eq!(q.group_concurrency, 0);
    assert_eq!(q.oldest_ready.unwrap().group.as_deref(), Some("big"));
    assert!(sched(0).queue_summary(0.0).unwrap().by_group.is_empty());
}

/// A ready key of a held group says so and is not in line (no position); the keys that
/// can be served do not count it; the summary marks the group held.
#[test]
fn a_held_key_says_so_and_is_not_counted_ahead_of_others() {
    let mut s = Scheduler::new(Config {
        group_concurrency: 1,
        max_wait: f64::INFINITY,
        ..Config::default()
    })
    .unwrap();
    for k in ["a/0", "a/1", "a/2"] {
        s.add_in(Some("a"), k, 0.0, 1, 0.0).unwrap();
    }
    s.add_in(Some("b"), "b/0", 0.0, 0, 1.0).unwrap();
    assert_eq!(s.pop(2.0).unwrap(), Some("a/0"));
    let a = s.inspect("a/2", 2.0).unwrap().unwrap();
    assert_eq!((a.state, a.held), (KeyState::Ready, true));
    assert_eq!(
        (a.ahead_at_priority, a.ahead_higher, a.ahead_in_group),
        (None, None, Some(1))
    );
    let b = s.inspect("b/0", 2.0).unwrap().unwrap();
    assert!(!b.held);
    assert_eq!(
        (b.ahead_at_priority, b.ahead_higher),
        (Some(0), Some(0)),
        "b is next: a's keys at the higher priority are held"
    );
    let q = s.queue_summary(2.0).unwrap();
    let held = |g: &GroupCounts| (g.group.clone(), g.ready, g.in_flight, g.held);
    assert_eq!(
        q.by_group.iter().map(held).collect::<Vec<_>>(),
        [("a".into(), 2, 1, true), ("b".into(), 1, 0, false)]
    );
    assert_eq!((q.group_concurrency, q.ready), (1, 3));
    assert_eq!(
        q.ready_by_priority,
        [(1, 2), (0, 1)],
        "held keys are ready keys"
    );
    assert_eq!(
        q.oldest_ready.unwrap().key,
        "b/0",
        "the oldest that can be served"
    );
    s.done("a/0", None, false, None, 3.0).unwrap();
    let a = s.inspect("a/2", 3.0).unwrap().unwrap();
    assert_eq!((a.held, a.ahead_at_priority), (false, Some(1)));
    s.check_consistency().unwrap();
}

#[test]
fn state_names_are_the_python_api_names() {
    let names = [
        KeyState::Waiting,
        KeyState::Ready,
        KeyState::InFlight,
        KeyState::InFlightDirty,
    ]
    .map(KeyState::as_str);
    assert_eq!(names, ["waiting", "ready", "in_flight", "in_flight_dirty"]);
}

#[test]
fn summary_counts_every_key_in_flight_at_one_priority() {
    let mut s = sched(0);
    for key in ["a", "b", "c"] {
        s.add(key, 0.0, 4, 1.0).unwrap();
    }
    s.add("d", 0.0, -1, 1.0).unwrap();
    for _ in 0..4 {
        s.pop(2.0).unwrap();
    }
    let q = s.queue_summary(3.0).unwrap();
    assert_eq!(q.in_flight_by_priority, [(4, 3), (-1, 1)]);
}

#[test]
fn summary_counts_states_priorities_and_the_oldest_ready_key() {
    let mut s = sched(2);
    let empty = s.queue_summary(0.0).unwrap();
    assert_eq!(
        (empty.ready, empty.oldest_ready, empty.next_ready_at),
        (0, None, None)
    );
    s.add("old", 0.0, -100, 1.0).unwrap();
    s.add("x", 0.0, 0, 2.0).unwrap();
    s.add("y", 0.0, 0, 3.0).unwrap();
    s.add("z", 0.0, 1, 4.0).unwrap();
    s.add("later", 30.0, 0, 4.0).unwrap();
    assert_eq!(s.pop(5.0).unwrap(), Some("z"));
    assert_eq!(s.pop(5.0).unwrap(), Some("x"));
    s.add("x", 0.0, 0, 6.0).unwrap();
    let q = s.queue_summary(7.0).unwrap();
    assert_eq!((q.ready, q.waiting, q.in_flight, q.dirty), (2, 1, 2, 1));
    assert_eq!(q.concurrency, 2);
    assert_eq!(q.ready_by_priority, [(0, 1), (-100, 1)]);
    assert_eq!(q.in_flight_by_priority, [(1, 1), (0, 1)]);
    assert_eq!(
        q.oldest_ready,
        Some(OldestReady {
            key: "old".into(),
            priority: -100,
            since: 1.0,
            group: None,
        })
    );
    assert_eq!((q.next_ready_at, q.now), (Some(34.0), 7.0));
    // The waiting key's time passes: counted as ready now.
    let q = s.queue_summary(40.0).unwrap();
    assert_eq!((q.ready, q.waiting, q.next_ready_at), (3, 0, None));
}

#[test]
fn a_bad_now_is_refused() {
    let mut s = sched(0);
    assert!(s.inspect("k", f64::NAN).is_err());
    assert!(s.queue_summary(f64::INFINITY).is_err());
}
