"""A fake cluster for an operator's tests: an in-memory API server behind the client
fastctl uses for a real one, faults on demand, and the record of the requests made
(docs/testing.md, "Testing an operator on a fake cluster")."""

from fastctl.testing.fake._cluster import FakeCluster, FakeClusterError
from fastctl.testing.fake._requests import RecordedRequest

__all__ = [
    "FakeCluster",
    "FakeClusterError",
    "RecordedRequest",
]
