"""PNG plots of the end-to-end results (``python plots.py results.json [outdir]``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from report import LABELS, MB

STYLE = {
    "fastctl": ("tab:blue", "o", "-"),
    "fastctl-model": ("tab:cyan", "s", "--"),
    "fastctl-no-trust-env": ("tab:green", "P", ":"),
    "fastctl-filtered": ("tab:olive", "*", "-."),
    "fastctl-no-ryw": ("tab:gray", "x", ":"),
    "kopf": ("tab:red", "^", "-"),
    "kopf-default": ("tab:orange", "v", ":"),
    "kopf-event": ("tab:purple", "D", "-."),
    "kopf-limited": ("tab:brown", "x", ":"),
}


def plot_modes(
    ax: Any,
    rows: list[dict[str, Any]],
    value: Callable[[dict[str, Any]], float | None],
    style: dict[str, tuple[str, str, str]],
    labels: dict[str, str],
) -> None:
    """One line per mode of `rows`: `value` against the object count (None: no point)."""
    for mode in dict.fromkeys(r["mode"] for r in rows):
        pts = sorted((r["count"], value(r)) for r in rows if r["mode"] == mode)
        pts = [(x, y) for x, y in pts if y is not None]
        if not pts:
            continue
        color, marker, line = style.get(mode, ("black", "x", "-"))
        ax.plot(
            *zip(*pts, strict=True),
            marker=marker,
            linestyle=line,
            color=color,
            label=labels.get(mode, mode),
        )


def _operators(rows: list[dict[str, Any]], path: Path) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    panels: list[tuple[Any, str, Callable[[dict[str, Any]], float | None]]] = [
        (axes[0][0], "all handled once (s)", lambda r: r["initial"]["seconds"]),
        (
            axes[0][1],
            "objects handled per second (initial)",
            lambda r: r["count"] / r["initial"]["seconds"],
        ),
        (axes[1][0], "update burst handled (s)", lambda r: r.get("burst", {}).get("seconds")),
        (axes[1][1], "peak RSS of the operator (MiB)", lambda r: r["peak_rss_bytes"] / MB),
    ]
    for ax, title, value in panels:
        plot_modes(ax, rows, value, STYLE, LABELS)
        ax.set_title(title)
        ax.set_xlabel("Widgets")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(
        "Widget operators on the local API server (2 shared cores): same work, one "
        "status patch per change"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _latency(res: dict[str, Any], path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for key, label, color in (
        ("rust", "fastctl (Rust scheduler)", "tab:blue"),
        ("model", "fastctl, Python model", "tab:cyan"),
    ):
        r = res.get(key)
        if not r:
            continue
        lat = r["samples_from_ack_ms"]
        left.scatter(r["samples_remaining"], lat, s=10, alpha=0.6, color=color, label=label)
        for key, style, what in (
            ("samples_from_ack_ms", "-", "from acknowledgement"),
            ("samples_from_send_ms", ":", "from send"),
        ):
            ordered = sorted(r.get(key) or [])
            if ordered:
                fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
                right.plot(
                    ordered, fractions, color=color, linestyle=style, label=f"{label}, {what}"
                )
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.axhline(100, color="tab:red", linestyle="--", label="target p50 ≤ 100 ms")
    left.set_xlabel("initial-list objects not yet reconciled when the change was made")
    left.set_ylabel("change acknowledged → reconcile starts (ms)")
    left.invert_xaxis()
    left.legend(fontsize=8)
    right.axvline(100, color="tab:red", linestyle="--")
    right.set_xlabel("change → reconcile starts (ms); below 0: the event beat the response")
    right.set_ylabel("fraction of live changes")
    right.set_xscale("symlog", linthresh=1.0)
    right.legend(fontsize=7)
    fig.suptitle(
        f"Live changes behind a backlog of {res['backlog']:,} initial-list ConfigMaps "
        f"(concurrency {res['concurrency']}, one GET per reconcile)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _watch(res: dict[str, Any], path: Path) -> None:
    w, m = res["watch"], res["memory"]
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    names = ["fastctl", "kubernetes-asyncio typed"]
    colors = ["tab:blue", "tab:gray"]
    values = [
        w["fastctl"]["initial"]["events_per_second"],
        w["typed"]["initial"]["events_per_second"],
    ]
    axes[0].bar(names, values, color=colors)
    axes[0].set_title(f"initial stream of {res['count']:,} objects: events/s")
    cpu = {
        "initial": [
            w["fastctl"]["initial"]["cpu_us_per_event"],
            w["typed"]["initial"]["cpu_us_per_event"],
        ],
        "live": [w["fastctl"]["live"]["cpu_us_per_event"], w["typed"]["live"]["cpu_us_per_event"]],
    }
    xs = range(len(names))
    axes[1].bar([x - 0.2 for x in xs], cpu["initial"], width=0.4, color=colors, label="initial")
    axes[1].bar(
        [x + 0.2 for x in xs],
        cpu["live"],
        width=0.4,
        color=colors,
        alpha=0.5,
        hatch="//",
        label="live burst",
    )
    axes[1].set_xticks(list(xs), names)
    axes[1].set_title("CPU per event (µs)")
    axes[1].legend(fontsize=8)
    kinds = ["JSON", "fastctl Store", "Store, stripped", "typed models"]
    per = [
        m["json_bytes_per_object"],
        m["fastctl_store"]["bytes_per_object"],
        m["fastctl_store_stripped"]["bytes_per_object"],
        m["typed_models"]["bytes_per_object"],
    ]
    axes[2].bar(kinds, per, color=["tab:green", "tab:blue", "tab:blue", "tab:gray"])
    axes[2].set_title("bytes per cached object (tracemalloc)")
    axes[2].tick_params(axis="x", labelsize=8, labelrotation=15)
    for ax in axes:
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(
        f"{res['count']:,} ConfigMaps of {res['payload_bytes']:,} B, fastctl's "
        "watcher and cache beside kubernetes-asyncio's typed Watch"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _sweep(rows: list[dict[str, Any]], path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    xs = [r["concurrency"] for r in rows]
    left.plot(xs, [r["count"] / r["initial"]["seconds"] for r in rows], marker="o")
    left.set_title("objects handled per second (initial)")
    right.plot(xs, [r.get("burst", {}).get("seconds") for r in rows], marker="o")
    right.set_title("update burst handled (s)")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("fastctl concurrency")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    fig.suptitle(f"fastctl on {rows[0]['count']:,} Widgets against concurrency")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def make_plots(results: dict[str, Any], outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    plotters: list[tuple[str, str, Callable[[Any, Path], None]]] = [
        ("operators", "e2e-operators.png", _operators),
        ("latency", "e2e-latency.png", _latency),
        ("configmaps", "e2e-watch.png", _watch),
        ("sweep", "e2e-concurrency.png", _sweep),
    ]
    made = []
    for key, name, plot in plotters:
        if results.get(key):
            plot(results[key], outdir / name)
            made.append(outdir / name)
    return made


if __name__ == "__main__":
    data = json.loads(Path(sys.argv[1]).read_text())
    print(make_plots(data, Path(sys.argv[2]) if len(sys.argv) > 2 else Path("docs/img")))
