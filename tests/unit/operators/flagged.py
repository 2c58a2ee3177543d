"""Factories for the ``fastctl run`` flag tests: each builds a Manager (or Controllers)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import ApiClient

from fastctl import Controller, LeaderElection, Manager, RateLimit, Resource
from fastctl.runtime.sharding import Sharding
from fastctl.webhook import AdmissionRequest, Allow, Webhooks

CM = Resource("v1", "ConfigMap", plural="configmaps", namespaced=True)

WEBHOOKS = Webhooks()


@WEBHOOKS.validating(CM, name="configmaps.flags.fastctl.dev")
def admit(request: AdmissionRequest) -> Allow:
    return Allow()


async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
    return None


def _controller(client: ApiClient, namespace: str | None, concurrency: int | None) -> Controller:
    return Controller(
        client, CM, reconcile, namespace=namespace, concurrency=concurrency or 32, name="cms"
    )


def make(
    client: ApiClient, namespace: str | None = None, concurrency: int | None = None
) -> Manager:
    """A Manager with nothing of its own: every flag applies."""
    return Manager(client).add(_controller(client, namespace, concurrency))


def bare(client: ApiClient) -> Manager:
    """A factory that takes neither namespace= nor concurrency=."""
    return Manager(client).add(_controller(client, None, None))


def elected(client: ApiClient) -> Manager:
    """A Manager with leader election, sharding and a rate limit of its own."""
    manager = Manager(
        client,
        leader_election=LeaderElection("own-lease", namespace="default"),
        sharding=Sharding("own-group"),
        rate_limit=RateLimit(qps=5.0, burst=10),
    )
    return manager.add(_controller(client, None, None))


def controllers(client: ApiClient, namespace: str | None = None) -> list[Controller]:
    """Controllers: the CLI makes the Manager."""
    return [_controller(client, namespace, None)]
