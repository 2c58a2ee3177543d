"""Run the example Widget operator (`fastctl.demo.widgets`) against a cluster.

    eval "$(.venv/bin/fastctl control-plane up)"      # or any cluster in $KUBECONFIG
    .venv/bin/python examples/widget_operator.py      # installs the CRD, then runs
    .venv/bin/kubectl apply -f - <<'YAML'             # (kubectl from the control plane
    apiVersion: demo.fastctl.dev/v1                   #  cache: fastctl control-plane env)
    kind: Widget
    metadata: {name: hello, namespace: default}
    spec: {data: {greeting: "Hello from {name}"}}
    YAML

The same operator runs under the CLI, with metrics and leader election::

    .venv/bin/fastctl run fastctl.demo.widgets:make_controller --leader-elect widgets

Read `python/fastctl/demo/widgets.py` for the operator itself: a reconcile that renders an
owned ConfigMap with server-side apply, reports a Ready condition, publishes an Event and
cleans up through a finalizer.
"""

from __future__ import annotations

import asyncio
import logging

from fastctl import Manager, load_client
from fastctl.demo import widgets


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    client = await load_client()
    try:
        await widgets.install_crd(client)
        manager = Manager(client)  # /metrics on HTTPS 8443 (RBAC-checked), probes on 8081
        manager.add(widgets.make_controller(client))
        await manager.run()  # until Ctrl-C / SIGTERM: drains running reconciles, then exits
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())
