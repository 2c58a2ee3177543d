//! Key texts, in slabs by size class instead of one heap allocation per key.
//!
//! With a `Box<str>` per key every new key was a `malloc` and every dropped one a `free`,
//! and with fair groups keys are dropped out of the order they were made: glibc then spends
//! its time coalescing freed chunks with neighbours scattered over the heap (measured with a
//! simulated 1 MiB last-level cache: nearly all the extra memory misses of a fair level were
//! inside `malloc_consolidate`, `free` and `unlink_chunk`, none in the scheduler's own
//! structures). Here a text of up to `SLAB_MAX` bytes takes a fixed-width cell in the slab of
//! its size class (widths step by `STEP` bytes); a dropped text's cell goes on its class's
//! free list and the next text of that class reuses it. No headers, no coalescing, and a
//! cell is usually smaller than a heap chunk (a 29-byte key: 32 bytes instead of 48). Longer
//! texts, rare for Kubernetes keys, keep a heap allocation each.

use super::index::reserve_huge;

/// Cell widths step by this many bytes.
const STEP: usize = 16;
/// Texts up to this many bytes live in slabs.
const SLAB_MAX: usize = 512;
const CLASSES: usize = SLAB_MAX / STEP;

/// Where a text is: its length, and its cell in the slab of its class (or its place among
/// the long texts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyRef {
    at: u32,
    len: u32,
}

impl KeyRef {
    /// Cells of class `c` are `(c + 1) * STEP` bytes wide; `None` for the empty text and
    /// for long ones.
    #[inline]
    fn class(self) -> Option<usize> {
        let len = self.len as usize;
        (1..=SLAB_MAX).contains(&len).then(|| (len - 1) / STEP)
    }
}

#[derive(Debug, Default)]
struct Slab {
    bytes: Vec<u8>,
    free: Vec<u32>,
}

/// The texts of the live keys.
#[derive(Debug)]
pub struct KeyTexts {
    slabs: Vec<Slab>,
    long: Vec<Box<str>>,
    long_free: Vec<u32>,
}

impl Default for KeyTexts {
    fn default() -> Self {
        Self {
            slabs: (0..CLASSES).map(|_| Slab::default()).collect(),
            long: Vec::new(),
            long_free: Vec::new(),
        }
    }
}

impl KeyTexts {
    /// Store `key` (more than `u32::MAX` bytes is refused by the caller's key checks long
    /// before: a key is a Kubernetes name).
    #[inline]
    pub fn insert(&mut self, key: &str) -> KeyRef {
        let len = u32::try_from(key.len()).expect("a key shorter than 4 GiB");
        let mut k = KeyRef { at: 0, len };
        match k.class() {
            Some(c) => {
                let width = (c + 1) * STEP;
                let slab = &mut self.slabs[c];
                let at = match slab.free.pop() {
                    Some(at) => at,
                    None => {
                        let at = slab.bytes.len() / width;
                        // Texts are read in pop order, which fair groups make random.
                        reserve_huge(&mut slab.bytes, width);
                        slab.bytes.resize(slab.bytes.len() + width, 0);
                        u32::try_from(at).expect("fewer than 4 billion keys per class")
                    }
                };
                let start = at as usize * width;
                slab.bytes[start..start + key.len()].copy_from_slice(key.as_bytes());
                k.at = at;
            }
            None if key.is_empty() => {}
            None => {
                k.at = match self.long_free.pop() {
                    Some(at) => {
                        self.long[at as usize] = key.into();
                        at
                    }
                    None => {
                        self.long.push(key.into());
                        u32::try_from(self.long.len() - 1).expect("fewer than 4 billion keys")
                    }
                };
            }
        }
        k
    }

    /// The bytes of the text at `k`.
    #[inline]
    pub fn bytes(&self, k: KeyRef) -> &[u8] {
        match k.class() {
            Some(c) => {
                let start = k.at as usize * (c + 1) * STEP;
                &self.slabs[c].bytes[start..start + k.len as usize]
            }
            None if k.len == 0 => b"",
            None => self.long[k.at as usize].as_bytes(),
        }
    }

    /// The text at `k`.
    #[inline]
    pub fn get(&self, k: KeyRef) -> &str {
        // Stored from a `str` and never changed in place: valid UTF-8 (checked anyway, the
        // cost of a short ASCII scan, rather than assumed).
        std::str::from_utf8(self.bytes(k)).expect("key texts are stored from str")
    }

    /// Drop the text at `k`; its cell is reused by a later text of its class.
    #[inline]
    pub fn remove(&mut self, k: KeyRef) {
        match k.class() {
            Some(c) => self.slabs[c].free.push(k.at),
            None if k.len == 0 => {}
            None => {
                self.long[k.at as usize] = Box::default();
                self.long_free.push(k.at);
            }
        }
    }

    /// Cells held (live and free), for tests.
    #[cfg(test)]
    pub fn cells(&self) -> usize {
        self.slabs
            .iter()
            .enumerate()
            .map(|(c, s)| s.bytes.len() / ((c + 1) * STEP))
            .sum::<usize>()
            + self.long.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_of_every_size_round_trip_and_cells_are_reused() {
        let mut t = KeyTexts::default();
        let texts: Vec<String> = [0, 1, 15, 16, 17, 31, 32, 33, 511, 512, 513, 4000]
            .iter()
            .map(|&n| (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect())
            .collect();
        let refs: Vec<KeyRef> = texts.iter().map(|s| t.insert(s)).collect();
        for (s, &k) in texts.iter().zip(&refs) {
            assert_eq!(t.get(k), s);
        }
        let cells = t.cells();
        for &k in &refs {
            t.remove(k);
        }
        let again: Vec<KeyRef> = texts.iter().rev().map(|s| t.insert(s)).collect();
        assert_eq!(
            t.cells(),
            cells,
            "a freed cell is reused by a text of its class"
        );
        for (s, &k) in texts.iter().rev().zip(&again) {
            assert_eq!(t.get(k), s);
        }
        let unicode = t.insert("namespace/ключ-✓");
        assert_eq!(t.get(unicode), "namespace/ключ-✓");
    }

    #[test]
    fn neighbours_in_a_slab_do_not_overwrite_each_other() {
        let mut t = KeyTexts::default();
        let a = t.insert("aaaaaaaaaaaaaaaaaaaa");
        let b = t.insert("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
        let c = t.insert("cccccccccccccccccccccc");
        t.remove(b);
        let d = t.insert("dddddddddddddddddddddddd");
        assert_eq!(d.at, b.at);
        assert_eq!(
            (t.get(a), t.get(c), t.get(d)),
            (
                "aaaaaaaaaaaaaaaaaaaa",
                "cccccccccccccccccccccc",
                "dddddddddddddddddddddddd"
            )
        );
    }
}
