//! The members of one fair level: each group's ready keys there and its neighbours in the
//! level's ring, by group number.

use crate::scheduler::sorted::Sorted;

/// One group's ready keys at one level, and its neighbours in the level's ring.
#[derive(Debug)]
pub(super) struct Member {
    pub(super) queue: Sorted<u64>,
    pub(super) prev: u32,
    pub(super) next: u32,
    /// Its group is held (`Groups::is_held`): out of the ring and the tournament (`prev`
    /// and `next` mean nothing), its keys kept in order until it is released.
    pub(super) parked: bool,
}

/// The groups of one fair level by group number: a vector indexed by the number (numbers
/// are small and reused, `Groups` hands them out densely), so the lookups on every add and
/// pop are an index, not a hash. Shaped like the map it replaces. A slot is the member
/// alone, its number being its index: with the number in it too, a slot outgrew a cache line.
#[derive(Debug, Default)]
pub(super) struct Members {
    slots: Vec<Option<Member>>,
    len: usize,
}

impl Members {
    #[inline]
    pub(super) fn get(&self, gid: &u32) -> Option<&Member> {
        self.slots.get(*gid as usize)?.as_ref()
    }

    #[inline]
    pub(super) fn get_mut(&mut self, gid: &u32) -> Option<&mut Member> {
        self.slots.get_mut(*gid as usize)?.as_mut()
    }

    pub(super) fn insert(&mut self, gid: u32, member: Member) {
        let i = gid as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].replace(member).is_none() {
            self.len += 1;
        }
    }

    pub(super) fn remove(&mut self, gid: &u32) -> Option<Member> {
        let m = self.slots.get_mut(*gid as usize)?.take()?;
        self.len -= 1;
        Some(m)
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &Member)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(g, m)| Some((g as u32, m.as_ref()?)))
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = u32> + '_ {
        self.iter().map(|(g, _)| g)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Member> + '_ {
        self.iter().map(|(_, m)| m)
    }
}

impl std::ops::Index<&u32> for Members {
    type Output = Member;

    fn index(&self, gid: &u32) -> &Member {
        self.get(gid).expect("group in the level")
    }
}

impl<'a> IntoIterator for &'a Members {
    type Item = (u32, &'a Member);
    type IntoIter = Box<dyn Iterator<Item = (u32, &'a Member)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}
