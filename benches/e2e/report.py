"""Markdown tables from the results of `run_all.py` (``python report.py results.json``)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

MB = 1024 * 1024  # MiB, as /proc reports
LABELS = {
    "fastctl": "fastctl",
    "fastctl-model": "fastctl, Python scheduler model",
    "fastctl-no-trust-env": "fastctl, experiment: aiohttp trust_env off",
    "fastctl-filtered": "fastctl, event_filter=generation_changed",
    "fastctl-no-ryw": "fastctl, read-your-writes guard off",
    "fastctl-no-otel": "fastctl, otel extra not installed",
    "fastctl-traced": "fastctl, tracing on (spans dropped by the exporter)",
    "fastctl-otlp": "fastctl, tracing on, exported by OTLP/HTTP to a local receiver",
    "fastctl-sampled": "fastctl, tracing on, 10 % of traces sampled, OTLP/HTTP",
    "kopf": "kopf (on.create/update, status storage)",
    "kopf-default": "kopf (on.create/update, default storage)",
    "kopf-event": "kopf (on.event)",
    "kopf-limited": "kopf (status storage), worker_limit = concurrency",
}


def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _p50_p99(summary: dict[str, float]) -> str:
    return f"{_f(summary['p50_ms'])} / {_f(summary['p99_ms'])} ms"


def configmaps_section(res: dict[str, Any]) -> list[str]:
    out = [
        f"### {res['count']:,} ConfigMaps ({res['payload_bytes']:,}-byte value each)",
        "",
    ]
    c = res["create_to_reconciled"]
    lag = c["lag_create_ack_to_reconcile"]
    out += _table(
        ["create → reconciled (fastctl Controller, no-op reconcile)", "result"],
        [
            ["create burst (driver, 64 in flight)", f"{_f(c['create_seconds'], 2)} s"],
            [
                "start of the burst → every object reconciled",
                f"{_f(c['seconds'], 2)} s ({_f(c['objects_per_second'], 0)} objects/s)",
            ],
            [
                "last create acknowledged → every object reconciled",
                f"{_f(c['after_last_create_seconds'] * 1e3, 0)} ms",
            ],
            [
                "each object: create acknowledged → first reconcile",
                f"p50 {_f(lag['p50_ms'])} ms, "
                f"p99 {_f(lag['p99_ms'])} ms, max {_f(lag['max_ms'])} ms",
            ],
            [
                "controller: peak RSS, CPU",
                f"{_f(c['controller_peak_rss_bytes'] / MB)} MiB, "
                f"{_f(c['controller_cpu_seconds'], 2)} s",
            ],
        ],
    )
    w = res["watch"]
    f, t = w["fastctl"], w["typed"]

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.1f}x" if b else "-"

    out += [
        "",
        f"Watch consumers on the same stream (each its own process): first the "
        f"{res['count']:,} existing objects, then a live burst of {w['updates']:,} updates "
        f"(written in {_f(w['update_write_seconds'])} s, both consuming at once).",
        "",
    ]
    out += _table(
        ["", "fastctl watcher → Store", "kubernetes-asyncio typed Watch", "fastctl advantage"],
        [
            [
                "initial stream: events/s",
                _f(f["initial"]["events_per_second"], 0),
                _f(t["initial"]["events_per_second"], 0),
                ratio(f["initial"]["events_per_second"], t["initial"]["events_per_second"]),
            ],
            [
                "initial stream: CPU per event",
                f"{_f(f['initial']['cpu_us_per_event'], 0)} µs",
                f"{_f(t['initial']['cpu_us_per_event'], 0)} µs",
                ratio(t["initial"]["cpu_us_per_event"], f["initial"]["cpu_us_per_event"]),
            ],
            [
                "live burst: events/s sustained",
                _f(f["live"]["events_per_second"], 0),
                _f(t["live"]["events_per_second"], 0),
                "(the API server's write rate)",
            ],
            [
                "live burst: CPU per event",
                f"{_f(f['live']['cpu_us_per_event'], 0)} µs",
                f"{_f(t['live']['cpu_us_per_event'], 0)} µs",
                ratio(t["live"]["cpu_us_per_event"], f["live"]["cpu_us_per_event"]),
            ],
            [
                "live burst: update acknowledged → event received, p50 / p99",
                _p50_p99(f["live"]["delivery_lag"]),
                _p50_p99(t["live"]["delivery_lag"]),
                "",
            ],
            [
                "RSS growth per cached object",
                f"{_f(f['initial']['rss_growth_bytes_per_object'], 0)} B",
                f"{_f(t['initial']['rss_growth_bytes_per_object'], 0)} B",
                ratio(
                    t["initial"]["rss_growth_bytes_per_object"],
                    f["initial"]["rss_growth_bytes_per_object"],
                ),
            ],
            [
                "process RSS before the first event",
                f"{_f(f['rss_bytes_at_start'] / MB)} MiB",
                f"{_f(t['rss_bytes_at_start'] / MB)} MiB",
                "",
            ],
        ],
    )
    m = res["memory"]
    out += ["", "Cache memory per object (tracemalloc, live Python objects after a full list):", ""]
    out += _table(
        [
            "object as JSON",
            "fastctl Store",
            "fastctl Store, strip_managed_fields",
            "typed V1ConfigMap",
        ],
        [
            [
                f"{_f(m['json_bytes_per_object'], 0)} B",
                f"{_f(m['fastctl_store']['bytes_per_object'], 0)} B",
                f"{_f(m['fastctl_store_stripped']['bytes_per_object'], 0)} B",
                f"{_f(m['typed_models']['bytes_per_object'], 0)} B",
            ]
        ],
    )
    return out


def _total(phase: dict[str, Any]) -> int | None:
    total: int | None = phase.get("requests", {}).get("total")
    return total


def _server_cpu(phase: dict[str, Any]) -> float:
    others = phase.get("others_cpu_seconds") or {}
    return float(others.get("kube-apiserver", math.nan)) + float(others.get("etcd", math.nan))


def operators_section(rows: list[dict[str, Any]]) -> list[str]:
    out = ["### The same Widget operator in fastctl and kopf", ""]
    base = {r["count"]: r for r in rows if r["mode"] == "fastctl"}
    times, resources = [], []
    for r in rows:
        ref = base.get(r["count"])
        ini, burst = r.get("initial", {}), r.get("burst", {})
        done = "" if ini.get("finished") else f" (only {ini.get('handled')} in time)"
        runs = r.get("runs", 1)
        spread = ""
        if runs > 1:
            spread = " (" + ", ".join(f"{v:.1f}" for v in ini["all_seconds"]) + ")"
        times.append(
            [
                _f(r["count"]),
                LABELS.get(r["mode"], r["mode"]),
                f"{runs}",
                _f(r.get("load_before"), 0),
                f"{_f(ini['seconds'])} s{done}{spread}",
                f"{_f(ini['seconds'] / ref['initial']['seconds'], 2)}x" if ref else "-",
                f"{_f(burst.get('seconds'))} s",
                f"{_f(burst.get('write_seconds'))} s",
            ]
        )
        per_object = burst.get("cpu_seconds", math.nan) / r["count"] * 1e3
        resources.append(
            [
                _f(r["count"]),
                LABELS.get(r["mode"], r["mode"]),
                f"{_f(r['peak_rss_bytes'] / MB)} MiB",
                f"{_f(r['peak_rss_bytes'] / ref['peak_rss_bytes'], 2)}x" if ref else "-",
                f"{_f(ini.get('cpu_seconds'), 1)} / {_f(burst.get('cpu_seconds'), 1)} s",
                f"{_f(per_object, 2)} ms",
                f"{_f(_server_cpu(ini), 1)} / {_f(_server_cpu(burst), 1)} s",
                f"{_f(_total(ini))} / {_f(_total(burst))}",
            ]
        )
    out += _table(
        [
            "objects",
            "operator",
            "runs",
            "load avg",
            "all handled once (median; each run)",
            "vs fastctl",
            "update burst handled",
            "(driver's writes took)",
        ],
        times,
    )
    out += [""]
    out += _table(
        [
            "objects",
            "operator",
            "peak RSS",
            "vs fastctl",
            "operator CPU: initial / burst",
            "operator CPU per object (burst)",
            "kube-apiserver + etcd CPU: initial / burst",
            "API requests: initial / burst",
        ],
        resources,
    )
    out += ["", "Requests by kind (initial / burst):", ""]
    for r in rows:
        ini = r.get("initial", {}).get("requests", {})
        burst = r.get("burst", {}).get("requests", {})
        kinds = [k for k in dict.fromkeys([*ini, *burst]) if k != "total"]
        text = ", ".join(f"{k} {ini.get(k, 0)}/{burst.get(k, 0)}" for k in kinds)
        out.append(f"- {r['count']:,}, {LABELS.get(r['mode'], r['mode'])}: {text}")
    return out


def latency_section(res: dict[str, Any]) -> list[str]:
    out = [
        f"### A live change behind a backlog of {res['backlog']:,} initial-list objects",
        "",
    ]
    rows = []
    for key, label in (
        ("rust", "fastctl (Rust scheduler)"),
        ("model", "fastctl, Python scheduler model"),
    ):
        if key not in res:
            continue
        r = res[key]
        a, s = r["latency_from_ack"], r["latency_from_send"]
        rows.append(
            [
                label,
                _f(r["changes_behind_backlog"]),
                f"{_f(a['p50_ms'])} / {_f(a['p90_ms'])} / {_f(a['p99_ms'])} / {_f(a['max_ms'])} ms",
                f"{_f(s['p50_ms'])} / {_f(s['p99_ms'])} ms",
                _f(r["backlog_remaining_at_change"]["median"]),
                f"{_f(r['drain_seconds'])} s",
                f"{_f(r['controller_cpu_seconds'], 1)} s",
            ]
        )
    out += _table(
        [
            "controller",
            "live changes",
            "acknowledged → reconcile starts: p50 / p90 / p99 / max",
            "sent → reconcile starts: p50 / p99",
            "backlog left (median)",
            "backlog drained in",
            "CPU",
        ],
        rows,
    )
    return out


def sweep_section(rows: list[dict[str, Any]]) -> list[str]:
    count = rows[0]["count"]
    out = [f"### fastctl concurrency sweep ({count:,} Widgets)", ""]
    out += _table(
        ["concurrency", "all handled once", "objects/s", "update burst handled", "peak RSS", "CPU"],
        [
            [
                _f(r["concurrency"]),
                f"{_f(r['initial']['seconds'])} s",
                _f(count / r["initial"]["seconds"], 0),
                f"{_f(r.get('burst', {}).get('seconds'))} s",
                f"{_f(r['peak_rss_bytes'] / MB)} MiB",
                f"{_f(r['cpu_seconds'], 1)} s",
            ]
            for r in rows
        ],
    )
    return out


def targets_section(results: dict[str, Any]) -> list[str]:
    out = ["### Targets", ""]
    rows = results.get("operators") or []
    by = {(r["mode"], r["count"]): r for r in rows}
    top = max((r["count"] for r in rows), default=0)
    fc, kp = by.get(("fastctl", top)), by.get(("kopf", top))
    cpus = results["machine"]["cpus"] or 1
    if fc and kp:
        speed = kp["initial"]["seconds"] / fc["initial"]["seconds"]
        memory = fc["peak_rss_bytes"] / kp["peak_rss_bytes"]
        out.append(
            f"- {top:,} objects, all handled once: kopf {kp['initial']['seconds']:.1f} s, "
            f"fastctl {fc['initial']['seconds']:.1f} s: fastctl is **{speed:.2f}x** as fast "
            f"(target ≥ 5x: **{'met' if speed >= 5 else 'missed'}**)."
        )
        out.append(
            f"- Peak memory at {top:,}: fastctl {fc['peak_rss_bytes'] / MB:.0f} MiB, kopf "
            f"{kp['peak_rss_bytes'] / MB:.0f} MiB: **{memory:.2f}x** "
            f"(target ≤ 0.33x: **{'met' if memory <= 1 / 3 else 'missed'}**)."
        )
        floor = _server_cpu(fc["initial"]) / cpus
        out.append(
            f"- Why: the API server and etcd spent {_server_cpu(fc['initial']):.1f} s of CPU on "
            f"fastctl's {top:,} status patches ({_server_cpu(kp['initial']):.1f} s on kopf's), "
            f"on the same {cpus} cores: even an operator that cost nothing could not finish in "
            f"less than ~{floor:.1f} s here, which caps the possible ratio at "
            f"~{kp['initial']['seconds'] / floor:.1f}x."
        )
        nt = by.get(("fastctl-no-trust-env", top))
        for phase in ("initial", "burst"):
            k_cpu = kp.get(phase, {}).get("cpu_seconds")
            f_cpu = fc.get(phase, {}).get("cpu_seconds")
            if not (k_cpu and f_cpu):
                continue
            line = (
                f"- Operator CPU, {phase}: kopf {k_cpu:.1f} s, fastctl {f_cpu:.1f} s "
                f"(**{k_cpu / f_cpu:.1f}x** less)"
            )
            nt_cpu = nt.get(phase, {}).get("cpu_seconds") if nt else None
            if nt_cpu:
                line += (
                    f"; with aiohttp's per-request environment lookups off, {nt_cpu:.1f} s "
                    f"(**{k_cpu / nt_cpu:.1f}x** less)"
                )
            out.append(line + ".")
    lat = results.get("latency", {}).get("rust")
    if lat:
        p50 = lat["latency_from_ack"]["p50_ms"]
        out.append(
            f"- Live change behind {results['latency']['backlog']:,} initial-list objects: "
            f"p50 **{p50:.1f} ms** from the change's acknowledgement to its reconcile "
            f"(target ≤ 100 ms: **{'met' if p50 <= 100 else 'missed'}**)."
        )
    return out


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    out = [
        f"Run of {m['date']}: {m['cpus']} CPUs ({m['cpu']}), shared; load average "
        f"{m['load_at_start']:.1f} at the start, {m.get('load_at_end', math.nan):.1f} at the end; "
        f"Python {m['python']}, kopf {m['kopf']}, kubernetes-asyncio {m['kubernetes_asyncio']}, "
        f"{m['kube_apiserver']}, fastctl {m['fastctl_commit']}; "
        f"{results['seconds'] / 60:.1f} minutes in all.",
        "",
    ]
    if "operators" in results:
        out += [*targets_section(results), ""]
    if "configmaps" in results:
        out += [*configmaps_section(results["configmaps"]), ""]
    if "operators" in results:
        out += [*operators_section(results["operators"]), ""]
    if "latency" in results:
        out += [*latency_section(results["latency"]), ""]
    if "sweep" in results:
        out += [*sweep_section(results["sweep"]), ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(render(json.loads(Path(sys.argv[1]).read_text())))
