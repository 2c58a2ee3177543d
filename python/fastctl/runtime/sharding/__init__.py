"""Active-active sharding: replicas split a controller's objects between them, and never
two reconcile one object at once (docs/sharding.md).

- `_slots`: FNV-1a-64 of the key field, the slots of the hash space, ``shardSelector``;
- `_assignment`: rendezvous hashing of slots onto the live members, with bounded loads;
- `_rules`: the configuration, the published record, and the serve/claim/drain rules.
"""

from fastctl.runtime.sharding._assignment import assign
from fastctl.runtime.sharding._rules import Member, Sharding, format_slots, parse_slots
from fastctl.runtime.sharding._slots import fnv1a_64, shard_selector, slot_of, slot_range

__all__ = [
    "Member",
    "Sharding",
    "assign",
    "fnv1a_64",
    "format_slots",
    "parse_slots",
    "shard_selector",
    "slot_of",
    "slot_range",
]
