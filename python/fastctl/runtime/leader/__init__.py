"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

- `_rules`: the configuration and the pure timing rules (no I/O, no clock of their own);
- `_lease_api`: the GET/POST/PUT of one Lease;
- `_elector`: the loop that acquires, renews and releases the Lease.
"""

from fastctl.runtime.leader._elector import LeaderElector
from fastctl.runtime.leader._rules import (
    LeaderElection,
    LeaseRecord,
    Observation,
    Tenure,
    default_identity,
    micro_time,
    next_record,
    released_record,
)

__all__ = [
    "LeaderElection",
    "LeaderElector",
    "LeaseRecord",
    "Observation",
    "Tenure",
    "default_identity",
    "micro_time",
    "next_record",
    "released_record",
]
