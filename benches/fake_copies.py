"""What a fake cluster's copy of a stored object costs, three ways: `copy.deepcopy`, a round
trip through orjson (`fastctl.testing.fake._clone.clone`), and decoding stored JSON bytes
(what storing each object as bytes would pay on every read the server makes of it; encoding
is then paid on every write). The object is a Widget as the demo operator leaves it (two
managers' managed fields, a Ready condition, a finalizer). Rounds alternate the three;
prints microseconds per copy, the median of the rounds, as one JSON line.

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/fake_copies.py [ROUNDS]
"""

from __future__ import annotations

import copy
import json
import statistics
import sys
import timeit
from typing import Any

import orjson

from fastctl.testing.fake._clone import clone

TIME = "2026-12-05T00:00:00Z"
WIDGET: dict[str, Any] = {
    "apiVersion": "demo.fastctl.dev/v1",
    "kind": "Widget",
    "metadata": {
        "name": "w-1",
        "namespace": "default",
        "uid": "00000000-0000-4000-8000-000000000001",
        "resourceVersion": "123",
        "generation": 2,
        "creationTimestamp": TIME,
        "finalizers": ["demo.fastctl.dev/cleanup"],
        "labels": {"app": "demo"},
        "managedFields": [
            {
                "manager": "demo",
                "operation": "Apply",
                "apiVersion": "demo.fastctl.dev/v1",
                "time": TIME,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:data": {"f:k": {}}}},
            },
            {
                "manager": "demo",
                "operation": "Apply",
                "apiVersion": "demo.fastctl.dev/v1",
                "time": TIME,
                "fieldsType": "FieldsV1",
                "subresource": "status",
                "fieldsV1": {"f:status": {"f:conditions": {}, "f:observedGeneration": {}}},
            },
        ],
    },
    "spec": {"data": {"k": "{name}"}},
    "status": {
        "observedGeneration": 2,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Rendered",
                "message": "ConfigMap w-1-rendered is up to date",
                "lastTransitionTime": TIME,
                "observedGeneration": 2,
            }
        ],
    },
}


def main(rounds: int, number: int = 20_000) -> dict[str, float]:
    stored = orjson.dumps(WIDGET)
    ways = {
        "deepcopy_us": lambda: copy.deepcopy(WIDGET),
        "orjson_round_trip_us": lambda: clone(WIDGET),
        "decode_stored_bytes_us": lambda: orjson.loads(stored),
        "encode_us": lambda: orjson.dumps(WIDGET),
    }
    runs: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            runs[name].append(timeit.timeit(way, number=number) / number * 1e6)
    return {name: round(statistics.median(times), 2) for name, times in runs.items()}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)))
