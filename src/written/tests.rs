use super::*;

const CM: u32 = 1;
const NS: &str = "default";
const WAIT: f64 = 5.0;

/// A write of ConfigMap `name`, answered with `version` (the object's uid `uid-NAME`).
fn write(w: &mut Written, name: &str, version: &str) -> Wrote {
    w.follow(CM, NS, name);
    let uid = format!("uid-{name}");
    w.answered(CM, NS, name, name, &uid, Some(version), true, false, false)
        .expect("recorded")
}

fn apply(w: &mut Written, name: &str, version: &str) -> Vec<String> {
    w.saw(CM, NS, name, &format!("uid-{name}"), version, Seen::Apply)
}

#[test]
fn a_write_is_shown_at_exactly_its_version() {
    let mut w = Written::new(WAIT);
    let wrote = write(&mut w, "c", "7");
    assert!(!w.shown(&wrote));
    apply(&mut w, "c", "6");
    assert!(!w.shown(&wrote)); // another version, older or newer: not this write
    apply(&mut w, "c", "70");
    assert!(!w.shown(&wrote)); // no numeric order: "70" is just another string
    apply(&mut w, "c", "7");
    assert!(w.shown(&wrote));
}

#[test]
fn the_next_start_waits_until_the_write_is_shown() {
    let mut w = Written::new(WAIT);
    w.set_waking(true);
    let wrote = write(&mut w, "c", "7");
    w.fence("default/a", vec![wrote], 0.0);
    assert_eq!(w.fenced_count(), 1);
    assert_eq!(w.hold("default/a", 1.0), Hold::Wait(WAIT - 1.0));
    assert!(apply(&mut w, "c", "6").is_empty());
    assert_eq!(apply(&mut w, "c", "7"), vec!["default/a".to_string()]); // woken
    let started = Started {
        waited: 1.0,
        was_held: true,
        expired: false,
        missing: 0,
    };
    assert_eq!(w.hold("default/a", 2.0), Hold::Start(Some(started)));
    assert_eq!(w.hold("default/a", 2.0), Hold::Start(None)); // used up
    assert_eq!((w.fenced_count(), w.followed()), (0, 0));
}

#[test]
fn a_fence_caught_up_before_its_start_is_consumed_silently() {
    let mut w = Written::new(WAIT);
    let wrote = write(&mut w, "c", "7");
    w.fence("default/a", vec![wrote], 0.0);
    apply(&mut w, "c", "7");
    assert_eq!(w.hold("default/a", 0.5), Hold::Start(None));
    assert_eq!((w.fenced_count(), w.followed()), (0, 0));
}

#[test]
fn a_write_shown_before_the_reconcile_ends_makes_no_fence() {
    let mut w = Written::new(WAIT);
    let wrote = write(&mut w, "c", "7");
    apply(&mut w, "c", "7");
    w.fence("default/a", vec![wrote], 0.0);
    assert_eq!((w.fenced_count(), w.followed()), (0, 0));
}

#[test]
fn at_the_bound_it_starts_and_counts_what_is_missing() {
    let mut w = Written::new(WAIT);
    let wrote = write(&mut w, "c", "7");
    w.fence("default/a", vec![wrote], 0.0);
    assert_eq!(w.hold("default/a", 1.0), Hold::Wait(4.0));
    let started = Started {
        waited: 4.0,
        was_held: true,
        expired: true,
        missing: 1,
    };
    assert_eq!(w.hold("default/a", 5.0), Hold::Start(Some(started)));
    assert_eq!((w.fenced_count(), w.followed()), (0, 0));
}

#[test]
fn a_delete_is_shown_by_the_objects_deletion() {
    let mut w = Written::new(WAIT);
    w.follow(CM, NS, "c");
    let wrote = w
        .answered(CM, NS, "c", "c", "uid-c", None, true, false, true)
        .unwrap();
    apply(&mut w, "c", "8");
    assert!(!w.shown(&wrote));
    w.saw(CM, NS, "c", "uid-c", "8", Seen::Delete);
    assert!(w.shown(&wrote));
}

#[test]
fn a_create_by_generate_name_counts_its_echo_that_beat_the_answer() {
    let mut w = Written::new(WAIT);
    assert!(!w.follow(CM, NS, ""));
    w.saw(CM, NS, "c-x1", "uid-new", "3", Seen::Apply); // not followed yet: its uid is kept
    let wrote = w
        .answered(CM, NS, "", "c-x1", "uid-new", Some("3"), true, true, false)
        .unwrap();
    assert!(w.shown(&wrote));
}

#[test]
fn a_lists_items_count_only_once_the_list_is_complete() {
    let mut w = Written::new(WAIT);
    let wrote = write(&mut w, "c", "7");
    w.saw(CM, NS, "c", "uid-c", "7", Seen::Listed);
    assert!(!w.shown(&wrote));
    w.list_frame(CM, false, None); // a new list starts: the unfinished one's items go
    w.list_frame(CM, true, None);
    assert!(!w.shown(&wrote));
    w.saw(CM, NS, "c", "uid-c", "7", Seen::Listed);
    w.list_frame(CM, true, Some("other")); // another namespace's list ends: not this one
    assert!(!w.shown(&wrote));
    w.list_frame(CM, true, Some(NS));
    assert!(w.shown(&wrote));
}

#[test]
fn only_the_last_versions_are_remembered() {
    let mut w = Written::new(WAIT);
    let wrote = write(&mut w, "c", "7");
    apply(&mut w, "c", "7");
    for v in 0..SEEN {
        assert!(w.shown(&wrote), "after {v} other versions");
        apply(&mut w, "c", &format!("x{v}"));
    }
    assert!(!w.shown(&wrote));
}

#[test]
fn the_fences_of_objects_never_reconciled_again_are_forgotten() {
    let mut w = Written::new(WAIT);
    let wrote = write(&mut w, "c", "7");
    w.fence("default/a", vec![wrote], 0.0);
    assert_eq!(w.hold("default/other", 100.0), Hold::Start(None));
    assert_eq!(w.fenced_count(), 1); // not yet long past its deadline
    assert_eq!(w.hold("default/other", 10_000.0), Hold::Start(None));
    assert_eq!((w.fenced_count(), w.followed()), (0, 0));
}

#[test]
fn a_new_fence_supersedes_the_unconsumed_one() {
    let mut w = Written::new(WAIT);
    let first = write(&mut w, "c", "7");
    w.fence("default/a", vec![first], 0.0);
    let second = write(&mut w, "d", "9");
    w.fence("default/a", vec![second], 1.0);
    assert_eq!(w.fenced_count(), 1);
    assert_eq!(w.followed(), 1); // "c" no longer followed
    apply(&mut w, "d", "9");
    assert_eq!(w.hold("default/a", 1.5), Hold::Start(None));
}

#[test]
fn a_failed_write_keeps_nothing_followed() {
    let mut w = Written::new(WAIT);
    w.follow(CM, NS, "c");
    assert_eq!(w.followed(), 1);
    assert!(w
        .answered(CM, NS, "c", "c", "", None, false, false, false)
        .is_none());
    assert_eq!(w.followed(), 0);
}

#[test]
fn a_released_key_leaves_nothing_behind() {
    let mut w = Written::new(WAIT);
    let wrote = write(&mut w, "c", "7");
    w.fence("default/a", vec![wrote], 0.0);
    assert!(matches!(w.hold("default/a", 0.0), Hold::Wait(_)));
    w.release("default/a");
    assert_eq!((w.fenced_count(), w.followed()), (0, 0));
    assert_eq!(w.hold("default/a", 0.0), Hold::Start(None));
}

#[test]
fn writes_recorded_under_a_token_are_the_fence_of_its_reconcile() {
    let mut w = Written::new(WAIT);
    let first = write(&mut w, "c", "7");
    let token = w.record(0, first);
    assert_ne!(token, 0);
    let second = write(&mut w, "d", "3");
    assert_eq!(w.record(token, second), token); // the same reconcile's next write
    let other = write(&mut w, "e", "1");
    let other_token = w.record(0, other);
    assert_ne!(other_token, token); // another reconcile's
    apply(&mut w, "c", "7");
    assert!(!w.pending_shown(token)); // d not yet
    w.fence_pending("default/a", token, 0.0);
    assert_eq!((w.fenced_count(), w.pending_count()), (1, 1));
    assert_eq!(w.hold("default/a", 1.0), Hold::Wait(WAIT - 1.0));
    apply(&mut w, "d", "3");
    assert_eq!(
        w.hold("default/a", 1.0),
        Hold::Start(Some(Started {
            waited: 0.0,
            was_held: true,
            expired: false,
            missing: 0,
        }))
    );
    w.fence_pending("default/b", 0, 1.0); // wrote nothing: no fence
    assert_eq!(w.fenced_count(), 0);
}

#[test]
fn a_target_key_names_its_kind_namespace_and_name_apart() {
    assert_eq!(target_key(0, "ns", "a"), "0\0ns\0a");
    assert_eq!(target_key(10, "", "a"), "10\0\0a");
    assert_eq!(target_key(u32::MAX, "n", "a"), "4294967295\0n\0a");
    // a kind's digits never run into the namespace: 1 + "1x" is not 11 + "x"
    assert_ne!(target_key(1, "1x", "a"), target_key(11, "x", "a"));
}
