//! The writes followed: each object from the moment a write to it starts, what the answer
//! says the cache must show (`Wrote`), the writes of a running reconcile kept under its
//! token, and whether the cache shows a write yet.

use std::collections::VecDeque;

use super::{target_key, Target, Written, Wrote};

impl Written {
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

    pub(super) fn all_shown(&self, writes: &[Wrote]) -> bool {
        writes.iter().all(|w| self.shown(w))
    }
}
