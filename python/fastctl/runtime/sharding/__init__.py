"""Active-active sharding: replicas split a controller's objects between them, and never
two reconcile one object at once (docs/sharding.md).

Public: `Sharding`, the configuration a Manager takes (``Manager(client,
sharding=Sharding(group))``). The rest is how it works, in private modules:

- `_slots`: FNV-1a-64 of the key field, the slots of the hash space, ``shardSelector``;
- `_assignment`: rendezvous hashing of slots onto the live members, with bounded loads;
- `_rules`: the configuration, the published record, and the serve/claim/drain rules.
"""

from fastctl.runtime.sharding._rules import Sharding

__all__ = ["Sharding"]
