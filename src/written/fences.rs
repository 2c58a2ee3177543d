//! The fences: a reconcile's writes that the next reconcile of its object waits for, held
//! until the cache shows them or the bound passes, and forgotten long after.

use super::{Fence, Hold, Started, Written, Wrote, FORGET_AFTER};

impl Written {
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
}
