//! The one record per key: a slab of fixed-size records addressed by `u32`, and a hash index
//! from key to slot.
//!
//! The index (`super::index`) stores only slot numbers and a hash tag and compares the key
//! kept in the record, so each key's text is stored once. The ordered queues refer to records
//! by slot number too, which keeps their entries small and `Copy`.

use super::index::{reserve_huge, Index, MAX_SLOT};
use super::keys::{KeyText, KeyTexts};
use hashbrown::DefaultHashBuilder;
use std::hash::BuildHasher;

/// Where a key is in its life cycle. Absent keys have no record at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    /// A slot on the free list.
    #[default]
    Free,
    /// Queued with a ready time in the future (in the waiting queue).
    Waiting,
    /// Queued and ready (in the ready queue).
    Ready,
    /// Handed out by `pop`, no follow-up queued.
    Running,
    /// Handed out by `pop`, with a follow-up queued for when it is done.
    RunningDirty,
}

/// The per-key record. Its fields mean different things in different states (see `at`,
/// `seq` and `deadline`), which keeps it with the key's text, if short, to two cache lines,
/// 128 bytes aligned: the pair the CPU fetches together, so with many keys a record costs
/// one trip to memory (an unaligned one would straddle three lines).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Record {
    /// The key's text, inline if short (`Records::key`).
    pub key: KeyText,
    pub state: State,
    /// Whether `deadline` is set: the ready time comes from a debounce batch.
    pub batch: bool,
    /// Consecutive failures (reset by a success or `forget`).
    pub failures: u32,
    /// The key's fair group number (`groups::NO_GROUP` for none), set with the record.
    pub group: u32,
    /// Queued: the merged priority. In flight: the priority the key was popped with.
    pub priority: i64,
    /// A unique, increasing sequence number: the key's position in the waiting queue (ties of
    /// ready time), in the ready queue (FIFO), or among the in-flight keys (pop order).
    pub seq: u64,
    /// Waiting: the ready time. Ready: when it became ready. In flight: when it was popped.
    pub at: f64,
    /// Waiting with `batch`: the latest time a debounced add may push the ready time to.
    pub deadline: f64,
}

/// The slab of records plus the key index.
#[derive(Debug, Default)]
pub struct Records {
    slots: Vec<Record>,
    free: Vec<u32>,
    index: Index,
    texts: KeyTexts,
    hasher: DefaultHashBuilder,
}

/// More keys than a `u32` slot number can address (about 4 billion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyKeys;

impl Records {
    /// The slot of `key`, if it has a record.
    pub fn find(&self, key: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(key.as_bytes());
        let (slots, texts) = (&self.slots, &self.texts);
        self.index.find(hash, |i| {
            texts.bytes(&slots[i as usize].key) == key.as_bytes()
        })
    }

    /// The key of the record in `idx`.
    #[inline]
    pub fn key(&self, idx: u32) -> &str {
        self.texts.get(&self.slots[idx as usize].key)
    }

    /// Look every key up once and throw the answers away, so that the batch that follows
    /// finds their index entries and records in cache. With many keys each lookup is a cache
    /// miss or two; one after the other in this loop, the CPU overlaps the misses of
    /// different keys, where the batch's own loop (a lookup, then work that depends on it)
    /// waits for each in turn.
    ///
    /// New keys take their slots from the end of the free list, which after keys finished out
    /// of arrival order (fair groups) point all over the slab: those records are read here
    /// too, one per key.
    pub fn warm<'k>(&self, keys: impl Iterator<Item = &'k str>) {
        let mut found = 0u32;
        let mut n = 0;
        for key in keys {
            found ^= self.find(key).unwrap_or(0);
            n += 1;
        }
        for &i in self.free.iter().rev().take(n) {
            found ^= self.slots[i as usize].failures;
        }
        std::hint::black_box(found);
    }

    /// Read the record and key of every slot once and throw the values away, for the same
    /// reason as `warm`: the loop that then works on each record finds them in cache.
    pub fn warm_slots(&self, slots: &[u32]) {
        let mut seen = 0u64;
        for &i in slots {
            let rec = &self.slots[i as usize];
            // Both of the record's lines, and a long text's first and last byte (it may
            // straddle two lines).
            prefetch_line(rec);
            let key = self.texts.bytes(&rec.key);
            let ends = key.first().copied().unwrap_or(0) ^ key.last().copied().unwrap_or(0);
            seen ^= rec.at.to_bits() ^ u64::from(ends);
        }
        std::hint::black_box(seen);
    }

    /// Start loading the record in `idx` into cache without waiting for it (a hint: no
    /// effect on what any operation returns).
    #[inline]
    pub fn prefetch(&self, idx: u32) {
        if let Some(rec) = self.slots.get(idx as usize) {
            prefetch_line(rec);
        }
    }

    /// Start loading the text of the key in `idx` (reading its record, which should be in
    /// cache by then: see `prefetch`).
    #[inline]
    pub fn prefetch_key(&self, idx: u32) {
        if let Some(byte) = self
            .slots
            .get(idx as usize)
            .and_then(|r| self.texts.bytes(&r.key).first())
        {
            prefetch_line(byte);
        }
    }

    /// A new record for `key` (which must not have one), in state `Free` until the caller
    /// sets it.
    pub fn insert(&mut self, key: &str) -> Result<u32, TooManyKeys> {
        // The slot first: a refused key must not leave its text behind.
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(self.slots.len())
                    .ok()
                    .filter(|&i| i <= MAX_SLOT)
                    .ok_or(TooManyKeys)?;
                reserve_huge(&mut self.slots, 1);
                self.slots.push(Record::default());
                i
            }
        };
        self.slots[idx as usize] = Record {
            key: self.texts.insert(key),
            ..Record::default()
        };
        self.index.insert(self.hasher.hash_one(key.as_bytes()), idx);
        Ok(idx)
    }

    /// Drop the record in `idx`: the key becomes absent and the slot is reused later.
    pub fn remove(&mut self, idx: u32) {
        let slot = &mut self.slots[idx as usize];
        let hash = self.hasher.hash_one(self.texts.bytes(&slot.key));
        self.index.remove(hash, idx);
        self.texts.remove(&slot.key);
        *slot = Record::default();
        self.free.push(idx);
    }

    pub fn get(&self, idx: u32) -> &Record {
        &self.slots[idx as usize]
    }

    pub fn get_mut(&mut self, idx: u32) -> &mut Record {
        &mut self.slots[idx as usize]
    }

    /// Every slot number, free ones included.
    pub fn slots(&self) -> impl Iterator<Item = u32> {
        0..self.slots.len() as u32
    }

    /// Keys with a record (in any state).
    pub fn len(&self) -> usize {
        self.index.len()
    }
}

/// Ask the CPU to load the cache lines holding `value`.
#[inline]
fn prefetch_line<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..std::mem::size_of::<T>()).step_by(64) {
        let line = std::ptr::from_ref(value).cast::<i8>().wrapping_add(offset);
        // SAFETY: a prefetch only hints the cache; it never faults or writes, and `line` is
        // inside the live `value` in any case. SSE is part of the x86_64 baseline.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(line);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_fills_two_lines() {
        assert_eq!(std::mem::size_of::<Record>(), 128, "two cache lines");
    }

    #[test]
    fn insert_find_remove_reuses_slots() {
        let mut r = Records::default();
        let a = r.insert("a").unwrap();
        let b = r.insert("b").unwrap();
        assert_eq!(r.find("a"), Some(a));
        assert_eq!(r.find("b"), Some(b));
        assert_eq!(r.find("c"), None);
        r.remove(a);
        assert_eq!(r.find("a"), None);
        assert_eq!(r.len(), 1);
        let c = r.insert("c").unwrap();
        assert_eq!(c, a, "freed slot is reused");
        assert_eq!(r.find("c"), Some(c));
        assert_eq!(r.key(b), "b");
    }

    #[test]
    fn a_removed_keys_text_is_freed() {
        let mut r = Records::default();
        for i in 0..10_000 {
            let idx = r.insert(&format!("namespace/object-{i}")).unwrap();
            assert_eq!(r.key(idx), format!("namespace/object-{i}"));
            r.remove(idx);
        }
        assert!(r.texts.cells() <= 1, "{}", r.texts.cells());
    }

    #[test]
    fn survives_growth() {
        let mut r = Records::default();
        for i in 0..10_000 {
            r.insert(&format!("k{i}")).unwrap();
        }
        for i in 0..10_000 {
            assert_eq!(r.find(&format!("k{i}")), Some(i));
        }
    }
}
