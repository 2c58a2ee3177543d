"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

Public: `LeaderElection` (the configuration a Manager takes) and `LeaderElector` (the
loop, usable on its own). The rest is how they work, in private modules:

- `_rules`: the configuration and the pure timing rules (no I/O, no clock of their own);
- `_lease_api`: the GET/POST/PUT of one Lease;
- `_elector`: the loop that acquires, renews and releases the Lease.
"""

from fastctl.runtime.leader._elector import LeaderElector
from fastctl.runtime.leader._rules import LeaderElection

__all__ = ["LeaderElection", "LeaderElector"]
