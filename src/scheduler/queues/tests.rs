//! The unit tests of `queues.rs`.

use super::waiting::Time;
use super::*;
use crate::scheduler::backoff::SplitMix64;
use crate::scheduler::groups::NO_GROUP;
use crate::scheduler::sorted::Sorted;
use std::sync::OnceLock;

/// Groups with none named: every level stays plain.
fn g() -> &'static Groups {
    static G: OnceLock<Groups> = OnceLock::new();
    G.get_or_init(Groups::default)
}

#[test]
fn ready_orders_by_priority_then_sequence() {
    let mut r = Ready::default();
    r.insert(0, 1, 10, NO_GROUP, g());
    r.insert(5, 2, 11, NO_GROUP, g());
    r.insert(0, 3, 12, NO_GROUP, g());
    r.insert(-100, 4, 13, NO_GROUP, g());
    assert_eq!(r.first(), Some((5, 2, 11)));
    assert_eq!(r.oldest(), Some((0, 1, 10)));
    r.remove(5, 2, 11, NO_GROUP, g());
    assert_eq!(r.first(), Some((0, 1, 10)));
    r.remove(0, 1, 10, NO_GROUP, g());
    assert_eq!(r.first(), Some((0, 3, 12)));
    assert_eq!(r.oldest(), Some((0, 3, 12)));
    r.remove(0, 3, 12, NO_GROUP, g());
    assert_eq!(r.oldest(), Some((-100, 4, 13)));
    r.remove(-100, 4, 13, NO_GROUP, g());
    assert_eq!(r.first(), None);
    assert_eq!(r.oldest(), None);
    assert!(r.heads.is_empty() && r.levels.is_empty());
    r.check_heads(g()).unwrap();
}

#[test]
fn heads_follow_an_older_entry_moved_into_a_level() {
    let mut r = Ready::default();
    r.insert(1, 5, 1, NO_GROUP, g());
    r.insert(1, 6, 2, NO_GROUP, g());
    // A key that became ready earlier (seq 3) is raised to priority 1.
    r.insert(1, 3, 3, NO_GROUP, g());
    assert_eq!(r.oldest(), Some((1, 3, 3)));
    r.remove(1, 3, 3, NO_GROUP, g());
    assert_eq!(r.oldest(), Some((1, 5, 1)));
    r.remove(1, 6, 2, NO_GROUP, g());
    assert_eq!(r.oldest(), Some((1, 5, 1)));
    assert_eq!(r.heads.len(), 1);
    r.check_heads(g()).unwrap();
}

#[test]
fn pop_first_serves_priority_order_and_keeps_heads() {
    let mut r = Ready::default();
    for (p, s) in [(0, 1), (2, 2), (0, 3), (2, 4), (1, 5)] {
        r.insert(p, s, s as u32, NO_GROUP, g());
    }
    let mut got = Vec::new();
    while let Some((p, s, _, _)) = r.pop_first(g()) {
        r.check_heads(g()).unwrap();
        got.push((p, s));
    }
    assert_eq!(got, [(2, 2), (2, 4), (1, 5), (0, 1), (0, 3)]);
    assert!(r.heads.is_empty() && r.levels.is_empty());
}

#[test]
fn tombstones_are_skipped_and_compacted() {
    let mut r = Ready::default();
    for s in 0..1000u64 {
        r.insert(0, s, s as u32, NO_GROUP, g());
    }
    // Remove three of every four entries from the middle: tombstones.
    for s in (1..1000u64).filter(|s| s % 4 != 0) {
        r.remove(0, s, s as u32, NO_GROUP, g());
        r.check_heads(g()).unwrap();
    }
    assert_eq!(r.len(), 250);
    let Level::Plain(level) = &r.levels[&Reverse(0)] else {
        panic!("a level without named groups is plain");
    };
    assert!(level.deque_len() < 600, "compacted: {}", level.deque_len());
    let got: Vec<u64> = std::iter::from_fn(|| r.pop_first(g()).map(|e| e.1)).collect();
    assert_eq!(got, (0..1000).step_by(4).collect::<Vec<_>>());
    assert!(r.levels.is_empty() && r.heads.is_empty());
}

#[test]
fn waiting_pops_only_due_entries_in_time_order() {
    let mut w = Waiting::default();
    w.insert(5.0, 1, 1);
    w.insert(3.0, 2, 2);
    w.insert(3.0, 0, 3);
    assert_eq!(w.first_at(), Some(3.0));
    assert_eq!(w.pop_due(2.9), None);
    assert_eq!(w.pop_due(3.0), Some((3.0, 3)));
    assert_eq!(w.pop_due(3.0), Some((3.0, 2)));
    assert_eq!(w.pop_due(4.0), None);
    w.remove(5.0, 1, 1);
    assert_eq!(w.len(), 0);
    w.check().unwrap();
}

#[test]
fn waiting_handles_out_of_order_times_and_removals() {
    let mut w = Waiting::default();
    let mut rng = SplitMix64::new(5);
    let mut model = BTreeSet::new();
    for seq in 0..5_000u64 {
        // Mostly increasing times, sometimes earlier ones, sometimes removals.
        let at = seq as f64 - if rng.next_u64() % 4 == 0 { 50.0 } else { 0.0 };
        w.insert(at, seq, seq as u32);
        model.insert((Time(at), seq, seq as u32));
        if rng.next_u64() % 3 == 0 {
            let victim = *model
                .iter()
                .nth((rng.next_u64() % model.len() as u64) as usize)
                .unwrap();
            model.remove(&victim);
            w.remove(victim.0 .0, victim.1, victim.2);
        }
        w.check().unwrap();
        assert_eq!(w.first_at(), model.first().map(|e| e.0 .0));
    }
    let got: Vec<_> = w.iter().collect();
    let want: Vec<_> = model.iter().map(|&(t, s, i)| (t.0, s, i)).collect();
    assert_eq!(got, want);
    let mut popped = 0;
    while w.pop_due(f64::MAX).is_some() {
        popped += 1;
    }
    assert_eq!(popped, want.len());
}

#[test]
fn waiting_check_checks_its_queue() {
    let mut w = Waiting::default();
    w.insert(1.0, 1, 1);
    w.check().unwrap();
    w.order.len = 0;
    assert!(w.check().is_err(), "the waiting queue is checked too");
}

#[test]
fn ready_lists_levels_from_the_highest_priority_each_in_age_order() {
    let mut r = Ready::default();
    for (p, s) in [(0, 4), (3, 5), (0, 6), (-1, 7), (3, 8)] {
        r.insert(p, s, s as u32 + 100, NO_GROUP, g());
    }
    // Raised from a lower level with its older sequence number: first in its new level.
    r.insert(3, 2, 102, NO_GROUP, g());
    // Removed from the middle of a level: a tombstone, not listed.
    r.remove(0, 6, 106, NO_GROUP, g());
    let got: Vec<Entry> = r.iter().map(|(p, s, i, _)| (p, s, i)).collect();
    assert_eq!(
        got,
        [
            (3, 2, 102),
            (3, 5, 105),
            (3, 8, 108),
            (0, 4, 104),
            (-1, 7, 107)
        ]
    );
}

#[test]
fn check_heads_finds_stale_heads_lengths_and_empty_levels() {
    let valid = || {
        let mut r = Ready::default();
        for (p, s) in [(0, 1), (2, 2), (0, 3)] {
            r.insert(p, s, s as u32, NO_GROUP, g());
        }
        r.check_heads(g()).unwrap();
        r
    };
    let mut r = valid();
    r.heads.insert((3, 0));
    assert!(
        r.check_heads(g()).is_err(),
        "a head that is not first in its level"
    );
    let mut r = valid();
    r.heads.remove(&(2, 2));
    assert!(r.check_heads(g()).is_err(), "a level without its head");
    let mut r = valid();
    r.len += 1;
    assert!(r.check_heads(g()).is_err(), "stale length");
    let mut r = valid();
    r.levels.insert(Reverse(7), Level::Plain(Sorted::default()));
    assert!(r.check_heads(g()).is_err(), "an empty level");
    let mut r = valid();
    r.held.insert(Reverse(7), Level::Plain(Sorted::default()));
    assert!(r.check_heads(g()).is_err(), "an empty held level");
    let mut r = valid();
    if let Some(Level::Plain(q)) = r.levels.get_mut(&Reverse(0)) {
        q.len += 1;
    }
    r.len += 1;
    assert!(
        r.check_heads(g()).is_err(),
        "a level that fails its own check"
    );
}
