//! Key texts: short ones inside their record, longer ones in slabs by size class.
//!
//! A key's text is read on every pop (it is what `pop` returns) and compared on every
//! lookup. Kept apart from its record it was a second cache miss per key whenever keys are
//! taken out of the order they arrived in, as fair groups take them: one line for the
//! record, another, somewhere else, for the text, where FIFO order reads both slabs front to
//! back and the hardware prefetcher hides the misses. So a text of up to `INLINE` bytes
//! (most Kubernetes `namespace/name` keys) lives in its record (`KeyText`), and the record
//! is two cache lines the CPU fetches as a pair (measured: a fair level's extra cost per
//! item in bursts fell from about 18 % to about 10 %; see docs/benchmarks.md, "Fair groups").
//!
//! Longer texts, up to `SLAB_MAX` bytes, take a fixed-width cell in the slab of their size
//! class (widths step by `STEP` bytes); a dropped text's cell goes on its class's free list
//! and the next text of that class reuses it. With a `Box<str>` per key every new key was a
//! `malloc` and every dropped one a `free`, and keys dropped out of the order they were made
//! left glibc coalescing freed chunks scattered over the heap. Texts longer still, rare for
//! Kubernetes keys, keep a heap allocation each.

use super::index::reserve_huge;

/// Texts up to this many bytes live inside their record: what fills the record's two cache
/// lines beside its other fields (`record::tests::record_fills_two_lines`).
pub const INLINE: usize = 76;
/// Cell widths of the slabs step by this many bytes.
const STEP: usize = 16;
/// Texts up to this many bytes live in slabs.
const SLAB_MAX: usize = 512;
const CLASSES: usize = SLAB_MAX / STEP;

/// A key's text as its record holds it: the bytes themselves if they fit in `INLINE`, else
/// where they are (a cell in the slab of their class, or a place among the long texts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyText {
    len: u32,
    at: u32,
    inline: [u8; INLINE],
}

impl Default for KeyText {
    fn default() -> Self {
        Self {
            len: 0,
            at: 0,
            inline: [0; INLINE],
        }
    }
}

impl KeyText {
    #[inline]
    fn is_inline(&self) -> bool {
        self.len as usize <= INLINE
    }

    /// Cells of class `c` are `(c + 1) * STEP` bytes wide; `None` for inline and for long
    /// texts.
    #[inline]
    fn class(&self) -> Option<usize> {
        let len = self.len as usize;
        (INLINE + 1..=SLAB_MAX)
            .contains(&len)
            .then(|| (len - 1) / STEP)
    }
}

#[derive(Debug, Default)]
struct Slab {
    bytes: Vec<u8>,
    free: Vec<u32>,
}

/// The texts of the live keys too long to be inline.
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
    pub fn insert(&mut self, key: &str) -> KeyText {
        let len = u32::try_from(key.len()).expect("a key shorter than 4 GiB");
        let mut k = KeyText {
            len,
            ..KeyText::default()
        };
        if k.is_inline() {
            k.inline[..key.len()].copy_from_slice(key.as_bytes());
            return k;
        }
        k.at = match k.class() {
            Some(c) => {
                let width = (c + 1) * STEP;
                let slab = &mut self.slabs[c];
                let at = match slab.free.pop() {
                    Some(at) => at,
                    None => {
                        let at = slab.bytes.len() / width;
                        reserve_huge(&mut slab.bytes, width);
                        slab.bytes.resize(slab.bytes.len() + width, 0);
                        u32::try_from(at).expect("fewer than 4 billion keys per class")
                    }
                };
                let start = at as usize * width;
                slab.bytes[start..start + key.len()].copy_from_slice(key.as_bytes());
                at
            }
            None => match self.long_free.pop() {
                Some(at) => {
                    self.long[at as usize] = key.into();
                    at
                }
                None => {
                    self.long.push(key.into());
                    u32::try_from(self.long.len() - 1).expect("fewer than 4 billion keys")
                }
            },
        };
        k
    }

    /// The bytes of the text `k`.
    #[inline]
    pub fn bytes<'a>(&'a self, k: &'a KeyText) -> &'a [u8] {
        if k.is_inline() {
            return &k.inline[..k.len as usize];
        }
        match k.class() {
            Some(c) => {
                let start = k.at as usize * (c + 1) * STEP;
                &self.slabs[c].bytes[start..start + k.len as usize]
            }
            None => self.long[k.at as usize].as_bytes(),
        }
    }

    /// The text `k`.
    #[inline]
    pub fn get<'a>(&'a self, k: &'a KeyText) -> &'a str {
        // Stored from a `str` and never changed in place: valid UTF-8 (checked anyway, the
        // cost of a short ASCII scan, rather than assumed).
        std::str::from_utf8(self.bytes(k)).expect("key texts are stored from str")
    }

    /// Drop the text `k`; a slab cell is reused by a later text of its class.
    #[inline]
    pub fn remove(&mut self, k: &KeyText) {
        if k.is_inline() {
            return;
        }
        match k.class() {
            Some(c) => self.slabs[c].free.push(k.at),
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
        let texts: Vec<String> = [0, 1, 16, 75, 76, 77, 92, 93, 511, 512, 513, 4000]
            .iter()
            .map(|&n| (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect())
            .collect();
        let refs: Vec<KeyText> = texts.iter().map(|s| t.insert(s)).collect();
        for (s, k) in texts.iter().zip(&refs) {
            assert_eq!(t.get(k), s);
        }
        let cells = t.cells();
        assert_eq!(cells, 7, "only the texts longer than INLINE take cells");
        for k in &refs {
            t.remove(k);
        }
        let again: Vec<KeyText> = texts.iter().rev().map(|s| t.insert(s)).collect();
        assert_eq!(
            t.cells(),
            cells,
            "a freed cell is reused by a text of its class"
        );
        for (s, k) in texts.iter().rev().zip(&again) {
            assert_eq!(t.get(k), s);
        }
        let unicode = t.insert("namespace/ключ-✓");
        assert_eq!(t.get(&unicode), "namespace/ключ-✓");
        let long_unicode = "ключ-✓".repeat(20);
        let k = t.insert(&long_unicode);
        assert_eq!(t.get(&k), long_unicode);
    }

    #[test]
    fn neighbours_in_a_slab_do_not_overwrite_each_other() {
        let mut t = KeyTexts::default();
        let (a, b, c, d) = (
            "a".repeat(85),
            "b".repeat(90),
            "c".repeat(88),
            "d".repeat(95),
        );
        let ka = t.insert(&a);
        let kb = t.insert(&b);
        let kc = t.insert(&c);
        t.remove(&kb);
        let kd = t.insert(&d);
        assert_eq!(kd.at, kb.at, "one class: the freed cell is reused");
        assert_eq!((t.get(&ka), t.get(&kc), t.get(&kd)), (&*a, &*c, &*d));
    }

    #[test]
    fn texts_past_inline_are_classed_by_cell_width_up_to_slab_max() {
        let class = |n: usize| {
            KeyText {
                len: n as u32,
                ..KeyText::default()
            }
            .class()
        };
        let widths = [INLINE, INLINE + 1, 80, 81, SLAB_MAX, SLAB_MAX + 1];
        assert_eq!(
            widths.map(class),
            [None, Some(4), Some(4), Some(5), Some(31), None]
        );
        assert_eq!(
            KeyTexts::default().slabs.len(),
            32,
            "one slab a class, none unused"
        );
    }

    #[test]
    fn inline_texts_take_no_cell() {
        let mut t = KeyTexts::default();
        let k = t.insert(&"x".repeat(INLINE));
        assert_eq!((t.get(&k).len(), t.cells()), (INLINE, 0));
        t.remove(&k);
        let k = t.insert(&"y".repeat(INLINE + 1));
        assert_eq!((t.get(&k).len(), t.cells()), (INLINE + 1, 1));
    }
}
