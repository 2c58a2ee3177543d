"""Testing support: virtual time, and a real local Kubernetes control plane (etcd +
kube-apiserver).

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

With pytest, the plugin (``fastctl.testing.pytest_plugin``, registered by the package's
entry point) gives the session fixture ``control_plane`` and the per-test ``namespace``.
See docs/control-plane.md. Importing this package does not import `cryptography`; starting a
control plane does (``pip install 'fastctl[testing]'``).
"""

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
from fastctl.testing.fake import (
    FakeCluster,
    FakeClusterError,
    RecordedRequest,
    reconcile_once,
    run_until_quiet,
)

__all__ = [
    "ETCD_VERSION",
    "K8S_VERSION",
    "Binaries",
    "BinariesNotFoundError",
    "BuildError",
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
