//! The state of the read-your-writes guard (`fastctl.runtime._written` and
//! `fastctl.runtime._read_your_writes` keep its rules and its Python side): the objects a
//! controller's reconciles wrote, followed through their caches' events, and the *fences*,
//! each object's last writes that its next reconcile waits for.
//!
//! Here rather than in Python because every change pays for it several times (the write,
//! its echo, the next start): a few lookups in Rust instead of some eighty Python calls.
//!
//! resourceVersions are compared for equality only (they are opaque: only servers since
//! Kubernetes 1.35 promise an order). A write is *shown*, caught up, once its cache applied
//! an event with exactly the version it was answered with, the object's deletion (by UID),
//! or, for a create, any event of the new UID. Objects are followed from the moment a write
//! to them starts (an echo may come before the answer), seeded with what the cache holds
//! then (a write that changes nothing is answered with that version).
//!
//! Not thread-safe on its own: the binding keeps it behind the Python object's borrow, and
//! the runtime calls it on the event loop's thread only.
//!
//! Its parts, each an `impl Written` of its own: the writes followed (`writes`), the
//! caches' events that show them (`events`) and the fences a reconcile waits on (`fences`).

use std::collections::VecDeque;

// hashbrown's default hasher (foldhash, seeded per process) rather than std's SipHash: every
// change looks its object up here several times (its write, its echo, the next start).
use hashbrown::{HashMap, HashSet};

pub mod answer;
mod events;
mod fences;
mod writes;

/// Versions remembered per followed object: the writes of a few reconciles and the other
/// writers' changes between them.
pub const SEEN: usize = 16;

/// Seconds after its deadline a fence is forgotten if its object is never reconciled again.
pub const FORGET_AFTER: f64 = 300.0;

/// The key of a followed object: its kind's index, namespace ("" if none) and name.
pub fn target_key(kind: u32, namespace: &str, name: &str) -> String {
    let mut key = String::with_capacity(namespace.len() + name.len() + 12);
    // The kind's decimal digits, without the formatting machinery (on every event).
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut rest = kind;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    key.extend(digits[at..].iter().map(|&d| char::from(d)));
    key.push('\0');
    key.push_str(namespace);
    key.push('\0');
    key.push_str(name);
    key
}

/// One write a reconcile made: to the object `target` names, answered with `uid` and
/// `version`; `created`: it made the object; `deleted`: a DELETE (shown once gone or, still
/// there, at `version`).
#[derive(Clone, Debug, PartialEq)]
pub struct Wrote {
    pub target: String,
    pub uid: String,
    pub version: Option<String>,
    pub created: bool,
    pub deleted: bool,
}

/// What an event did, as the cache applied it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Added or changed: applied now.
    Apply,
    /// Deleted: applied now.
    Delete,
    /// An item of a (re)list: applied when its list is complete.
    Listed,
}

/// A followed object: what its cache's events showed since it is followed.
#[derive(Debug, Default)]
struct Target {
    id: u64,
    refs: i64,
    versions: VecDeque<String>,
    uid: Option<String>,
    uids: Vec<String>,
    deleted: HashSet<String>,
    waiters: Vec<String>,
}

impl Target {
    fn present(&mut self, uid: &str, version: &str) {
        self.add_uid(uid);
        if self.versions.len() >= SEEN {
            self.versions.pop_front();
        }
        self.versions.push_back(version.to_owned());
    }

    fn add_uid(&mut self, uid: &str) {
        match &self.uid {
            None => self.uid = Some(uid.to_owned()),
            Some(first) if first == uid => {}
            Some(_) => {
                if !self.uids.iter().any(|u| u == uid) {
                    self.uids.push(uid.to_owned());
                }
            }
        }
    }

    fn has_uid(&self, uid: &str) -> bool {
        self.uid.as_deref() == Some(uid) || self.uids.iter().any(|u| u == uid)
    }

    fn has_version(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }
}

/// A list item held until its list is complete (the store swaps the list in then).
#[derive(Debug)]
struct Listed {
    target: String,
    id: u64,
    uid: String,
    version: String,
    namespace: String,
}

#[derive(Debug)]
struct Fence {
    deadline: f64,
    seq: u64,
    writes: Vec<Wrote>,
}

/// A reconcile that starts after it was held, or past its bound: what the caller counts
/// and logs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Started {
    /// Seconds it was held (0 if never).
    pub waited: f64,
    /// Whether it was held at all.
    pub was_held: bool,
    /// Started at the bound, on a cache that does not show `missing` of the writes.
    pub expired: bool,
    pub missing: usize,
}

/// What `hold` decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Hold {
    /// Start now; `Some` when there is something to count (`Started`).
    Start(Option<Started>),
    /// Wait at most this many seconds (woken when caught up).
    Wait(f64),
}

/// The followed objects and the fences of one controller run.
#[derive(Debug)]
pub struct Written {
    max_wait: f64,
    targets: HashMap<String, Target>,
    next_id: u64,
    creating: HashMap<u32, u32>,
    created: HashMap<u32, HashSet<String>>,
    listing: HashMap<u32, Vec<Listed>>,
    fences: HashMap<String, Fence>,
    /// Fences by age, the oldest first (entries of fences gone since are skipped).
    order: VecDeque<(String, u64)>,
    next_seq: u64,
    held: HashMap<String, f64>,
    next_sweep: f64,
    /// Whether someone wakes held keys (`bind`): without, nothing is worked out for it.
    waking: bool,
    /// The writes of reconciles still running, by the token each got at its first write
    /// (`record`): no object per write crosses to Python.
    pending: HashMap<u64, Vec<Wrote>>,
    next_token: u64,
}

impl Written {
    pub fn new(max_wait: f64) -> Self {
        Written {
            max_wait,
            targets: HashMap::new(),
            next_id: 0,
            creating: HashMap::new(),
            created: HashMap::new(),
            listing: HashMap::new(),
            fences: HashMap::new(),
            order: VecDeque::new(),
            next_seq: 0,
            held: HashMap::new(),
            next_sweep: f64::NEG_INFINITY,
            waking: false,
            pending: HashMap::new(),
            next_token: 0,
        }
    }

    pub fn set_waking(&mut self, waking: bool) {
        self.waking = waking;
    }

    /// Whether nothing is followed: no event can catch a write up (the common case between
    /// bursts, and of a cache whose kind nobody writes).
    pub fn idle(&self) -> bool {
        self.targets.is_empty() && self.creating.is_empty()
    }

    /// How many objects are followed.
    pub fn followed(&self) -> usize {
        self.targets.len()
    }

    /// How many objects have a fence.
    pub fn fenced_count(&self) -> usize {
        self.fences.len()
    }
}

#[cfg(test)]
mod tests;
