//! Interned names: strings ↔ small dense numbers, for the fair groups.
//!
//! Every add with a group looks its name up, and keys of different groups arrive
//! interleaved (watch events of many namespaces), so this lookup is on the hot path. A map
//! from `Box<str>` compared the probe against a name behind a pointer, a cache miss once many
//! keys sit between two adds of one group. Here each name is stored with its hash in one
//! vector, short names inline, so a lookup is one hash of the caller's name, one probe of a
//! table of numbers and one comparison against the vector: no pointer to chase for names up
//! to `INLINE` bytes. Numbers of removed names are reused, so they stay dense.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// Names up to this many bytes are stored inline (a Kubernetes namespace is at most 63,
/// most are far shorter).
const INLINE: usize = 30;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Text {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl Text {
    fn new(name: &str) -> Self {
        if name.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..name.len()].copy_from_slice(name.as_bytes());
            Text::Inline {
                len: name.len() as u8,
                bytes,
            }
        } else {
            Text::Heap(name.into())
        }
    }

    #[inline]
    fn as_bytes(&self) -> &[u8] {
        match self {
            Text::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Text::Heap(s) => s.as_bytes(),
        }
    }
}

#[derive(Debug)]
struct Entry {
    hash: u64,
    /// `None` for a free number.
    text: Option<Text>,
}

/// Names with numbers `1..`; 0 is never handed out, so a caller can use it for "no name".
#[derive(Debug)]
pub struct Names {
    /// Numbers of live names, hashed by their name's hash.
    table: HashTable<u32>,
    /// By number; `entries[0]` is never live.
    entries: Vec<Entry>,
    free: Vec<u32>,
    hasher: DefaultHashBuilder,
    /// The number `intern` returned last: runs of one name (an `add_many`, the keys of one
    /// watch event) skip the table. A freed number has no text, so this is never stale.
    last: u32,
}

impl Default for Names {
    fn default() -> Self {
        Self {
            table: HashTable::new(),
            entries: vec![Entry {
                hash: 0,
                text: None,
            }],
            free: Vec::new(),
            hasher: DefaultHashBuilder::default(),
            last: 0,
        }
    }
}

impl Names {
    /// The number of `name`, and whether it is new (numbered by this call).
    #[inline]
    pub fn intern(&mut self, name: &str) -> (u32, bool) {
        // A run of one name compares the text it holds inline, without hashing.
        let last = &self.entries[self.last as usize];
        if last
            .text
            .as_ref()
            .is_some_and(|t| t.as_bytes() == name.as_bytes())
        {
            return (self.last, false);
        }
        let hash = self.hasher.hash_one(name);
        let found = self
            .table
            .find(hash, |&id| self.matches(id, hash, name))
            .copied();
        let (id, new) = match found {
            Some(id) => (id, false),
            None => (self.insert(hash, name), true),
        };
        self.last = id;
        (id, new)
    }

    /// The number of `name`, if it has one.
    pub fn find(&self, name: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(name);
        self.table
            .find(hash, |&id| self.matches(id, hash, name))
            .copied()
    }

    #[inline]
    fn matches(&self, id: u32, hash: u64, name: &str) -> bool {
        let e = &self.entries[id as usize];
        e.hash == hash
            && e.text
                .as_ref()
                .is_some_and(|t| t.as_bytes() == name.as_bytes())
    }

    #[cold]
    fn insert(&mut self, hash: u64, name: &str) -> u32 {
        let entry = Entry {
            hash,
            text: Some(Text::new(name)),
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize] = entry;
                id
            }
            None => {
                self.entries.push(entry);
                (self.entries.len() - 1) as u32
            }
        };
        let entries = &self.entries;
        self.table
            .insert_unique(hash, id, |&i| entries[i as usize].hash);
        id
    }

    /// Forget the name numbered `id`; its number may be handed out again.
    pub fn remove(&mut self, id: u32) {
        let Some(e) = self.entries.get_mut(id as usize) else {
            return;
        };
        if e.text.take().is_none() {
            return;
        }
        let hash = e.hash;
        if let Ok(found) = self.table.find_entry(hash, |&i| i == id) {
            found.remove();
        }
        self.free.push(id);
    }

    /// The name numbered `id`, if it is live.
    pub fn get(&self, id: u32) -> Option<&str> {
        let text = self.entries.get(id as usize)?.text.as_ref()?;
        Some(std::str::from_utf8(text.as_bytes()).expect("names are stored from str"))
    }

    /// Live names.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// The numbers of the live names.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.table.iter().copied()
    }

    /// Numbers held (live, free and the reserved 0), for the test that memory is reused.
    #[cfg(test)]
    pub fn footprint(&self) -> usize {
        self.entries.len() + self.free.len()
    }

    /// Check the table against the entries and the free list.
    pub fn check(&self) -> Result<(), String> {
        for (id, e) in self.entries.iter().enumerate() {
            let id = id as u32;
            let listed = self.table.find(e.hash, |&i| i == id).is_some();
            let live = e.text.is_some();
            if listed != live || (id == 0 && live) {
                return Err(format!("name {id} is indexed wrongly"));
            }
            if let Some(t) = &e.text {
                let name = std::str::from_utf8(t.as_bytes()).map_err(|e| e.to_string())?;
                if self.hasher.hash_one(name) != e.hash || self.find(name) != Some(id) {
                    return Err(format!("name {name:?} has a stale hash"));
                }
            }
        }
        if self.table.len() + self.free.len() + 1 != self.entries.len() {
            return Err("name free list is stale".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_dense_reused_and_never_zero() {
        let mut n = Names::default();
        let long = "x".repeat(INLINE + 1);
        assert_eq!(n.intern("a"), (1, true));
        assert_eq!(n.intern(&long), (2, true));
        assert_eq!(n.intern("a"), (1, false));
        assert_eq!(n.intern(&long), (2, false), "a long name is found too");
        assert_eq!(
            (n.get(1), n.get(2), n.get(0)),
            (Some("a"), Some(&*long), None)
        );
        n.check().unwrap();
        n.remove(1);
        assert_eq!((n.find("a"), n.get(1), n.len()), (None, None, 1));
        // The last number returned was freed: a name it held is not found through it.
        assert_eq!(n.intern("b"), (1, true));
        assert_eq!(n.intern("a"), (3, true));
        n.remove(1);
        n.remove(1);
        n.check().unwrap();
        assert_eq!(n.ids().count(), 2);
    }

    #[test]
    fn many_short_lived_names_take_no_memory_once_gone() {
        let mut n = Names::default();
        for round in 0..10_000 {
            let name = format!("tenant-{round}");
            let (id, new) = n.intern(&name);
            assert!(new);
            assert_eq!(n.intern(&name), (id, false));
            n.remove(id);
        }
        assert!(n.footprint() <= 3, "{}", n.footprint());
        n.check().unwrap();
    }

    #[test]
    fn check_finds_a_freed_number_still_indexed_and_a_name_twice() {
        let valid = || {
            let mut n = Names::default();
            n.intern("a");
            n.intern("b");
            n.check().unwrap();
            n
        };
        let mut n = valid();
        n.entries[2].text = None;
        assert!(n.check().is_err(), "a freed number still in the table");
        let mut n = valid();
        let hash = n.entries[1].hash;
        n.insert(hash, "a");
        assert!(n.check().is_err(), "one name under two numbers");
    }

    #[test]
    fn names_differing_only_past_the_inline_limit_are_distinct() {
        let mut n = Names::default();
        let a = format!("{}a", "n".repeat(INLINE));
        let b = format!("{}b", "n".repeat(INLINE));
        let short = "n".repeat(INLINE);
        let ids = [n.intern(&a).0, n.intern(&b).0, n.intern(&short).0];
        assert_eq!(ids, [1, 2, 3]);
        assert_eq!(n.find(&b), Some(2));
        n.check().unwrap();
    }
}
