//! The key → slot index: an open-addressing hash table with linear probing whose entries
//! are single `u64`s, `(32-bit hash tag << 32) | (slot + 1)`, and 0 for an empty entry.
//!
//! Why not `hashbrown`: with many keys the scheduler is bound by cache misses, and a
//! `hashbrown` lookup touches two distant places (the control bytes and the bucket), while
//! here the tag that filters candidates and the slot number share one 8-byte entry, so a
//! lookup costs one miss in the table (plus the record, to compare the key). The table keeps
//! its load at most 1/2, so probe runs stay within a cache line or two, and deletes shift
//! the following entries back instead of leaving tombstones, so lookups never slow down.
//! The home position of an entry is derived from its tag, so growing the table and shifting
//! entries never needs the keys themselves.

/// Where an entry's probe run starts and what it is filtered by: the high 32 bits of the
/// key's 64-bit hash.
fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32
}

fn entry(tag: u32, slot: u32) -> u64 {
    (u64::from(tag) << 32) | (u64::from(slot) + 1)
}

fn entry_tag(e: u64) -> u32 {
    (e >> 32) as u32
}

fn entry_slot(e: u64) -> u32 {
    (e as u32) - 1
}

/// The largest slot number an entry can hold (`slot + 1` must fit in 32 bits).
pub const MAX_SLOT: u32 = u32::MAX - 1;

#[derive(Debug, Default)]
pub struct Index {
    entries: Vec<u64>,
    len: usize,
}

impl Index {
    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    fn home(&self, tag: u32) -> usize {
        tag as usize & self.mask()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The slot whose key matches, among the entries with this hash; `is_key(slot)` compares
    /// the key stored in that slot's record.
    pub fn find(&self, hash: u64, mut is_key: impl FnMut(u32) -> bool) -> Option<u32> {
        if self.entries.is_empty() {
            return None;
        }
        let tag = tag_of(hash);
        let mask = self.mask();
        let mut i = self.home(tag);
        loop {
            let e = self.entries[i];
            if e == 0 {
                return None;
            }
            if entry_tag(e) == tag && is_key(entry_slot(e)) {
                return Some(entry_slot(e));
            }
            i = (i + 1) & mask;
        }
    }

    /// Add `slot` under `hash` (its key must not be in the index yet).
    pub fn insert(&mut self, hash: u64, slot: u32) {
        debug_assert!(slot <= MAX_SLOT);
        if (self.len + 1) * 2 > self.entries.len() {
            self.grow();
        }
        self.place(entry(tag_of(hash), slot));
        self.len += 1;
    }

    fn place(&mut self, e: u64) {
        let mask = self.mask();
        let mut i = self.home(entry_tag(e));
        while self.entries[i] != 0 {
            i = (i + 1) & mask;
        }
        self.entries[i] = e;
    }

    fn grow(&mut self) {
        let capacity = (self.entries.len() * 2).max(16);
        let old = std::mem::replace(&mut self.entries, vec![0; capacity]);
        advise_huge_pages(self.entries.as_ptr().cast(), capacity * 8);
        for e in old.into_iter().filter(|&e| e != 0) {
            self.place(e);
        }
    }

    /// Remove the entry of `slot`, filed under `hash`.
    pub fn remove(&mut self, hash: u64, slot: u32) {
        if self.entries.is_empty() {
            return;
        }
        let target = entry(tag_of(hash), slot);
        let mask = self.mask();
        let mut i = self.home(tag_of(hash));
        loop {
            match self.entries[i] {
                0 => {
                    debug_assert!(false, "index entry missing");
                    return;
                }
                e if e == target => break,
                _ => i = (i + 1) & mask,
            }
        }
        self.len -= 1;
        // Backward-shift deletion: move later entries of the run into the hole when their
        // home position allows it, so no run is ever broken by an empty entry.
        loop {
            self.entries[i] = 0;
            let mut j = i;
            loop {
                j = (j + 1) & mask;
                let e = self.entries[j];
                if e == 0 {
                    return;
                }
                let home = self.home(entry_tag(e));
                // `e` may move to `i` unless its home lies cyclically in (i, j].
                let stays = if i <= j {
                    i < home && home <= j
                } else {
                    i < home || home <= j
                };
                if !stays {
                    self.entries[i] = e;
                    i = j;
                    break;
                }
            }
        }
    }

    /// Bytes allocated by the table.
    #[cfg(test)]
    pub fn allocated(&self) -> usize {
        self.entries.capacity() * 8
    }
}

/// Ask Linux to back a large allocation (`bytes` from `start`) with transparent huge pages:
/// lookups are random, so with 4 KiB pages nearly every one would also miss the TLB. Only a
/// hint, harmless if the kernel ignores it.
#[cfg(target_os = "linux")]
pub fn advise_huge_pages(start: *const u8, bytes: usize) {
    const HUGE: usize = 2 << 20;
    if bytes < 2 * HUGE {
        return;
    }
    let start = start as usize;
    let aligned = (start + HUGE - 1) & !(HUGE - 1);
    let end = (start + bytes) & !(HUGE - 1);
    if end > aligned {
        // SAFETY: [aligned, end) lies inside one live allocation (the caller's); madvise
        // only changes how the kernel backs those pages, never their contents.
        unsafe {
            libc::madvise(
                aligned as *mut libc::c_void,
                end - aligned,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub fn advise_huge_pages(_start: *const u8, _bytes: usize) {}

/// Make room in `v` for `additional` more elements, as `Vec::reserve` does, except that a
/// large new block is allocated fresh and offered to huge pages before the elements move in:
/// a block the allocator grows in place or moves (`mremap`) keeps the 4 KiB pages it had, so
/// advising after the growth left a slab of a million records almost all on small pages.
pub fn reserve_huge<T>(v: &mut Vec<T>, additional: usize) {
    let needed = v.len() + additional;
    if needed <= v.capacity() {
        return;
    }
    let capacity = needed.max(v.capacity() * 2).max(16);
    let bytes = capacity.saturating_mul(std::mem::size_of::<T>());
    if bytes < 4 << 20 {
        v.reserve(additional);
        return;
    }
    let mut fresh: Vec<T> = Vec::with_capacity(capacity);
    advise_huge_pages(fresh.as_ptr().cast(), bytes);
    fresh.append(v);
    *v = fresh;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_the_high_half_of_the_hash() {
        // The probe run starts from the tag: a tag that ignored the hash (a constant, or the
        // low half shifted out) would put every key in one run, correct but linear.
        assert_eq!(tag_of(0xDEAD_BEEF_0000_0001), 0xDEAD_BEEF);
        assert_eq!(tag_of(0x0000_0001_FFFF_FFFF), 1);
        assert_eq!(
            entry_tag(entry(tag_of(0x1234_5678_9ABC_DEF0), 7)),
            0x1234_5678
        );
    }

    #[test]
    fn reserve_huge_keeps_the_elements_through_a_fresh_block() {
        let mut v: Vec<u64> = (0..600_000).collect();
        v.shrink_to_fit();
        reserve_huge(&mut v, 1);
        assert!(v.capacity() >= 1_200_000, "doubles, in a new block");
        assert!(v.iter().copied().eq(0..600_000));
        let mut small: Vec<u8> = vec![1, 2, 3];
        reserve_huge(&mut small, 10);
        assert!(small.capacity() >= 13 && small == [1, 2, 3]);
    }
    use crate::scheduler::backoff::SplitMix64;
    use std::collections::HashMap;

    /// A model: key id → slot, with each key's hash chosen by the test (so collisions and
    /// long runs are easy to provoke).
    fn check(index: &Index, model: &HashMap<u64, u32>, hashes: &HashMap<u64, u64>) {
        assert_eq!(index.len(), model.len());
        for (&k, &slot) in model {
            let found = index.find(hashes[&k], |s| model.get(&k) == Some(&s));
            assert_eq!(found, Some(slot), "key {k}");
        }
    }

    /// 20,000 random inserts and removes of 500 keys whose tags `tag` draws, against a model.
    fn against_a_model(seed: u64, tag: impl Fn(u64) -> u64) {
        let mut rng = SplitMix64::new(seed);
        let mut index = Index::default();
        let mut model: HashMap<u64, u32> = HashMap::new();
        let mut hashes: HashMap<u64, u64> = HashMap::new();
        let mut next_slot = 0u32;
        for step in 0..20_000u64 {
            let k = rng.next_u64() % 500;
            let hash = *hashes
                .entry(k)
                .or_insert_with(|| tag(rng.next_u64()) << 32 | rng.next_u64() >> 32);
            if let Some(slot) = model.remove(&k) {
                index.remove(hash, slot);
                assert_eq!(index.find(hash, |s| s == slot), None);
            } else {
                model.insert(k, next_slot);
                index.insert(hash, next_slot);
                next_slot += 1;
            }
            if step % 997 == 0 {
                check(&index, &model, &hashes);
            }
        }
        check(&index, &model, &hashes);
    }

    #[test]
    fn insert_find_remove_against_a_model() {
        // Few distinct tags: many collisions and long probe runs.
        against_a_model(9, |r| r % 64);
    }

    #[test]
    fn probe_runs_that_wrap_around_the_end_of_the_table() {
        // Tags whose home is among the last entries of any table: the runs wrap past the end,
        // where removal's backward shift takes its other branch.
        against_a_model(11, |r| u64::from(u32::MAX) - r % 8);
    }

    #[test]
    fn load_stays_at_most_half() {
        let mut index = Index::default();
        for slot in 0..100_000u32 {
            index.insert(u64::from(slot).wrapping_mul(0x9E37_79B9_7F4A_7C15), slot);
        }
        assert!(index.allocated() / 8 >= 2 * index.len());
        assert!(index.allocated() <= 100_000 * 8 * 4);
    }

    #[test]
    fn empty_index_finds_nothing() {
        let mut index = Index::default();
        assert_eq!(index.find(42, |_| true), None);
        index.remove(42, 0);
    }

    #[test]
    fn the_table_is_the_smallest_power_of_two_that_keeps_the_load_at_half() {
        for n in [1u32, 7, 8, 9, 16, 17, 64, 65, 1000] {
            let mut index = Index::default();
            for slot in 0..n {
                index.insert(u64::from(slot).wrapping_mul(0x9E37_79B9_7F4A_7C15), slot);
            }
            let want = (2 * n as usize).next_power_of_two().max(16);
            assert_eq!(index.allocated() / 8, want, "{n} keys");
        }
    }

    #[test]
    fn the_largest_slot_and_any_tag_fit_in_one_entry() {
        for tag in [0, 1, 0x8000_0000, u32::MAX] {
            for slot in [0, 1, MAX_SLOT] {
                let e = entry(tag, slot);
                assert_ne!(e, 0, "an entry is never the empty marker");
                assert_eq!((entry_tag(e), entry_slot(e)), (tag, slot));
            }
        }
    }

    /// Removing an entry that is not there is a caller's bug: debug builds stop at it
    /// rather than probing on (the load is at most 1/2, so the run ends at an empty entry).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "index entry missing")]
    fn removing_a_missing_entry_is_caught_in_debug_builds() {
        let mut index = Index::default();
        index.insert(7 << 32, 0);
        index.remove(8 << 32, 1);
    }
}
