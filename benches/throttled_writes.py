"""Writes through an API server that throttles half of them, at full size: 1,000 objects
changed three times during a 30 s outage in which a proxy answers every other write with
429 and ``Retry-After: 1`` (the scenario of ``tests/kube/throttled_writes.py``, which the
suite runs with 150 objects and 8 s). Prints one JSON line: whether every object
converged and how long after the outage, whether each object's last reconcile saw its
final value, the operator's requests during the outage as the proxy counted them (the
most in any 1 s and 5 s window, against the limit's bound), the 429s, the retries and the
requeue holds.

    .venv/bin/python benches/throttled_writes.py [--objects 1000] [--outage 30] [--qps 20]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kube.faultproxy import FaultProxy, admin_ssl_context  # noqa: E402
from tests.kube.throttled_writes import throttled_writes  # noqa: E402

from fastctl import RateLimit  # noqa: E402
from fastctl.kube import create, load_client  # noqa: E402
from fastctl.kube._resource import Resource  # noqa: E402
from fastctl.testing import ControlPlane  # noqa: E402


async def main(args: argparse.Namespace) -> None:
    async with ControlPlane() as cp:
        admin = await load_client(str(cp.kubeconfig))
        context = admin_ssl_context(
            str(cp.ca_file), str(cp.admin_cert_file), str(cp.admin_key_file)
        )
        proxy = FaultProxy(cp.server, context)
        await proxy.start()
        try:
            ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "throttled"}}
            await create(admin, Resource("v1", "Namespace"), ns)
            outcome = await throttled_writes(
                admin,
                proxy,
                "throttled",
                objects=args.objects,
                rounds=args.rounds,
                outage=args.outage,
                limit=RateLimit(qps=args.qps, burst=args.burst),
                converge_within=args.converge_within,
            )
        finally:
            await proxy.close()
            await admin.close()
    result = dataclasses.asdict(outcome)
    result["bound_1s"] = outcome.bound(1.0)
    result["bound_5s"] = outcome.bound(5.0)
    print(json.dumps(result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--outage", type=float, default=30.0)
    parser.add_argument("--qps", type=float, default=20.0)
    parser.add_argument("--burst", type=int, default=30)
    parser.add_argument("--converge-within", type=float, default=600.0)
    asyncio.run(main(parser.parse_args()))
