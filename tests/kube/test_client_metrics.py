"""A running operator's ``/metrics`` counts its requests as the API server counts them.

An operator (a Manager with one controller on PodTemplates, a kind nothing else on the local
control plane touches) reconciles two PodTemplates with a mix of answers: a GET that finds
its object and one that does not (404), a POST of a name that is taken (409), a server-side
apply that creates a child (201) and one that changes nothing (200), a merge patch, a
DELETE of a missing object (404), plus its list and watches. Its ``/metrics``, scraped while
it runs, has the process series; after it stops, its ``rest_client_requests_total`` by code
and method must equal, request for request, what the API server's own
``apiserver_request_total`` for podtemplates grew by (its verbs mapped to HTTP methods:
LIST, WATCH and GET are GETs, APPLY is a PATCH). The admin's own requests in that time go
to other resources only.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fastctl import Controller, Manager, Resource
from fastctl.kube import ApiError, apply, create, delete, get, patch
from fastctl.runtime import ServerOptions
from fastctl.testing import ControlPlane

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

TEMPLATE = Resource("v1", "PodTemplate", plural="podtemplates", namespaced=True)
METHOD_OF_VERB = {
    "GET": "GET",
    "LIST": "GET",
    "WATCH": "GET",
    "WATCHLIST": "GET",
    "POST": "POST",
    "CREATE": "POST",
    "PUT": "PUT",
    "UPDATE": "PUT",
    "PATCH": "PATCH",
    "APPLY": "PATCH",
    "DELETE": "DELETE",
    "DELETECOLLECTION": "DELETE",
}
"""apiserver_request_total's verb -> the HTTP method the client sent."""

Counts = Counter[tuple[str, str]]  # (code, method) -> requests


def template(name: str, namespace: str) -> dict[str, Any]:
    container = {"name": "c", "image": "busybox"}
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "template": {"spec": {"containers": [container]}},
    }


def apiserver_counts(cp: ControlPlane) -> Counts:
    """The API server's requests for podtemplates so far, by code and method."""
    status, text = cp.api_request("GET", "/metrics")
    assert status == 200, text
    counts: Counts = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if sample.name != "apiserver_request_total" or labels.get("resource") != (
                "podtemplates"
            ):
                continue
            counts[(labels["code"], METHOD_OF_VERB[labels["verb"]])] += int(sample.value)
    return counts


def fastctl_counts(text: str, host: str) -> Counts:
    """rest_client_requests_total to `host` in an exposition `text`, by code and method."""
    counts: Counts = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rest_client_requests_total" and sample.labels["host"] == host:
                counts[(sample.labels["code"], sample.labels["method"])] += int(sample.value)
    return counts


def grown(after: Counts, before: Counts) -> Counts:
    return Counter({k: v - before[k] for k, v in after.items() if v != before[k]})


async def test_request_counts_on_metrics_match_the_api_servers(
    control_plane: ControlPlane, client: ApiClient, namespace: str
) -> None:
    host = urlsplit(control_plane.server).netloc
    primaries = ["a", "b"]
    for name in primaries:
        await create(client, TEMPLATE, template(name, namespace))
    reconciled: set[str] = set()
    all_done = asyncio.Event()

    async def reconcile(obj: dict[str, Any], ctx: Any) -> None:
        name = obj["metadata"]["name"]
        if name.endswith("-child"):
            await get(client, TEMPLATE, name, namespace=namespace)
            return
        await get(client, TEMPLATE, name, namespace=namespace)
        with pytest.raises(ApiError) as missing:
            await get(client, TEMPLATE, f"{name}-missing", namespace=namespace)
        assert missing.value.status == 404
        with pytest.raises(ApiError) as taken:
            await create(client, TEMPLATE, template(name, namespace))
        assert taken.value.status == 409
        child = template(f"{name}-child", namespace)
        await apply(client, TEMPLATE, child, field_manager="metrics-test")
        await patch(
            client, TEMPLATE, name, {"metadata": {"labels": {"seen": "yes"}}}, namespace=namespace
        )
        await delete(client, TEMPLATE, f"{name}-gone", namespace=namespace)
        reconciled.add(name)
        if reconciled == set(primaries):
            all_done.set()

    ctl = Controller(client, TEMPLATE, reconcile, namespace=namespace, name="templates")
    manager = Manager(
        client,
        servers=ServerOptions(
            metrics_port=0, metrics_host="127.0.0.1", metrics_secure=False, probe_port=None
        ),
    ).add(ctl)
    server_before = apiserver_counts(control_plane)
    fastctl_before = fastctl_counts(generate_latest(manager.registry).decode(), host)
    task = asyncio.create_task(manager.run())
    try:
        await asyncio.wait_for(all_done.wait(), 60)
        assert manager.metrics_server is not None
        url = f"http://127.0.0.1:{manager.metrics_server.port}/metrics"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            assert resp.status == 200
            live = await resp.text()
    finally:
        manager.shutdown()
        await asyncio.wait_for(task, 30)  # running reconciles finish: every answer is in

    families = {f.name: f for f in text_string_to_metric_families(live)}
    rss = families["process_resident_memory_bytes"].samples[0].value
    assert rss > 10 * 2**20, rss  # a Python process with an event loop: tens of MB
    assert fastctl_counts(live, host), "no rest_client_requests_total for the API server"

    ours = grown(fastctl_counts(generate_latest(manager.registry).decode(), host), fastctl_before)
    # A watch is counted by the server when it ends: the operator's ended with it.
    deadline = time.monotonic() + 30
    while (theirs := grown(apiserver_counts(control_plane), server_before)) != ours:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert theirs == ours, f"API server: {dict(theirs)}; /metrics: {dict(ours)}"
    # The workload had every kind of answer (each reconcile may have run more than once).
    assert theirs[("404", "GET")] >= len(primaries)
    assert theirs[("409", "POST")] >= len(primaries)
    assert theirs[("404", "DELETE")] >= len(primaries)
    assert theirs[("201", "PATCH")] == len(primaries)  # the children, created by apply
    assert theirs[("200", "PATCH")] >= len(primaries)
