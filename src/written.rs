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

use std::collections::VecDeque;

// hashbrown's default hasher (foldhash, seeded per process) rather than std's SipHash: every
// change looks its object up here several times (its write, its echo, the next start).
use hashbrown::{HashMap, HashSet};

pub mod answer;

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

    // -- the writes ---------------------------------------------------------------------

    /// A write begins: follow its object from now. `true`: it was not followed, and the
    /// caller seeds it with what its cache shows (`seed`). A create by `generateName` (no
    /// name yet) counts as in flight for its kind.
    pub fn follow(&mut self, kind: u32, namespace: &str, name: &str) -> bool {
        if name.is_empty() {
            *self.creating.entry(kind).or_insert(0) += 1;
            return false;
        }
        let key = target_key(kind, namespace, name);
        let mut new = false;
        let next_id = &mut self.next_id;
        let target = self.targets.entry(key).or_insert_with(|| {
            new = true;
            *next_id += 1;
            Target {
                id: *next_id,
                ..Target::default()
            }
        });
        target.refs += 1;
        new
    }

    /// What the cache showed of a newly followed object as its write began.
    pub fn seed(&mut self, kind: u32, namespace: &str, name: &str, uid: &str, version: &str) {
        if let Some(target) = self.targets.get_mut(&target_key(kind, namespace, name)) {
            target.uid = Some(uid.to_owned());
            target.versions = VecDeque::from([version.to_owned()]);
        }
    }

    /// A write ended. `name`: as it began ("" for a create by `generateName`); `target`:
    /// the object's name from the answer (or `name`); `recorded`: the answer is one a cache
    /// will show (the write succeeded, names an object, is inside the cache's selector).
    /// `version`: the answer's, or None for a DELETE that removed the object. Returns what
    /// the cache must show (None: nothing); it keeps its object followed until released.
    #[allow(clippy::too_many_arguments)]
    pub fn answered(
        &mut self,
        kind: u32,
        namespace: &str,
        name: &str,
        target: &str,
        uid: &str,
        version: Option<&str>,
        recorded: bool,
        created: bool,
        deleted: bool,
    ) -> Option<Wrote> {
        let mut shown = None;
        if name.is_empty() {
            let left = self
                .creating
                .get(&kind)
                .copied()
                .unwrap_or(1)
                .saturating_sub(1);
            if left > 0 {
                self.creating.insert(kind, left);
                shown = self.created.get(&kind).map(|s| s.contains(uid));
            } else {
                self.creating.remove(&kind);
                shown = self.created.remove(&kind).map(|s| s.contains(uid));
            }
        }
        let key = target_key(kind, namespace, target);
        if !name.is_empty() {
            if let Some(t) = self.targets.get_mut(&key) {
                t.refs -= 1; // the write's own reference; a record takes one again
            }
        }
        if !recorded || target.is_empty() || (uid.is_empty() && !deleted) {
            self.drop_if_unused(&key);
            return None;
        }
        let next_id = &mut self.next_id;
        let t = self.targets.entry(key.clone()).or_insert_with(|| {
            *next_id += 1;
            Target {
                id: *next_id,
                ..Target::default()
            }
        });
        if !uid.is_empty() && shown == Some(true) {
            t.add_uid(uid); // its create was shown before the answer came
        }
        t.refs += 1;
        Some(Wrote {
            target: key,
            uid: uid.to_owned(),
            version: version.map(str::to_owned),
            created,
            deleted,
        })
    }

    /// Keep `w` among the writes of the reconcile `token` names (0: its first; a new
    /// token is returned, which its next writes and its fence give again).
    pub fn record(&mut self, token: u64, w: Wrote) -> u64 {
        let token = if token == 0 {
            self.next_token += 1;
            self.next_token
        } else {
            token
        };
        self.pending.entry(token).or_default().push(w);
        token
    }

    /// Whether the cache has applied every write recorded under `token` (false if none).
    pub fn pending_shown(&self, token: u64) -> bool {
        self.pending
            .get(&token)
            .is_some_and(|writes| self.all_shown(writes))
    }

    /// The reconcile of `key` that recorded its writes under `token` ended at `now`: they
    /// are its fence (`fence`). A token with no writes (0) is nothing.
    pub fn fence_pending(&mut self, key: &str, token: u64, now: f64) {
        if let Some(writes) = self.pending.remove(&token) {
            self.fence(key, writes, now);
        }
    }

    /// How many reconciles have writes recorded and not yet fenced.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    fn drop_if_unused(&mut self, key: &str) {
        if self.targets.get(key).is_some_and(|t| t.refs <= 0) {
            self.targets.remove(key);
        }
    }

    /// Whether the cache has applied `w`.
    pub fn shown(&self, w: &Wrote) -> bool {
        let Some(target) = self.targets.get(&w.target) else {
            return false;
        };
        if !w.uid.is_empty() && target.deleted.contains(&w.uid) {
            return true;
        }
        let at_version = w.version.as_deref().is_some_and(|v| target.has_version(v));
        if w.deleted {
            return (w.uid.is_empty() && target.deleted.contains("")) || at_version;
        }
        (w.created && target.has_uid(&w.uid)) || at_version
    }

    fn all_shown(&self, writes: &[Wrote]) -> bool {
        writes.iter().all(|w| self.shown(w))
    }

    fn attach(&mut self, key: &str, writes: &[Wrote]) {
        for w in writes {
            if let Some(t) = self.targets.get_mut(&w.target) {
                if !t.waiters.iter().any(|k| k == key) {
                    t.waiters.push(key.to_owned());
                }
            }
        }
    }

    fn release_writes(&mut self, key: &str, writes: &[Wrote]) {
        for w in writes {
            let Some(t) = self.targets.get_mut(&w.target) else {
                continue;
            };
            t.refs -= 1;
            t.waiters.retain(|k| k != key);
            if t.refs <= 0 {
                self.targets.remove(&w.target);
            }
        }
    }

    // -- the caches' events -------------------------------------------------------------

    /// An event a cache of `kind` applied, of one object; returns the held keys it caught
    /// up (to be woken).
    pub fn saw(
        &mut self,
        kind: u32,
        namespace: &str,
        name: &str,
        uid: &str,
        version: &str,
        seen: Seen,
    ) -> Vec<String> {
        if self.targets.is_empty() && self.creating.is_empty() {
            return Vec::new();
        }
        let key = target_key(kind, namespace, name);
        let gone = seen == Seen::Delete;
        if !self.creating.is_empty()
            && !gone
            && !uid.is_empty()
            && self.creating.contains_key(&kind)
        {
            self.created.entry(kind).or_default().insert(uid.to_owned());
        }
        let Some(target) = self.targets.get_mut(&key) else {
            return Vec::new();
        };
        match seen {
            Seen::Listed => {
                let id = target.id;
                self.listing.entry(kind).or_default().push(Listed {
                    target: key,
                    id,
                    uid: uid.to_owned(),
                    version: version.to_owned(),
                    namespace: namespace.to_owned(),
                });
                Vec::new()
            }
            Seen::Delete => {
                target.deleted.insert(uid.to_owned());
                target.deleted.insert(String::new());
                self.woken_by(&key)
            }
            Seen::Apply => {
                target.present(uid, version);
                self.woken_by(&key)
            }
        }
    }

    /// A list frame of `kind`: its start (`done` false) or its end; `namespace` for one
    /// namespace's list of a set (its items only). At the end the items count (the store
    /// swapped them in); at a start the items of an earlier, unfinished list are dropped.
    pub fn list_frame(&mut self, kind: u32, done: bool, namespace: Option<&str>) -> Vec<String> {
        if self.targets.is_empty() && self.creating.is_empty() {
            return Vec::new();
        }
        let mine = match namespace {
            Some(ns) => {
                let Some(listed) = self.listing.get_mut(&kind) else {
                    return Vec::new();
                };
                let (mine, rest): (Vec<Listed>, Vec<Listed>) =
                    listed.drain(..).partition(|l| l.namespace == ns);
                *listed = rest;
                mine
            }
            None => self.listing.remove(&kind).unwrap_or_default(),
        };
        let mut woken = Vec::new();
        if done {
            for l in mine {
                let Some(target) = self.targets.get_mut(&l.target) else {
                    continue;
                };
                if target.id != l.id {
                    continue; // followed again since: the item was for the one before
                }
                target.present(&l.uid, &l.version);
                woken.extend(self.woken_by(&l.target));
            }
        }
        woken
    }

    /// The held keys whose fences name `target` and are caught up now.
    fn woken_by(&self, target: &str) -> Vec<String> {
        if !self.waking || self.held.is_empty() {
            return Vec::new();
        }
        let Some(t) = self.targets.get(target) else {
            return Vec::new();
        };
        t.waiters
            .iter()
            .filter(|k| self.held.contains_key(k.as_str()))
            .filter(|k| {
                self.fences
                    .get(k.as_str())
                    .is_some_and(|f| self.all_shown(&f.writes))
            })
            .cloned()
            .collect()
    }

    // -- the fences ---------------------------------------------------------------------

    /// The reconcile of `key` ended having made `writes`: they are its fence, until `now` +
    /// the bound (nothing if it wrote nothing, or the cache shows them all already).
    pub fn fence(&mut self, key: &str, writes: Vec<Wrote>, now: f64) {
        if writes.is_empty() {
            return;
        }
        if now >= self.next_sweep {
            self.expire(now);
        }
        if self.all_shown(&writes) {
            self.release_writes(key, &writes);
            return;
        }
        if let Some(old) = self.fences.remove(key) {
            self.release_writes(key, &old.writes); // no start consumed it: superseded
        }
        if self.held.contains_key(key) {
            self.attach(key, &writes);
        }
        self.next_seq += 1;
        let seq = self.next_seq;
        self.order.push_back((key.to_owned(), seq));
        let deadline = now + self.max_wait;
        self.fences.insert(
            key.to_owned(),
            Fence {
                deadline,
                seq,
                writes,
            },
        );
        if self.order.len() > 2 * self.fences.len() + 64 {
            let fences = &self.fences;
            self.order
                .retain(|(k, s)| fences.get(k).is_some_and(|f| f.seq == *s));
        }
    }

    /// The reconcile of `key` is about to start at `now`.
    pub fn hold(&mut self, key: &str, now: f64) -> Hold {
        let decision = match self.fences.get(key) {
            None => {
                self.held.remove(key);
                Hold::Start(None)
            }
            Some(fence) if !self.held.contains_key(key) && self.all_shown(&fence.writes) => {
                let fence = self.fences.remove(key).expect("present");
                self.release_writes(key, &fence.writes);
                Hold::Start(None)
            }
            Some(fence) => {
                let deadline = fence.deadline;
                if self.all_shown(&fence.writes) {
                    Hold::Start(self.start(key, now, false))
                } else if now >= deadline {
                    Hold::Start(self.start(key, now, true))
                } else {
                    if !self.held.contains_key(key) {
                        self.held.insert(key.to_owned(), now);
                        let writes = fence.writes.clone();
                        self.attach(key, &writes);
                    }
                    Hold::Wait(deadline - now)
                }
            }
        };
        if now >= self.next_sweep {
            self.expire(now); // after this key's own, which an expiry counts
        }
        decision
    }

    fn start(&mut self, key: &str, now: f64, expired: bool) -> Option<Started> {
        let fence = self.fences.remove(key).expect("a fence to start from");
        let missing = if expired {
            fence.writes.iter().filter(|w| !self.shown(w)).count()
        } else {
            0
        };
        self.release_writes(key, &fence.writes);
        let since = self.held.remove(key);
        if since.is_none() && !expired {
            return None;
        }
        Some(Started {
            waited: since.map_or(0.0, |s| now - s),
            was_held: since.is_some(),
            expired,
            missing,
        })
    }

    /// `key` will not start (its object is gone): forget its fence and hold.
    pub fn release(&mut self, key: &str) {
        self.held.remove(key);
        if let Some(fence) = self.fences.remove(key) {
            self.release_writes(key, &fence.writes);
        }
    }

    /// Forget the fences of objects not reconciled again long after their deadline.
    fn expire(&mut self, now: f64) {
        while let Some((key, seq)) = self.order.front() {
            let Some(fence) = self.fences.get(key).filter(|f| f.seq == *seq) else {
                self.order.pop_front(); // gone since
                continue;
            };
            if now - fence.deadline < FORGET_AFTER {
                self.next_sweep = fence.deadline + FORGET_AFTER;
                return;
            }
            let (key, _) = self.order.pop_front().expect("front");
            let fence = self.fences.remove(&key).expect("live");
            self.held.remove(&key);
            self.release_writes(&key, &fence.writes);
        }
        self.next_sweep = now + self.max_wait + FORGET_AFTER;
    }
}

#[cfg(test)]
mod tests;
