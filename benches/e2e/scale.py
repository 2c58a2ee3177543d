"""The scale benchmark's arithmetic: the ConfigMap it caches, what one operator's run
reports, and the figures per cached object (`run_scale.py` runs it; no I/O here).

An operator's run is one process (`OPERATORS`) against one namespace: it prints JSON lines
(``cached``, ``first_reconcile``, ``all_first`` with its CPU time, ``settled``, ``seen``),
with wall-clock times. `summarize_run` turns them, the driver's start time, RSS readings
and live changes into a row; `per_object` subtracts the same operator's run on an empty
namespace (its start-up, its runtime, its libraries) and divides by the objects.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from common import percentile

OPERATORS = ("fastctl", "controller-runtime", "kube-rs", "fastctl-json")
"""``fastctl-json``: fastctl with ``WatchConfig(protobuf=False)`` (not run by default)."""
LABELS = {
    "fastctl": "fastctl",
    "fastctl-json": "fastctl, JSON watch",
    "controller-runtime": "controller-runtime (Go)",
    "kube-rs": "kube-runtime (Rust)",
    "fastctl-store": "fastctl Store alone (no API server)",
}
SEQ_ANNOTATION = "e2e.fastctl.dev/seq"


def configmap(i: int, namespace: str) -> dict[str, Any]:
    """The ConfigMap as the driver creates it: labels, an annotation, a controller owner
    reference and three data keys. As the API server serves it (`as_served`, with a uid,
    a resourceVersion and a creation time, no managedFields) it is 668-670 bytes of JSON."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"cm-{i:07d}",
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "bench",
                "app.kubernetes.io/instance": f"i-{i:07d}",
            },
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
        },
        "data": {
            "config.yaml": f"name: widget-{i:07d}\n",
            "f": "beta",
            "endpoint": f"https://w-{i:07d}.bench:8443",
        },
    }


def as_served(i: int, namespace: str) -> dict[str, Any]:
    """`configmap` with the fields the API server sets on create, in its order."""
    obj = configmap(i, namespace)
    meta = obj["metadata"]
    served_meta = {
        "name": meta["name"],
        "namespace": namespace,
        "uid": f"{i:08x}-1f2e-4d3c-8b7a-{i:012x}",
        "resourceVersion": str(1_000_000 + i),
        "creationTimestamp": "2026-12-05T01:02:03Z",
        **{k: v for k, v in meta.items() if k not in ("name", "namespace")},
    }
    return {**obj, "metadata": served_meta}


def median(values: Iterable[float | None]) -> float:
    data = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(data) if data else math.nan


def _one(messages: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    found = [m for m in messages if key in m]
    if not found:
        raise ValueError(f"the operator never reported {key!r}")
    return found[0]


def summarize_run(
    messages: Sequence[dict[str, Any]],
    *,
    started: float,
    objects: int,
    memory: dict[str, int],
    changes: Sequence[tuple[str, float, float]],
) -> dict[str, Any]:
    """One operator process's row. `started`: the driver's wall clock just before it
    spawned the process; `memory`: ``VmRSS``/``VmHWM`` read after ``settled``; `changes`:
    the live changes as (seq, sent, acknowledged), each matched with the first ``seen``
    of its seq (a change never seen is counted, not timed)."""
    cached = _one(messages, "cached")["cached"]
    done = _one(messages, "all_first")
    first = next((m["first_reconcile"] for m in messages if "first_reconcile" in m), None)
    seen: dict[str, float] = {}
    for m in messages:
        if "seen" in m:
            seen.setdefault(m["seen"], m["t"])
    from_ack = [seen[seq] - acked for seq, _, acked in changes if seq in seen]
    from_send = [seen[seq] - sent for seq, sent, _ in changes if seq in seen]
    return {
        "objects": objects,
        "cached_seconds": cached - started,
        "first_reconcile_seconds": None if first is None else first - started,
        "all_reconciled_seconds": done["all_first"] - started,
        "cpu_seconds": done["cpu_seconds"],
        "rss_bytes": memory["VmRSS"],
        "peak_rss_bytes": memory["VmHWM"],
        "live_changes": len(changes),
        "live_changes_not_seen": len(changes) - len(from_ack),
        "live_from_ack_ms": [round(v * 1e3, 3) for v in from_ack],
        "live_from_send_ms": [round(v * 1e3, 3) for v in from_send],
    }


def per_object(run: dict[str, Any], empty: dict[str, Any]) -> dict[str, float]:
    """What the `run`'s objects cost over the same operator's `empty` run (no objects):
    RSS and CPU per object, and the seconds the list added to start-up."""
    n = run["objects"]
    if n <= 0 or empty["objects"] != 0:
        raise ValueError("per_object needs a run with objects and one without")
    return {
        "rss_bytes_per_object": (run["rss_bytes"] - empty["rss_bytes"]) / n,
        "peak_rss_bytes_per_object": (run["peak_rss_bytes"] - empty["peak_rss_bytes"]) / n,
        "cpu_us_per_object": (run["cpu_seconds"] - empty["cpu_seconds"]) / n * 1e6,
        "list_seconds": run["cached_seconds"] - empty["cached_seconds"],
    }


def combine(pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """One operator at one count over its rounds, each round a (run, empty run) pair: the
    median of every figure, each round's per-object figures, and the live changes of all
    rounds together."""
    rounds = [{**per_object(run, empty), **_scalars(run)} for run, empty in pairs]
    keys = rounds[0].keys()
    out: dict[str, Any] = {k: median(r[k] for r in rounds) for k in keys}
    out["objects"] = pairs[0][0]["objects"]
    out["rounds"] = rounds
    out["empty_rss_bytes"] = median(e["rss_bytes"] for _, e in pairs)
    from_ack = [v for run, _ in pairs for v in run["live_from_ack_ms"]]
    from_send = [v for run, _ in pairs for v in run["live_from_send_ms"]]
    out["live"] = {
        "changes": sum(run["live_changes"] for run, _ in pairs),
        "not_seen": sum(run["live_changes_not_seen"] for run, _ in pairs),
        "from_ack_ms": _quantiles(from_ack),
        "from_send_ms": _quantiles(from_send),
    }
    return out


def _scalars(run: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in run.items()
        if k != "objects" and isinstance(v, int | float) and not isinstance(v, bool)
    }


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 0.5),
        "p90": percentile(values, 0.9),
        "max": max(values) if values else math.nan,
    }
