"""ConfigMaps and Secrets watched as protobuf (`WatchConfig.protobuf`) against the real
kube-apiserver: each object the extension decodes from the server's protobuf is the
server's own JSON of the same object, for objects with every metadata field a client can
set (generateName, labels, annotations, owner references, finalizers, managedFields from
an apply, a deletionTimestamp held by a finalizer) and the bodies of both kinds
(binaryData, immutable, a Secret's bytes and type); and the watcher, on by default, reads
them so."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from typing import Any, cast

import aiohttp
import orjson
import pytest
from kubernetes_asyncio.client import ApiClient

import fastctl.kube._lines as lines_module
import fastctl.kube._watch_stream as stream_module
from fastctl._core import Item, WatchBody, decode_lines, decode_proto_frames
from fastctl.kube._http import request
from fastctl.kube._objects import apply, create, delete, patch
from fastctl.kube._resource import ResolvedResource
from fastctl.kube._watcher import EventKind, ObjectEvent, WatchConfig, WatchEvent, watcher

from .conftest import CM, Collector

pytestmark = pytest.mark.kube

SECRET = ResolvedResource("", "v1", "Secret", "secrets", True)
PROTOBUF = "application/vnd.kubernetes.protobuf"
HOLD = "proto.fastctl.dev/hold"
Collect = Callable[[AsyncIterable[WatchEvent]], Collector]


def owners() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "proto.fastctl.dev/v1",
            "kind": "Widget",
            "name": "w",
            "uid": "00000000-aaaa-4bbb-8ccc-000000000001",
            "controller": True,
            "blockOwnerDeletion": True,
        },
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-2", "controller": False},
    ]


async def make_objects(client: ApiClient, ns: str) -> None:
    """A ConfigMap and a Secret with every field set, each applied to by a second manager
    and then deleted (its finalizer keeps it, with a deletionTimestamp); a plain one of
    each beside them."""
    meta: dict[str, Any] = {
        "generateName": "full-",
        "namespace": ns,
        "labels": {"app": "web", "tier": "front"},
        "annotations": {"note": '<a & "b">\n\u2028 é', "empty": ""},
        "ownerReferences": owners(),
        "finalizers": [HOLD, "proto.fastctl.dev/second"],
    }
    body = {"data": {"k": "v", "yaml": "a: 1\nb: [2]\n"}, "binaryData": {"bin": "AAH/"}}
    cm = await create(client, CM, {"metadata": meta, **body, "immutable": True})
    secret_body = {"data": {"key": "AP8="}, "stringData": {"plain": "text"}, "type": "Opaque"}
    secret = await create(client, SECRET, {"metadata": meta, **secret_body})
    for res, obj in ((CM, cm), (SECRET, secret)):
        name = obj["metadata"]["name"]
        applied = {
            "apiVersion": "v1",
            "kind": res.kind,
            "metadata": {"name": name, "namespace": ns, "labels": {"applied": "yes"}},
        }
        await apply(client, res, applied, field_manager="proto-test")
        await delete(client, res, name, namespace=ns)
    await create(client, CM, {"metadata": {"name": "plain", "namespace": ns}})
    await create(
        client, SECRET, {"metadata": {"name": "plain", "namespace": ns}, "immutable": False}
    )


async def release(client: ApiClient, ns: str) -> None:
    """Drop the finalizers, so the namespace can go."""
    for res in (CM, SECRET):
        resp = await request(client, "GET", res.collection_path(ns))
        async with resp:
            items = orjson.loads(await resp.read())["items"]
        for obj in items:
            if obj["metadata"].get("finalizers"):
                body = {"metadata": {"finalizers": None}}
                await patch(client, res, obj["metadata"]["name"], body, namespace=ns)


async def streaming_list(client: ApiClient, res: ResolvedResource, ns: str, accept: str) -> bytes:
    """The streaming list's body, through its initial-events-end bookmark."""
    query = {
        "watch": "true",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
    }
    data = b""
    streamed = aiohttp.ClientTimeout(total=None, sock_read=30)  # a stream: aiohttp reads it
    answer = await request(
        client, "GET", res.collection_path(ns), query=query, accept=accept, client_timeout=streamed
    )
    async with cast(aiohttp.ClientResponse, answer) as resp:
        assert resp.status == 200
        assert resp.content_type == accept
        async for chunk in resp.content.iter_any():
            data += chunk
            if complete(data, accept):
                break
    return data


def complete(data: bytes, accept: str) -> bool:
    """`data` holds the end bookmark and ends with a whole line or frame."""
    if b"k8s.io/initial-events-end" not in data:
        return False
    if accept == PROTOBUF:
        return bool(decode_proto_frames(data)[1] == len(data))
    return data.endswith(b"\n")


def by_name(frames: list[tuple[str, Item | bytes]]) -> dict[str, Any]:
    """Each frame's object by type and name; the end bookmark without its resourceVersion
    (the latest of the whole cluster, which moves between two requests)."""
    out = {}
    for etype, item in frames:
        assert isinstance(item, Item), item
        obj = orjson.loads(item.json)
        if etype == "BOOKMARK":
            del obj["metadata"]["resourceVersion"]
        out[f"{etype} {item.name}"] = obj
    return out


async def test_every_field_decoded_from_protobuf_is_the_servers_json(
    client: ApiClient, namespace: str
) -> None:
    await make_objects(client, namespace)
    try:
        for res in (CM, SECRET):
            pb = await streaming_list(client, res, namespace, PROTOBUF)
            frames, used, error, _ = decode_proto_frames(pb)
            assert (error, used) == (None, len(pb))
            js = await streaming_list(client, res, namespace, "application/json")
            expected, _, json_error, _ = decode_lines(js)
            assert json_error is None
            got = by_name(frames)
            assert got == by_name(expected)
            full = next(o for o in got.values() if o["metadata"].get("generateName"))
            meta = full["metadata"]
            assert meta["deletionTimestamp"]
            assert meta["deletionGracePeriodSeconds"] == 0
            assert {e["operation"] for e in meta["managedFields"]} == {"Update", "Apply"}
            assert meta["ownerReferences"] == owners()
            assert [etype for etype, _ in frames][-1] == "BOOKMARK"
        assert got["ADDED plain"].get("immutable") is False
    finally:
        await release(client, namespace)


async def test_the_watcher_reads_protobuf_by_default_and_json_when_told(
    client: ApiClient, namespace: str, collect: Collect, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def counting(buffer: bytes, *args: Any) -> Any:
        calls.append(len(buffer))
        return decode_proto_frames(buffer, *args)

    class CountingBody:
        """The lean transport's decoder, counting the protobuf reads that gave frames."""

        def __init__(self, chunked: bool, length: int | None, protobuf: bool, *args: Any):
            self.body = WatchBody(chunked, length, protobuf, *args)
            self.protobuf = protobuf

        def feed(self, data: bytes) -> Any:
            fed = self.body.feed(data)
            if self.protobuf and fed[0]:
                calls.append(len(data))
            return fed

        def __getattr__(self, name: str) -> Any:
            return getattr(self.body, name)

    monkeypatch.setattr(lines_module, "decode_proto_frames", counting)  # on aiohttp
    monkeypatch.setattr(stream_module, "WatchBody", CountingBody)  # on the lean transport
    await make_objects(client, namespace)
    try:
        seen: dict[bool, dict[str, Any]] = {}
        for protobuf in (True, False):
            config = WatchConfig(protobuf=protobuf, strip_managed_fields=False)
            events = collect(watcher(client, SECRET, namespace=namespace, config=config))
            await events.wait_for(lambda ev: any(e.kind is EventKind.INIT_DONE for e in ev))
            used = len(calls)
            await patch(
                client,
                SECRET,
                "plain",
                {"metadata": {"labels": {"live": "1"}}},
                namespace=namespace,
            )

            def live(ev: list[WatchEvent]) -> bool:
                return any(
                    isinstance(e, ObjectEvent) and "live" in e.obj["metadata"].get("labels", {})
                    for e in ev
                )

            await events.wait_for(live)
            assert (len(calls) > used) is protobuf  # the live change came as protobuf too
            seen[protobuf] = {
                e.obj["metadata"]["name"]: e.obj
                for e in events.events
                if isinstance(e, ObjectEvent) and e.kind is EventKind.INIT_APPLY
            }
            await events.close()
            await patch(
                client, SECRET, "plain", {"metadata": {"labels": None}}, namespace=namespace
            )
            if protobuf:
                assert calls, "the default watch did not read protobuf"
                calls.clear()
        assert not calls, "protobuf=False still read protobuf"
        # "plain" changed between the two lists; the other was left alone
        [full] = [name for name in seen[True] if name != "plain"]
        assert seen[True].keys() == seen[False].keys() == {full, "plain"}
        assert seen[True][full] == seen[False][full]
    finally:
        await release(client, namespace)
