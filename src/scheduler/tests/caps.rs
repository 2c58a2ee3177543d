//! A cap on the keys in flight per fair group: held, released, overridden.

use super::*;

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
