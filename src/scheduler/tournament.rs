//! A tournament tree over small dense ids: which id holds the smallest key.
//!
//! A fair level needs its oldest ready key (for `max_wait` and for inspection), which is the
//! oldest of its groups' first keys, and a pop changes the front group's first key every
//! time. A binary heap of group heads made that a heap push plus, whenever the popped key was
//! the oldest (almost always, when groups take turns over keys that arrived interleaved), a
//! sift-down through stale entries. Here an update is one walk from the id's leaf to the root,
//! with one comparison per level over two flat arrays, and the minimum is read at the root:
//! O(log ids) per update, O(1) to read, no stale entries, memory one key and one winner per id.

/// The key of an id that is not in the contest.
const ABSENT: u64 = u64::MAX;

/// One node: the smallest key below it, the id holding it and that id's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    key: u64,
    id: u32,
    payload: u32,
}

const EMPTY: Node = Node {
    key: ABSENT,
    id: 0,
    payload: 0,
};

/// Ids `0..n` in a contest for the smallest `u64` key, each with a `u32` payload (for a fair
/// level: group number → its first entry's sequence number and slot).
#[derive(Debug, Default)]
pub struct Tournament {
    /// A complete binary tree in one array: node `n` has children `2n` and `2n + 1`, the
    /// leaf of id `i` is `leaves + i`, and every inner node holds the smaller of its
    /// children, so `nodes[1]` holds the minimum. Empty before the first `set`; else
    /// `2 * leaves` long, `leaves` a power of two.
    nodes: Vec<Node>,
}

impl Tournament {
    /// Give `id` the key `key` and `payload`. Keys must be unique among the ids (they are
    /// sequence numbers), and `u64::MAX` is reserved for "absent".
    #[inline]
    pub fn set(&mut self, id: u32, key: u64, payload: u32) {
        debug_assert!(key != ABSENT);
        self.put(id, Node { key, id, payload });
    }

    /// Take `id` out of the contest.
    #[inline]
    pub fn clear(&mut self, id: u32) {
        if (id as usize) < self.leaves() {
            self.put(id, EMPTY);
        }
    }

    /// The smallest key, the id holding it and its payload, if any id has a key.
    #[inline]
    pub fn min(&self) -> Option<(u64, u32, u32)> {
        let root = self.nodes.get(1)?;
        (root.key != ABSENT).then_some((root.key, root.id, root.payload))
    }

    /// The key and payload of `id`, if it has a key.
    pub fn get(&self, id: u32) -> Option<(u64, u32)> {
        let leaf = self.nodes.get(self.leaves() + id as usize)?;
        (id < self.leaves() as u32 && leaf.key != ABSENT).then_some((leaf.key, leaf.payload))
    }

    #[inline]
    fn leaves(&self) -> usize {
        self.nodes.len() / 2
    }

    #[inline]
    fn put(&mut self, id: u32, node: Node) {
        if id as usize >= self.leaves() {
            self.grow(id as usize + 1);
        }
        let mut n = self.leaves() + id as usize;
        let mut winner = node;
        self.nodes[n] = winner;
        // Replay the matches on the way up, carrying the winner so far: each level reads
        // one sibling. Keys are unique apart from `ABSENT` (one sequence number, one slot), so
        // a parent that already holds the winner's key holds the winner, and so does every
        // node above it.
        while n > 1 {
            let sibling = self.nodes[n ^ 1];
            if sibling.key < winner.key {
                winner = sibling;
            }
            n /= 2;
            if self.nodes[n].key == winner.key {
                break;
            }
            self.nodes[n] = winner;
        }
    }

    /// Room for at least `ids` ids: double the leaves and replay every match.
    #[cold]
    fn grow(&mut self, ids: usize) {
        let leaves = ids.next_power_of_two().max(2);
        let mut nodes = vec![EMPTY; 2 * leaves];
        let old = self.leaves();
        nodes[leaves..leaves + old].copy_from_slice(&self.nodes[old..]);
        for n in (1..leaves).rev() {
            nodes[n] = Self::smaller(nodes[2 * n], nodes[2 * n + 1]);
        }
        self.nodes = nodes;
    }

    #[inline]
    fn smaller(a: Node, b: Node) -> Node {
        if b.key < a.key {
            b
        } else {
            a
        }
    }

    /// The ids with a key, and their keys.
    pub fn entries(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.nodes
            .iter()
            .skip(self.leaves())
            .filter(|n| n.key != ABSENT)
            .map(|n| (n.id, n.key))
    }

    /// Memory held, in ids (for tests).
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.leaves()
    }

    /// Check every leaf's id and every inner node against its children.
    pub fn check(&self) -> Result<(), String> {
        let leaves = self.leaves();
        for (i, leaf) in self.nodes.iter().skip(leaves).enumerate() {
            if leaf.key != ABSENT && leaf.id as usize != i {
                return Err(format!("tournament leaf {i} holds id {}", leaf.id));
            }
        }
        for n in 1..leaves {
            let expected = Self::smaller(self.nodes[2 * n], self.nodes[2 * n + 1]);
            if self.nodes[n].key != expected.key
                || (expected.key != ABSENT && self.nodes[n] != expected)
            {
                return Err(format!("tournament node {n} has a stale winner"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_the_smallest_key_through_sets_and_clears() {
        let mut t = Tournament::default();
        assert_eq!(t.min(), None);
        t.clear(3);
        assert_eq!(t.min(), None);
        t.set(0, 50, 100);
        assert_eq!(t.min(), Some((50, 0, 100)));
        t.set(5, 20, 105);
        t.set(2, 30, 102);
        assert_eq!(t.min(), Some((20, 5, 105)));
        t.check().unwrap();
        t.set(5, 60, 106);
        assert_eq!(t.min(), Some((30, 2, 102)));
        t.clear(2);
        assert_eq!(t.min(), Some((50, 0, 100)));
        assert_eq!(
            (t.get(2), t.get(5), t.get(99)),
            (None, Some((60, 106)), None)
        );
        t.clear(0);
        t.clear(5);
        assert_eq!(t.min(), None);
        t.check().unwrap();
    }

    #[test]
    fn clearing_an_id_never_set_takes_no_room() {
        let mut t = Tournament::default();
        t.set(0, 5, 1);
        let room = t.capacity();
        t.clear(room as u32);
        t.clear(1000);
        assert_eq!(t.capacity(), room);
        t.check().unwrap();
    }

    #[test]
    fn check_finds_stale_winners() {
        let valid = || {
            let mut t = Tournament::default();
            t.set(0, 5, 1);
            t.set(1, 7, 2);
            t.set(3, 9, 3);
            t.clear(3);
            t.check().unwrap();
            t
        };
        let mut t = valid();
        t.nodes[3] = Node {
            key: 9,
            id: 3,
            payload: 3,
        };
        assert!(t.check().is_err(), "a winner left over an emptied subtree");
        let mut t = valid();
        t.nodes[1].payload = 9;
        assert!(t.check().is_err(), "the winner's key with a stale payload");
    }

    #[test]
    fn matches_a_scan_under_random_updates() {
        let mut rng = crate::scheduler::backoff::SplitMix64::new(7);
        let mut t = Tournament::default();
        let mut model = vec![None::<u64>; 300];
        for _ in 0..20_000 {
            let id = (rng.next_u64() % 300) as u32;
            if rng.next_u64() % 3 == 0 {
                t.clear(id);
                model[id as usize] = None;
            } else {
                // Keys are unique (as sequence numbers are), ties broken by the id.
                let key = rng.next_u64() % 1_000 * 512 + u64::from(id);
                t.set(id, key, id + 1);
                model[id as usize] = Some(key);
            }
            let expected = model
                .iter()
                .enumerate()
                .filter_map(|(i, k)| k.map(|k| (k, i as u32)))
                .min()
                .map(|(k, i)| (i, k));
            assert_eq!(t.min().map(|m| (m.1, m.0)), expected);
            if let Some((_, id, payload)) = t.min() {
                assert_eq!(payload, id + 1);
            }
        }
        t.check().unwrap();
        assert_eq!(t.capacity(), 512);
    }
}
