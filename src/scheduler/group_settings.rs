//! Fair groups' settings: weights and caps, kept by name, and which group a key is in.

use super::config::MAX_GROUP_CONCURRENCY;
use super::error::Error;
use super::groups::MAX_WEIGHT;
use super::{check_group, Scheduler};

impl Scheduler {
    /// Set the weight of fair group `group`: among ready keys of one priority it is served up
    /// to `weight` keys in a row per turn (default 1). Kept for the group's later keys too.
    pub fn set_group_weight(&mut self, group: &str, weight: u32) -> Result<(), Error> {
        let Some(group) = check_group(Some(group))? else {
            unreachable!("a named group stays named");
        };
        if weight == 0 {
            return Err(Error::InvalidConfig {
                name: "weight",
                message: format!("must be an int in [1, {MAX_WEIGHT}], got 0"),
            });
        }
        self.groups.set_weight(group, weight);
        Ok(())
    }

    /// The weight of fair group `group` (1 unless set).
    pub fn group_weight(&self, group: &str) -> u32 {
        self.groups.weight_of(group)
    }

    /// Give fair group `group` its own cap on keys in flight (`Some(0)`: none for it; `None`:
    /// the scheduler's `group_concurrency` again). Kept by name, like a weight. A group that
    /// now has its cap in flight is held at once; one that no longer has it is released
    /// (rejoining its rings at the back). On a scheduler created without a cap the first
    /// call starts counting keys in flight: O(keys in flight), once.
    pub fn set_group_concurrency(&mut self, group: &str, cap: Option<usize>) -> Result<(), Error> {
        let Some(group) = check_group(Some(group))? else {
            unreachable!("a named group stays named");
        };
        let cap = match cap.map(u32::try_from) {
            None => None,
            Some(Ok(cap)) => Some(cap),
            Some(Err(_)) => {
                return Err(Error::InvalidConfig {
                    name: "group_concurrency",
                    message: format!(
                        "must be an int in [0, {MAX_GROUP_CONCURRENCY}] or None, got {}",
                        cap.unwrap_or_default()
                    ),
                })
            }
        };
        if !self.groups.counting() {
            let records = &self.records;
            let in_flight = self.running.iter().map(|(_, idx)| records.get(idx).group);
            self.groups.start_counting(in_flight);
        }
        match self.groups.set_cap(group, cap) {
            Some((gid, false, true)) => self.ready.hold(gid, &self.groups),
            Some((gid, true, false)) => self.ready.release(gid, &self.groups),
            _ => {}
        }
        Ok(())
    }

    /// The cap on keys in flight of fair group `group` (its own if set, else
    /// `group_concurrency`; 0: none).
    pub fn group_concurrency_of(&self, group: &str) -> u32 {
        self.groups.cap_of(group)
    }

    /// The fair group of `key` (`None` for an absent key or one without a group).
    pub fn group_of(&self, key: &str) -> Option<&str> {
        let idx = self.records.find(key)?;
        self.groups.name(self.records.get(idx).group)
    }

    /// Named groups with at least one key (queued or in flight).
    pub fn groups(&self) -> usize {
        self.groups.len()
    }
}
