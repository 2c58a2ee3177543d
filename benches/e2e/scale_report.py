"""The scale benchmark's table and plot (``python scale_report.py scale.json [IMGDIR]``)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from scale import LABELS

MIB = 2**20
STYLE = {
    "fastctl": ("tab:blue", "o", "-"),
    "fastctl-json": ("tab:purple", "v", "-"),
    "controller-runtime": ("tab:cyan", "s", "--"),
    "kube-rs": ("tab:orange", "D", "--"),
    "fastctl-store": ("tab:blue", "x", ":"),
}


def _n(value: float, digits: int = 0) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def render(results: dict[str, Any]) -> str:
    out = [
        "| objects | operator | RSS per object | peak RSS per object | RSS empty → full "
        "| list cached (start-up excluded) | first reconcile | all reconciled "
        "| CPU per object | live change p50 / max |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["operators"]:
        live = r["live"]["from_ack_ms"]
        out.append(
            f"| {r['objects']:,} | {LABELS[r['mode']]} | {_n(r['rss_bytes_per_object'])} B "
            f"| {_n(r['peak_rss_bytes_per_object'])} B "
            f"| {_n(r['empty_rss_bytes'] / MIB, 1)} → {_n(r['rss_bytes'] / MIB, 1)} MiB "
            f"| {_n(r['cached_seconds'], 2)} s ({_n(r['list_seconds'], 2)} s) "
            f"| {_n(r['first_reconcile_seconds'], 2)} s | {_n(r['all_reconciled_seconds'], 2)} s "
            f"| {_n(r['cpu_us_per_object'], 1)} µs "
            f"| {_n(live['p50'], 1)} / {_n(live['max'], 1)} ms |"
        )
    out += [
        "",
        "| objects | fastctl Store alone | JSON per object | RSS per object | RSS / JSON |",
        "|---:|---|---:|---:|---:|",
    ]
    for r in results.get("store", []):
        per, size = r["rss_bytes_per_object"], r["json_bytes_per_object"]
        out.append(
            f"| {r['objects']:,} | rounds {', '.join(f'{v:,.0f}' for v in r['rounds'])} B "
            f"| {size:,} B | {per:,.0f} B | {per / size:.2f} |"
        )
    problems = [
        f"{r['mode']} x{r['objects']}: {p}" for r in results["operators"] for p in r["problems"]
    ]
    out += ["", "Problems: " + ("; ".join(problems) if problems else "none")]
    return "\n".join(out) + "\n"


def _points(results: dict[str, Any]) -> dict[str, list[tuple[int, float, float]]]:
    """Per operator: (objects, RSS growth over the empty run, bytes per object)."""
    out: dict[str, list[tuple[int, float, float]]] = {}
    for r in results["operators"]:
        growth = r["rss_bytes_per_object"] * r["objects"]
        out.setdefault(r["mode"], []).append((r["objects"], growth, r["rss_bytes_per_object"]))
    for r in results.get("store", []):
        out.setdefault("fastctl-store", []).append(
            (r["objects"], r["rss_bytes_per_object"] * r["objects"], r["rss_bytes_per_object"])
        )
    return {mode: sorted(pts) for mode, pts in out.items()}


def make_plots(results: dict[str, Any], outdir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for mode, pts in _points(results).items():
        color, marker, line = STYLE.get(mode, ("black", "x", "-"))
        xs = [p[0] for p in pts]
        style = {"color": color, "marker": marker, "linestyle": line, "label": LABELS[mode]}
        left.plot(xs, [p[1] / MIB for p in pts], **style)
        right.plot(xs, [p[2] for p in pts], **style)
    json_size = next((r["json_bytes_per_object"] for r in results.get("store", [])), None)
    if json_size:
        right.axhline(json_size, color="tab:green", linestyle="-.", label="JSON as served")
        right.axhline(1.5 * json_size, color="tab:red", linestyle=":", label="1.5 x JSON")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_ylabel("RSS growth over an empty cache (MiB)")
    right.set_xscale("log")
    right.set_ylabel("RSS per cached object (bytes)")
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.set_xlabel("ConfigMaps cached")
        ax.grid(alpha=0.3, which="both")
    right.legend(fontsize=8)
    fig.suptitle("Memory against objects cached: ConfigMaps of ~668 bytes of JSON")
    fig.tight_layout()
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / "e2e-scale.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


if __name__ == "__main__":
    data = json.loads(Path(sys.argv[1]).read_text())
    print(render(data))
    print(make_plots(data, Path(sys.argv[2]) if len(sys.argv) > 2 else Path("docs/img")))
