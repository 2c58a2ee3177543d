//! The compact cache: each object kept as its JSON bytes, with the few metadata strings the
//! cache is keyed and indexed by, in one shared allocation (plain Rust, no Python).
//!
//! A `Packed` object is one `Arc<[u8]>`: a header of six lengths, then the JSON, the name,
//! the namespace, the uid, the resourceVersion and the controller owner's uid. A
//! `CompactMap` holds them by (namespace, name), with an index by controller owner uid; both
//! tables hold the same `Arc`, so an object costs its bytes, about 60 bytes of its own and
//! two table slots. A relist that brings an object back unchanged keeps the held `Arc`.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::frames::Object;

const FIELDS: usize = 6;
const HEADER: usize = FIELDS * 4;

/// One cached object: its JSON and its key, uid, resourceVersion and controller owner uid.
#[derive(Clone, Debug)]
pub struct Packed(Arc<[u8]>);

impl Packed {
    /// Pack `json` with its metadata strings (empty: none).
    pub fn new(json: &[u8], name: &str, namespace: &str, uid: &str, rv: &str, owner: &str) -> Self {
        let parts: [&[u8]; FIELDS] = [
            json,
            name.as_bytes(),
            namespace.as_bytes(),
            uid.as_bytes(),
            rv.as_bytes(),
            owner.as_bytes(),
        ];
        let total = HEADER + parts.iter().map(|p| p.len()).sum::<usize>();
        // Written in place: no transient buffer of the same size beside each kept object
        // (a heap that alternates the two fragments, and RSS shows it).
        let mut data = Arc::<[u8]>::new_uninit_slice(total);
        let out = Arc::get_mut(&mut data).expect("a new Arc is unique");
        let mut at = 0;
        for part in parts {
            let len = u32::try_from(part.len()).expect("an object under 4 GiB");
            for (i, b) in len.to_le_bytes().into_iter().enumerate() {
                out[at + i].write(b);
            }
            at += 4;
        }
        for part in parts {
            for (slot, &b) in out[at..at + part.len()].iter_mut().zip(part) {
                slot.write(b);
            }
            at += part.len();
        }
        // SAFETY: every one of the `total` bytes was written above (the header's 4 per
        // part, then each part in full).
        Packed(unsafe { data.assume_init() })
    }

    /// Pack a decoded object.
    pub fn of(object: &Object) -> Self {
        let meta = &object.meta;
        Packed::new(
            &object.json,
            &meta.name,
            meta.namespace.as_deref().unwrap_or(""),
            meta.uid.as_deref().unwrap_or(""),
            meta.resource_version.as_deref().unwrap_or(""),
            meta.controller_uid().unwrap_or(""),
        )
    }

    fn part(&self, index: usize) -> &[u8] {
        let data = &self.0;
        let len =
            |i: usize| u32::from_le_bytes(data[i * 4..i * 4 + 4].try_into().unwrap()) as usize;
        let start = HEADER + (0..index).map(len).sum::<usize>();
        &data[start..start + len(index)]
    }

    fn text(&self, index: usize) -> &str {
        // Written from &str in `new`: always UTF-8.
        std::str::from_utf8(self.part(index)).unwrap_or("")
    }

    pub fn json(&self) -> &[u8] {
        self.part(0)
    }
    pub fn name(&self) -> &str {
        self.text(1)
    }
    /// Empty for a cluster-scoped object.
    pub fn namespace(&self) -> &str {
        self.text(2)
    }
    pub fn uid(&self) -> &str {
        self.text(3)
    }
    pub fn resource_version(&self) -> &str {
        self.text(4)
    }
    /// The controller owner's uid; empty: none.
    pub fn owner(&self) -> &str {
        self.text(5)
    }

    /// The same version of the same object: equal non-empty resourceVersion and equal uid
    /// (the API server changes resourceVersion on every write).
    pub fn same_version(&self, other: &Packed) -> bool {
        let rv = self.resource_version();
        !rv.is_empty() && rv == other.resource_version() && self.uid() == other.uid()
    }

    pub fn ptr_eq(&self, other: &Packed) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The bytes this object holds on the heap (its allocation, counts included).
    pub fn heap_bytes(&self) -> usize {
        self.0.len() + 2 * std::mem::size_of::<usize>()
    }
}

/// Objects by (namespace, name), with an index by controller owner uid.
#[derive(Default, Clone)]
pub struct CompactMap {
    objects: HashTable<Packed>,
    owners: HashTable<Packed>,
    hasher: DefaultHashBuilder,
}

impl CompactMap {
    pub fn new() -> Self {
        Self::default()
    }

    fn key_hash(&self, namespace: &str, name: &str) -> u64 {
        self.hasher.hash_one((namespace, name))
    }

    fn owner_hash(&self, uid: &str) -> u64 {
        self.hasher.hash_one(uid)
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<&Packed> {
        let hash = self.key_hash(namespace, name);
        self.objects
            .find(hash, |p| p.name() == name && p.namespace() == namespace)
    }

    /// Put `object` in, returning the one it replaced.
    pub fn insert(&mut self, object: Packed) -> Option<Packed> {
        let hash = self.key_hash(object.namespace(), object.name());
        let hasher = self.hasher.clone();
        let old = match self.objects.entry(
            hash,
            |p| p.name() == object.name() && p.namespace() == object.namespace(),
            |p| hasher.hash_one((p.namespace(), p.name())),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut e) => {
                Some(std::mem::replace(e.get_mut(), object.clone()))
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(object.clone());
                None
            }
        };
        if let Some(old) = &old {
            if old.owner() == object.owner() {
                if !old.owner().is_empty() {
                    self.swap_owner_entry(old, &object);
                }
                return Some(old.clone());
            }
            self.unindex(old);
        }
        self.index(&object);
        old
    }

    /// Take the object out, returning it.
    pub fn remove(&mut self, namespace: &str, name: &str) -> Option<Packed> {
        let hash = self.key_hash(namespace, name);
        let entry = self
            .objects
            .find_entry(hash, |p| p.name() == name && p.namespace() == namespace)
            .ok()?;
        let (old, _) = entry.remove();
        self.unindex(&old);
        Some(old)
    }

    fn index(&mut self, object: &Packed) {
        let owner = object.owner();
        if owner.is_empty() {
            return;
        }
        let hash = self.owner_hash(owner);
        let hasher = self.hasher.clone();
        self.owners
            .insert_unique(hash, object.clone(), |p| hasher.hash_one(p.owner()));
    }

    fn unindex(&mut self, object: &Packed) {
        let owner = object.owner();
        if owner.is_empty() {
            return;
        }
        let hash = self.owner_hash(owner);
        if let Ok(entry) = self.owners.find_entry(hash, |p| p.ptr_eq(object)) {
            entry.remove();
        }
    }

    fn swap_owner_entry(&mut self, old: &Packed, new: &Packed) {
        let hash = self.owner_hash(old.owner());
        if let Some(slot) = self.owners.find_mut(hash, |p| p.ptr_eq(old)) {
            *slot = new.clone();
        }
    }

    /// The objects whose controller owner has this uid, by namespace and name.
    pub fn owned_by<'a>(&'a self, uid: &'a str) -> impl Iterator<Item = &'a Packed> {
        let hash = self.owner_hash(uid);
        sorted(
            self.owners
                .iter_hash(hash)
                .filter(move |p| p.owner() == uid),
        )
    }

    /// Every object, by namespace and then name. The tables' own order follows their
    /// hasher's seed, which is random per process: iterated as it is, a list's objects would
    /// be triggered in a different order in every run, and neither a simulation's seed nor a
    /// test could replay one. Sorting costs O(n log n) per iteration (~20 ms at 100,000);
    /// the API server lists in about this order too (etcd's ``namespace/name`` key order).
    pub fn iter(&self) -> impl Iterator<Item = &Packed> {
        sorted(self.objects.iter())
    }

    /// The bytes the tables and objects hold (an estimate of the heap, for tests and
    /// benchmarks: shared objects are counted once per table that holds them).
    pub fn table_bytes(&self) -> usize {
        let slot = std::mem::size_of::<Packed>() + 1;
        (self.objects.capacity() + self.owners.capacity()) * slot
    }
}

/// `objects` by (namespace, name).
///
/// The keys are copied side by side first, each as ``namespace \0 name`` (no name holds a
/// NUL, so their byte order is the (namespace, name) order): compared in place, every
/// comparison would read two objects scattered over the heap, a cache miss or two each,
/// about 1.7 million of them for 100,000 objects (a quarter of a second, measured).
fn sorted<'a>(objects: impl Iterator<Item = &'a Packed>) -> std::vec::IntoIter<&'a Packed> {
    let all: Vec<&Packed> = objects.collect();
    let mut keys: Vec<u8> = Vec::with_capacity(all.len() * 24);
    let mut order: Vec<(usize, usize, usize)> = Vec::with_capacity(all.len());
    for (i, p) in all.iter().enumerate() {
        let start = keys.len();
        keys.extend_from_slice(p.namespace().as_bytes());
        keys.push(0);
        keys.extend_from_slice(p.name().as_bytes());
        order.push((start, keys.len(), i));
    }
    order.sort_unstable_by(|a, b| keys[a.0..a.1].cmp(&keys[b.0..b.1]));
    order
        .into_iter()
        .map(|(_, _, i)| all[i])
        .collect::<Vec<_>>()
        .into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(ns: &str, name: &str, owner: &str, rv: &str) -> Packed {
        let json = format!(r#"{{"metadata":{{"name":"{name}"}}}}"#);
        Packed::new(json.as_bytes(), name, ns, &format!("uid-{name}"), rv, owner)
    }

    #[test]
    fn iteration_is_by_namespace_then_name_whatever_the_insertion_order() {
        let mut map = CompactMap::default();
        for (ns, name) in [("b", "a"), ("a", "z"), ("", "m"), ("a", "b"), ("b", "0")] {
            map.insert(obj(ns, name, "o", "1"));
        }
        let keys: Vec<(&str, &str)> = map.iter().map(|p| (p.namespace(), p.name())).collect();
        assert_eq!(
            keys,
            [("", "m"), ("a", "b"), ("a", "z"), ("b", "0"), ("b", "a")]
        );
        let owned: Vec<&str> = map.owned_by("o").map(Packed::name).collect();
        assert_eq!(owned, ["m", "b", "z", "0", "a"]);
    }

    #[test]
    fn a_namespace_that_starts_another_sorts_before_it_whatever_the_names() {
        let mut map = CompactMap::default();
        for (ns, name) in [
            ("a-b", "a"),
            ("a", "z"),
            ("a.b", "0"),
            ("a", "-"),
            ("", "a"),
        ] {
            map.insert(obj(ns, name, "o", "1"));
        }
        let keys: Vec<(&str, &str)> = map.iter().map(|p| (p.namespace(), p.name())).collect();
        assert_eq!(
            keys,
            [
                ("", "a"),
                ("a", "-"),
                ("a", "z"),
                ("a-b", "a"),
                ("a.b", "0")
            ]
        );
    }

    #[test]
    fn packed_parts_round_trip() {
        let p = Packed::new(b"{}", "n", "ns", "u", "7", "o");
        assert_eq!(p.json(), b"{}");
        assert_eq!(
            (
                p.name(),
                p.namespace(),
                p.uid(),
                p.resource_version(),
                p.owner()
            ),
            ("n", "ns", "u", "7", "o")
        );
        let empty = Packed::new(b"{}", "n", "", "", "", "");
        assert_eq!((empty.namespace(), empty.owner()), ("", ""));
    }

    #[test]
    fn same_version_needs_uid_and_a_version() {
        assert!(obj("a", "x", "", "1").same_version(&obj("a", "x", "", "1")));
        assert!(!obj("a", "x", "", "1").same_version(&obj("a", "x", "", "2")));
        assert!(!obj("a", "x", "", "").same_version(&obj("a", "x", "", "")));
        assert!(!obj("a", "x", "", "1").same_version(&obj("a", "y", "", "1")));
    }

    #[test]
    fn insert_get_remove_keep_the_owner_index() {
        let mut map = CompactMap::new();
        assert!(map.insert(obj("a", "x", "o1", "1")).is_none());
        assert!(map.insert(obj("b", "x", "o1", "1")).is_none());
        assert!(map.insert(obj("a", "y", "", "1")).is_none());
        assert_eq!(map.len(), 3);
        assert_eq!(map.get("a", "x").unwrap().namespace(), "a");
        assert!(map.get("c", "x").is_none());
        assert_eq!(map.owned_by("o1").count(), 2);
        // A new version with the same owner replaces the indexed one.
        let old = map.insert(obj("a", "x", "o1", "2")).unwrap();
        assert_eq!(old.resource_version(), "1");
        let owned: Vec<_> = map
            .owned_by("o1")
            .map(|p| (p.namespace().to_owned(), p.resource_version().to_owned()))
            .collect();
        assert_eq!(owned.len(), 2);
        assert!(owned.contains(&("a".into(), "2".into())));
        // Moved to another owner, then removed.
        map.insert(obj("a", "x", "o2", "3"));
        assert_eq!(map.owned_by("o1").count(), 1);
        assert_eq!(map.owned_by("o2").count(), 1);
        assert_eq!(map.remove("a", "x").unwrap().resource_version(), "3");
        assert_eq!(map.owned_by("o2").count(), 0);
        assert!(map.remove("a", "x").is_none());
        assert_eq!(map.len(), 2);
        // Losing the owner.
        map.insert(obj("b", "x", "", "2"));
        assert_eq!(map.owned_by("o1").count(), 0);
    }
}
