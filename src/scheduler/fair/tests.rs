//! The unit tests of `fair.rs`.

use super::*;

fn groups(names: &[(&str, u32)]) -> (Groups, Vec<u32>) {
    let mut g = Groups::default();
    let mut ids = Vec::new();
    for &(name, weight) in names {
        g.set_weight(name, weight);
        ids.push(g.join(Some(name)));
    }
    (g, ids)
}

fn drain(level: &mut Fair, groups: &Groups) -> Vec<u32> {
    let mut out = Vec::new();
    while let Some((_, _, gid)) = level.pop(groups) {
        level.check(groups).unwrap();
        out.push(gid);
    }
    out
}

/// A level holding one entry of each group listed, in that order: sequence numbers 1, 2,
/// … (each in the slot of that number).
fn fair_level(g: &Groups, entries: &[u32]) -> Fair {
    let mut level = Fair::default();
    for (seq, &gid) in (1..).zip(entries) {
        level.insert(seq, seq as u32, gid, g);
    }
    level
}

/// The groups in ring order from the front, and the front's remaining turn.
fn ring(level: &Fair) -> (Vec<u32>, u32) {
    (level.ring(), level.turn)
}

#[test]
fn groups_take_turns_fifo_inside_each() {
    let (g, ids) = groups(&[("a", 1), ("b", 1), ("c", 1)]);
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    // a floods first, then b and c arrive.
    let mut level = fair_level(&g, &[a, a, a, a, a, b, c, b]);
    level.check(&g).unwrap();
    let mut seqs = Vec::new();
    while let Some((seq, _, _)) = level.pop(&g) {
        seqs.push(seq);
    }
    assert_eq!(seqs, [1, 6, 7, 2, 8, 3, 4, 5]);
    assert!(level.is_empty());
}

#[test]
fn a_weight_is_that_many_keys_in_a_row() {
    let (g, ids) = groups(&[("a", 3), ("b", 1)]);
    let (a, b) = (ids[0], ids[1]);
    // a: 1 3 5 7; b: 2 4 6 8.
    let mut level = fair_level(&g, &[a, b, a, b, a, b, a, b]);
    assert_eq!(drain(&mut level, &g), [a, a, a, b, a, b, b, b]);
}

#[test]
fn removing_the_front_group_hands_the_turn_on() {
    let (g, ids) = groups(&[("a", 2), ("b", 3), ("c", 1)]);
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    let mut level = fair_level(&g, &[a, b, c, b]);
    // a's only key leaves (raised to another priority): b is the front, with b's turn.
    level.remove(1, 1, a, &g);
    level.check(&g).unwrap();
    assert_eq!(ring(&level), (vec![b, c], 3));
    assert_eq!(level.oldest(), Some((2, 2)));
    // c leaves from the middle: the turn stays.
    level.remove(3, 3, c, &g);
    assert_eq!(ring(&level), (vec![b], 3));
    assert_eq!(drain(&mut level, &g), [b, b]);
}

#[test]
fn a_group_that_empties_rejoins_at_the_back() {
    let (g, ids) = groups(&[("a", 1), ("b", 1), ("c", 1)]);
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    let mut level = fair_level(&g, &[a, b, c]);
    assert_eq!(level.pop(&g), Some((1, 1, a)));
    level.insert(4, 4, a, &g);
    assert_eq!(ring(&level), (vec![b, c, a], 1));
    assert_eq!(drain(&mut level, &g), [b, c, a]);
}

#[test]
fn a_new_weight_applies_to_live_groups_from_their_next_turn() {
    let (mut g, ids) = groups(&[("a", 1), ("b", 1)]);
    let (a, b) = (ids[0], ids[1]);
    let mut level = fair_level(&g, &[a, a, a, a, b, b, b]);
    g.set_weight("a", 2);
    assert_eq!(g.weight(a), 2);
    // a's current turn was 1; its next is 2.
    assert_eq!(drain(&mut level, &g), [a, b, a, a, b, a, b]);
    g.set_weight("a", 1);
    assert_eq!(g.weight_of("a"), 1);
}

#[test]
fn upcoming_names_the_next_entry_and_the_one_after() {
    let (g, ids) = groups(&[("a", 2), ("b", 1)]);
    let (a, b) = (ids[0], ids[1]);
    assert_eq!(Fair::default().upcoming(), (None, None));
    // a's turn has two keys left: its second key comes next.
    let level = fair_level(&g, &[a, a, b]);
    assert_eq!(level.upcoming(), (Some(1), Some(2)));
    // b's turn has one key: a's first comes after it.
    let level = fair_level(&g, &[b, a, b]);
    assert_eq!(level.upcoming(), (Some(1), Some(2)));
    // The last key of a's turn: b's first, not a's second.
    let mut level = fair_level(&g, &[a, a, a, b]);
    level.pop(&g);
    assert_eq!((level.ring(), level.turn()), (vec![a, b], 1));
    assert_eq!(level.upcoming(), (Some(2), Some(4)));
    // A group alone in the ring at the end of its turn: its own second key.
    let (g, ids) = groups(&[("c", 1)]);
    let level = fair_level(&g, &[ids[0], ids[0]]);
    assert_eq!(level.upcoming(), (Some(1), Some(2)));
}

#[test]
fn turn_is_what_is_left_of_the_front_groups_turn() {
    let (g, ids) = groups(&[("a", 3), ("b", 1)]);
    let (a, b) = (ids[0], ids[1]);
    let mut level = fair_level(&g, &[a, a, a, a, b]);
    assert_eq!(level.turn(), 3);
    level.pop(&g);
    assert_eq!(level.turn(), 2);
}

#[test]
fn ahead_counts_the_turns_of_the_groups_before_a_key() {
    let (g, ids) = groups(&[("a", 2), ("b", 1)]);
    let (a, b) = (ids[0], ids[1]);
    // Served a1 a2 b4 a3: the key of sequence 3 is the first of a's second turn.
    let level = fair_level(&g, &[a, a, a, b]);
    assert_eq!(level.ahead(3, a, &g), (3, 2));
    assert_eq!(level.ahead(2, a, &g), (1, 1));
    assert_eq!(level.ahead(4, b, &g), (2, 0));
}

/// The message of the first thing `check` finds wrong.
fn broken(level: &Fair, g: &Groups) -> String {
    level.check(g).expect_err("a broken level passed its check")
}

#[test]
fn check_finds_a_ring_that_skips_or_repeats_a_group() {
    let (g, ids) = groups(&[("a", 1), ("b", 1), ("c", 1)]);
    let (a, b, c) = (ids[0], ids[1], ids[2]);
    let ring_error = "group ring does not list each group that is not held once";
    // b links back to a: c, not held, is left out of the ring.
    let mut level = fair_level(&g, &[a, b, c]);
    level.check(&g).unwrap();
    level.members.get_mut(&b).unwrap().next = a;
    assert_eq!(level.ring(), [a, b]);
    assert_eq!(broken(&level, &g), ring_error);
    // c links back to b: the walk never returns to the front, and stops after one
    // more step than there are groups, with b listed twice.
    let mut level = fair_level(&g, &[a, b, c]);
    level.members.get_mut(&c).unwrap().next = b;
    assert_eq!(level.ring(), [a, b, c, b]);
    assert_eq!(broken(&level, &g), ring_error);
}

#[test]
fn check_finds_a_spent_turn_and_stale_heads() {
    let (g, ids) = groups(&[("a", 1), ("b", 1)]);
    let (a, b) = (ids[0], ids[1]);
    let mut level = fair_level(&g, &[a, b]);
    level.turn = 0;
    assert_eq!(broken(&level, &g), "front group has no turn left");
    // A head in the tournament for a group that has no keys here (younger than the
    // oldest key, so the tournament's winner is still right).
    let mut level = fair_level(&g, &[a, b]);
    level.heads.set(7, 99, 99);
    assert_eq!(broken(&level, &g), "group heads are stale");
}
