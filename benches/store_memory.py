"""Memory per cached object in a `Store`, with and without a transform (no API server).

Each measurement runs in a fresh subprocess: one object at a time, it builds a ConfigMap
as the JSON bytes an API server would send (a watch line), decodes them as the imported
build's watcher does (in the extension, managedFields cut there when stripped, in builds
that decode frames so; parsed with orjson and stripped on the dict before), applies the
transform under test (as the watcher does, identity restored), and feeds it to the store
as one list (``INIT``, ``INIT_APPLY`` each, ``INIT_DONE``); nothing else is kept, so what
grows is the store alone. RSS is read before and after (after a full collection) and
divided by N.

Two shapes of ConfigMap:

- ``plain``: labels, an annotation, a controller owner reference and three data keys,
  671 bytes of JSON each (the shape of the cache-cost figure in docs/benchmarks.md);
- ``applied``: the same object as ``kubectl apply`` and server-side apply leave it: with
  ``metadata.managedFields`` (two managers) and the
  ``kubectl.kubernetes.io/last-applied-configuration`` annotation (the object again).

Transforms: ``none`` (what the watcher decoded, managedFields included),
``drop_managed_fields`` (a Controller's default: ``strip_managed_fields``, done by the
decoder), and ``drop_managed_fields + drop_annotations()`` (no annotation at all: the
decoder strips, then the transform runs on a dict and its result is encoded again).

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/store_memory.py [N] [--rounds R]

Prints one JSON line per measurement (the median of R rounds), then a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
from typing import Any

import orjson

SHAPES = ("plain", "applied")
TRANSFORMS = ("none", "drop_managed_fields", "drop_managed_fields+annotations")


def configmap(i: int, shape: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"config-{i:07d}",
        "namespace": "bench",
        "uid": f"{i:08x}-1f2e-4d3c-8b7a-{i:012x}",
        "resourceVersion": str(1_000_000 + i),
        "creationTimestamp": "2026-12-05T01:02:03Z",
        "labels": {"app.kubernetes.io/name": "bench", "app.kubernetes.io/instance": f"i-{i:07d}"},
        "annotations": {"bench.fastctl.dev/checksum": f"sha256:{i:032x}"},
        "ownerReferences": [
            {
                "apiVersion": "bench.fastctl.dev/v1",
                "kind": "Widget",
                "name": f"widget-{i:07d}",
                "uid": f"{i:08x}-aaaa-4bbb-8ccc-{i:012x}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    data = {
        "config.yaml": f"name: widget-{i:07d}\n",
        "f": "beta",
        "endpoint": f"https://w-{i:07d}.bench:8443",
    }
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
    if shape == "applied":
        meta["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = (
            orjson.dumps({"apiVersion": "v1", "kind": "ConfigMap", "data": data}).decode() + "\n"
        )
        meta["managedFields"] = [
            {
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-12-05T01:02:03Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:data": {
                        ".": {},
                        "f:config.yaml": {},
                        "f:endpoint": {},
                        "f:feature-flags": {},
                    },
                    "f:metadata": {
                        "f:annotations": {
                            ".": {},
                            "f:bench.fastctl.dev/checksum": {},
                            "f:kubectl.kubernetes.io/last-applied-configuration": {},
                        },
                        "f:labels": {
                            ".": {},
                            "f:app.kubernetes.io/instance": {},
                            "f:app.kubernetes.io/name": {},
                        },
                    },
                },
            },
            {
                "manager": "widget-operator",
                "operation": "Apply",
                "apiVersion": "v1",
                "time": "2026-12-05T01:02:04Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {
                        "f:ownerReferences": {
                            'k:{"uid":"' + meta["ownerReferences"][0]["uid"] + '"}': {}
                        }
                    }
                },
            },
        ]
    return obj


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _decoder(strip: bool, transform: Any) -> Any:
    """How the imported build's watcher turns a watch line into a list item's event."""
    from fastctl.kube import _wire
    from fastctl.kube._transforms import apply_transform
    from fastctl.kube._watcher import EventKind, ObjectEvent

    if hasattr(_wire, "decode_watch_line"):

        def decode(line: bytes) -> Any:
            _, item = _wire.decode_watch_line(line, strip_managed_fields=strip)
            assert not isinstance(item, bytes)
            if transform is not None:
                obj = apply_transform(transform, orjson.loads(item.json))
                item = _wire.item_of(obj)
            return ObjectEvent._of_item(EventKind.INIT_APPLY, item)

        return decode

    def parse(line: bytes) -> Any:
        _, obj = _wire.watch_frame(line)
        if strip:
            obj["metadata"].pop("managedFields", None)
        if transform is not None:
            obj = apply_transform(transform, obj)
        return ObjectEvent(EventKind.INIT_APPLY, obj)

    return parse


def measure(n: int, shape: str, transform_name: str) -> dict[str, Any]:
    """In this process: RSS per object of a store of `n` objects."""
    from fastctl.kube import Store, drop_annotations
    from fastctl.kube._watcher import EventKind, ListFrame

    strip = transform_name != "none"
    transform = drop_annotations() if transform_name == "drop_managed_fields+annotations" else None
    decode = _decoder(strip, transform)
    json_bytes = len(orjson.dumps(configmap(0, shape)))
    store = Store()
    gc.collect()
    before = _rss()
    store.apply(ListFrame(EventKind.INIT))
    for i in range(n):  # as received, then decoded; the line let go, as the watcher does
        store.apply(decode(orjson.dumps({"type": "ADDED", "object": configmap(i, shape)})))
    store.apply(ListFrame(EventKind.INIT_DONE))
    gc.collect()
    after = _rss()
    refs = list(store)[:1000]
    kept = statistics.mean(len(orjson.dumps(store[ref])) for ref in refs)
    return {
        "objects": n,
        "shape": shape,
        "transform": transform_name,
        "json_bytes_per_object": round(json_bytes),
        "kept_json_bytes_per_object": round(kept),
        "rss_bytes_per_object": round((after - before) / n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("objects", type=int, nargs="?", default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated")
    parser.add_argument("--transforms", default=",".join(TRANSFORMS), help="comma-separated")
    parser.add_argument("--one", nargs=2, metavar=("SHAPE", "TRANSFORM"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.objects, *args.one)))
        return
    results = []
    for shape in args.shapes.split(","):
        for transform in args.transforms.split(","):
            rounds = []
            for _ in range(args.rounds):
                out = subprocess.run(
                    [sys.executable, __file__, str(args.objects), "--one", shape, transform],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                rounds.append(json.loads(out))
            result = dict(rounds[0])
            result["rss_bytes_per_object"] = statistics.median(
                r["rss_bytes_per_object"] for r in rounds
            )
            result["rss_rounds"] = [r["rss_bytes_per_object"] for r in rounds]
            results.append(result)
            print(json.dumps(result), flush=True)
    print()
    print(
        "| shape | transform | JSON received | JSON kept | RSS per object | RSS / JSON received |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for r in results:
        ratio = r["rss_bytes_per_object"] / r["json_bytes_per_object"]
        print(
            f"| {r['shape']} | {r['transform']} | {r['json_bytes_per_object']:,} B "
            f"| {r['kept_json_bytes_per_object']:,} B | {r['rss_bytes_per_object']:,.0f} B "
            f"| {ratio:.2f} |"
        )


if __name__ == "__main__":
    main()
