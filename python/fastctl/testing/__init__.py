"""Testing support: virtual time, a fake cluster in memory, and a real local Kubernetes
control plane (etcd + kube-apiserver).

```python
@fastctl.testing.virtual_time         # an async test on a loop whose clock jumps to the
async def test_requeue() -> None:     # next timer when every task waits (docs/testing.md)
    ...
```

```python
async with fastctl.testing.ControlPlane() as cp:   # real etcd + kube-apiserver on loopback
    cp.kubeconfig        # pathlib.Path of an admin kubeconfig
    cp.server            # "https://127.0.0.1:<port>"
    await cp.restart_apiserver()                    # etcd kept: for fault tests
```

```python
async with fastctl.testing.FakeCluster(Widget) as cluster:   # an API server in memory
    client = cluster.client()         # fastctl.kube calls, Controllers, Managers run on it
    await fastctl.testing.run_until_quiet(controller)
    cluster.get("v1", "ConfigMap", "a"); cluster.requests; cluster.outage(30)
    FakeCluster(Tenant, webhooks=WEBHOOKS)   # the module's admission webhooks, in process
```

With pytest, the plugin (``fastctl.testing.pytest_plugin``, registered by the package's
entry point) gives the session fixture ``control_plane``, the per-test ``namespace``, the
per-test ``fake_cluster``, and ``cluster``, which runs a test on both (a `Cluster`).
See docs/testing.md and docs/control-plane.md. Importing this package does not import
`cryptography`; starting a control plane does (``pip install 'fastctl[testing]'``).
"""

import importlib
from typing import TYPE_CHECKING, Any

from fastctl.testing._virtual_time import (
    Deadlock,
    Spin,
    VirtualTimeLoop,
    run_virtual,
    virtual_time,
)
from fastctl.testing.binaries import (
    ETCD_VERSION,
    K8S_VERSION,
    Binaries,
    BinariesNotFoundError,
    BuildError,
    ControlPlaneError,
    build_binaries,
    ensure_binaries,
    find_binaries,
)
from fastctl.testing.control_plane import ControlPlane, StartupError

if TYPE_CHECKING:
    from fastctl.testing._harness import reconcile_once, run_until_quiet
    from fastctl.testing.cluster import Cluster
    from fastctl.testing.fake import FakeCluster, FakeClusterError, RecordedRequest

_LAZY = {
    "Cluster": "fastctl.testing.cluster",
    "FakeCluster": "fastctl.testing.fake",
    "FakeClusterError": "fastctl.testing.fake",
    "RecordedRequest": "fastctl.testing.fake",
    "reconcile_once": "fastctl.testing._harness",
    "run_until_quiet": "fastctl.testing._harness",
}
"""Names whose modules import the Kubernetes client: loaded on first use, so importing
this package (as pytest does for the plugin) stays light."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ETCD_VERSION",
    "K8S_VERSION",
    "Binaries",
    "BinariesNotFoundError",
    "BuildError",
    "Cluster",
    "ControlPlane",
    "ControlPlaneError",
    "Deadlock",
    "FakeCluster",
    "FakeClusterError",
    "RecordedRequest",
    "Spin",
    "StartupError",
    "VirtualTimeLoop",
    "build_binaries",
    "ensure_binaries",
    "find_binaries",
    "reconcile_once",
    "run_until_quiet",
    "run_virtual",
    "virtual_time",
]
