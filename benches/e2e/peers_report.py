"""Tables and plots of `run_peers.py`'s results (``python peers_report.py peers.json``).

The figure of merit is **operator CPU per handled change**: the operator's CPU time over the
update burst (every Widget changed once, so one change each) divided by the Widgets; the
initial phase also pays the process's start-up (imports, the first list), shown beside it.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import compiled_peers
from report import LABELS as FRAMEWORK_LABELS
from report import MB, _f, _table, _total

LABELS = {**FRAMEWORK_LABELS, **compiled_peers.LABELS}
STYLE = {
    "fastctl": ("tab:blue", "o", "-"),
    "kopf": ("tab:red", "^", "-"),
    "controller-runtime": ("tab:cyan", "s", "--"),
    "kube-rs": ("tab:orange", "D", "--"),
    "raw-asyncio": ("tab:green", "P", ":"),
}


def cpu_per_change_ms(row: dict[str, Any]) -> float:
    """Operator CPU over the update burst per Widget (each changed once), in ms."""
    burst = row.get("burst") or {}
    return float(burst.get("cpu_seconds", math.nan)) / int(row["count"]) * 1e3


def initial_cpu_per_object_ms(row: dict[str, Any]) -> float:
    return float(row["initial"].get("cpu_seconds", math.nan)) / int(row["count"]) * 1e3


def _label(mode: str) -> str:
    return LABELS.get(mode, mode)


def _target(name: str, value: float, goal: str, met: bool) -> str:
    return f"{name}: **{value:.2f}x** (target {goal}: **{'met' if met else 'missed'}**)"


def targets_section(rows: list[dict[str, Any]]) -> list[str]:
    """The ratios the task sets, per object count, from this one run."""
    out = ["### Targets (fastctl against its peers, this run)", ""]
    for count in sorted({r["count"] for r in rows}):
        by = {r["mode"]: r for r in rows if r["count"] == count}
        fc = by.get("fastctl")
        if fc is None:
            continue
        f_cpu, f_time = cpu_per_change_ms(fc), fc["initial"]["seconds"]
        items = []
        if "controller-runtime" in by:
            ratio = f_cpu / cpu_per_change_ms(by["controller-runtime"])
            items.append(
                _target("CPU per change, fastctl / controller-runtime", ratio, "≤ 2x", ratio <= 2)
            )
        if "kopf" in by:
            ratio = cpu_per_change_ms(by["kopf"]) / f_cpu
            items.append(_target("CPU per change, kopf / fastctl", ratio, "≥ 5x", ratio >= 5))
        if "raw-asyncio" in by:
            raw = by["raw-asyncio"]
            ratio = f_cpu / cpu_per_change_ms(raw)
            items.append(
                _target("CPU per change, fastctl / raw asyncio loop", ratio, "≤ 1.2x", ratio <= 1.2)
            )
            ratio = f_time / raw["initial"]["seconds"]
            items.append(
                _target(
                    "time until all handled, fastctl / raw asyncio loop",
                    ratio,
                    "≤ 1.2x",
                    ratio <= 1.2,
                )
            )
            if "burst" in fc and "burst" in raw:
                ratio = fc["burst"]["seconds"] / raw["burst"]["seconds"]
                items.append(f"update burst handled, fastctl / raw asyncio loop: {ratio:.2f}x")
        if "kube-rs" in by:
            ratio = f_cpu / cpu_per_change_ms(by["kube-rs"])
            items.append(f"CPU per change, fastctl / kube-runtime: {ratio:.2f}x")
        out += [f"- {count:,} Widgets: " + "; ".join(items) + "."]
    return out


def same_work_section(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "### Same work",
        "",
        f"Each operator, per phase: every Widget handled, exactly one `PATCH widgets/status` "
        f"per Widget, no other write, at most {compiled_peers.READ_TOLERANCE} read requests "
        f"(list and watch restarts).",
        "",
    ]
    for r in rows:
        verdict = "; ".join(r.get("problems") or []) or "same work"
        mark = "**MISMATCH**: " if r.get("problems") else ""
        out.append(f"- {r['count']:,}, {_label(r['mode'])}: {mark}{verdict}")
    return out


def results_section(rows: list[dict[str, Any]]) -> list[str]:
    out = ["### The same Widget operator in five implementations", ""]
    table = []
    for r in rows:
        ini, burst = r["initial"], r.get("burst") or {}
        table.append(
            [
                _f(r["count"]),
                _label(r["mode"]),
                f"{_f(ini['seconds'], 2)} s",
                f"{_f(burst.get('seconds'), 2)} s",
                f"{_f(cpu_per_change_ms(r), 3)} ms",
                f"{_f(initial_cpu_per_object_ms(r), 3)} ms",
                f"{_f(ini.get('cpu_seconds'), 2)} / {_f(burst.get('cpu_seconds'), 2)} s",
                f"{_f(r['peak_rss_bytes'] / MB)} MiB",
                f"{_f(_total(ini))} / {_f(_total(burst))}",
            ]
        )
    out += _table(
        [
            "Widgets",
            "operator",
            "all handled once",
            "update burst handled",
            "CPU per handled change (burst)",
            "CPU per object (initial, with start-up)",
            "operator CPU: initial / burst",
            "peak RSS",
            "API requests: initial / burst",
        ],
        table,
    )
    out += ["", "Requests by kind (initial / burst):", ""]
    for r in rows:
        ini = r["initial"].get("requests", {})
        burst = (r.get("burst") or {}).get("requests", {})
        kinds = [k for k in dict.fromkeys([*ini, *burst]) if k != "total"]
        text = ", ".join(f"{k} {ini.get(k, 0)}/{burst.get(k, 0)}" for k in kinds)
        out.append(f"- {r['count']:,}, {_label(r['mode'])}: {text}")
    return out


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    rows = results["operators"]
    out = [
        f"Run of {m['date']}: {m['cpus']} CPUs ({m['cpu']}), shared; load average "
        f"{m['load_at_start']:.1f} at the start, {m.get('load_at_end', math.nan):.1f} at the "
        f"end; {results['seconds'] / 60:.1f} minutes in all; "
        f"{results['args']['repeat']} run(s) of each scenario (medians), concurrency "
        f"{results['args']['concurrency']} everywhere.",
        "",
        f"Versions: Python {m['python']}, kopf {m['kopf']}, kubernetes-asyncio "
        f"{m['kubernetes_asyncio']}, aiohttp {m.get('aiohttp')}; {m.get('go')}, "
        f"controller-runtime {m.get('controller_runtime')}, client-go {m.get('client_go')}; "
        f"{m.get('rustc')}, kube {m.get('kube')} (kube-runtime {m.get('kube_runtime')}), "
        f"k8s-openapi {m.get('k8s_openapi')}, tokio {m.get('tokio')}; {m['kube_apiserver']}; "
        f"fastctl {m['fastctl_commit']}.",
        "",
        *targets_section(rows),
        "",
        *same_work_section(rows),
        "",
        *results_section(rows),
        "",
    ]
    return "\n".join(out)


def make_plots(results: dict[str, Any], outdir: Path) -> list[Path]:
    """``e2e-peers.png``: time, CPU per change and peak RSS against the Widget count."""
    import matplotlib.pyplot as plt
    from plots import plot_modes

    rows = results["operators"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    panels: list[tuple[Any, str, Callable[[dict[str, Any]], float | None], bool]] = [
        (axes[0][0], "all handled once (s)", lambda r: r["initial"]["seconds"], False),
        (
            axes[0][1],
            "update burst handled (s)",
            lambda r: r.get("burst", {}).get("seconds"),
            False,
        ),
        (axes[1][0], "operator CPU per handled change, burst (ms, log)", cpu_per_change_ms, True),
        (
            axes[1][1],
            "peak RSS of the operator (MiB, log)",
            lambda r: r["peak_rss_bytes"] / MB,
            True,
        ),
    ]
    for ax, title, value, log_scale in panels:
        plot_modes(ax, rows, value, STYLE, LABELS)
        ax.set_title(title)
        ax.set_xlabel("Widgets")
        ax.grid(alpha=0.3, which="both")
        if log_scale:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(
        "The same Widget operator: fastctl, kopf, controller-runtime, kube-runtime, "
        "a raw asyncio loop"
    )
    fig.tight_layout()
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / "e2e-peers.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


if __name__ == "__main__":
    data = json.loads(Path(sys.argv[1]).read_text())
    print(render(data))
    if len(sys.argv) > 2:
        make_plots(data, Path(sys.argv[2]))
