//! The caches' events: an object applied, deleted or listed (a list's items counting once
//! the list is complete), and the held keys each event catches up.

use super::{target_key, Listed, Seen, Written};

impl Written {
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
}
