"""The soak's verdicts, computed from the operators' record files and the final cluster.

Pure functions of plain data (no I/O but reading the record files), so that each check can
be tried on a hand-made record that breaks it.

- **overlap**: never two reconciles of one object at once, across every process. A
  reconcile runs from its ``start`` line to its ``end`` line; one without an end (its process
  was killed, or exited) runs until its process ended as the driver saw it. The check allows
  no overlap at all: the lease's safety margin is meant to absorb the time a deposed leader
  needs to stop, so a successor's reconcile starting before the predecessor's ended means the
  takeover was early.
- **lost**: every existing Widget's ConfigMap holds its spec rendered, its status reports its
  generation, and its last reconcile saw its final resourceVersion (or a later one).
- **after-delete**: a deleted Widget (by uid) is not reconciled after its deletion was
  observed. The driver's own watch is the observer; an operator's watch may see the deletion
  a little later, so a start within `DELETE_LAG` after the driver's observation is counted
  but not failed.
- **rss**: per process life and per role in it, after a warm-up, the median RSS of the last
  window is within `RSS_GROWTH_LIMIT` of the median of the first window. A replica that
  starts as a follower and then leads holds the same cache in both roles but reconciles only
  as the leader (queues, reconcile state, the clients' connections and buffers), so its
  leading windows are compared with leading windows only, after a warm-up that starts when it
  took over (`role_segments`); comparing its follower start with its leader end measured the
  change of role, not a leak.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastctl.demo.widgets import Widget, render

DELETE_LAG = 2.0
"""Seconds an operator's watch may trail the driver's in seeing a deletion."""
RSS_GROWTH_LIMIT = 0.05


@dataclass(frozen=True)
class Interval:
    key: str
    uid: str | None
    rv: int
    deleting: bool
    process: str
    start: float
    end: float
    open: bool  # no end line: ended with its process


def read_records(path: Path) -> list[dict[str, Any]]:
    lines = []
    with path.open() as file:
        for line in file:
            if line.endswith("\n"):  # a torn last line cannot happen (one write), but be safe
                lines.append(json.loads(line))
    return lines


def intervals(process: str, records: Iterable[Mapping[str, Any]], ended: float) -> list[Interval]:
    """Pair each start with the next end of the same key in one process's records."""
    open_: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    out = []
    for rec in records:
        if rec["ev"] == "start":
            open_[rec["key"]].append(rec)
        elif open_[rec["key"]]:
            start = open_[rec["key"]].pop(0)
            out.append(_interval(process, start, rec["mono"], False))
    for starts in open_.values():
        out.extend(_interval(process, start, ended, True) for start in starts)
    return out


def _interval(process: str, start: Mapping[str, Any], end: float, open_: bool) -> Interval:
    return Interval(
        start["key"],
        start["uid"],
        int(start["rv"] or 0),
        bool(start.get("deleting")),
        process,
        start["mono"],
        end,
        open_,
    )


def overlaps(all_intervals: Iterable[Interval]) -> list[dict[str, Any]]:
    """Every pair of reconciles of one key that ran at once (within or across processes)."""
    by_key: dict[str, list[Interval]] = defaultdict(list)
    for iv in all_intervals:
        by_key[iv.key].append(iv)
    found = []
    for key, ivs in by_key.items():
        ivs.sort(key=lambda iv: iv.start)
        latest: Interval | None = None
        for iv in ivs:
            if latest is not None and iv.start < latest.end:
                found.append(
                    {
                        "key": key,
                        "first": latest.process,
                        "second": iv.process,
                        "seconds": latest.end - iv.start,
                        "first_open": latest.open,
                    }
                )
            if latest is None or iv.end > latest.end:
                latest = iv
    return found


def lost(
    widgets: Sequence[Mapping[str, Any]],
    configmaps: Mapping[str, Mapping[str, Any]],
    all_intervals: Iterable[Interval],
) -> list[dict[str, Any]]:
    """Widgets whose final state is not reflected, or not seen by their last reconcile."""
    last: dict[str | None, Interval] = {}
    for iv in all_intervals:
        if iv.uid not in last or iv.start > last[iv.uid].start:
            last[iv.uid] = iv
    found = []
    for w in widgets:
        meta = w["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        problems = []
        if "deletionTimestamp" in meta:
            problems.append("still being deleted")
        cm = configmaps.get(f"{meta['name']}-rendered")
        if cm is None:
            problems.append("no ConfigMap")
        elif (cm.get("data") or {}) != rendered(w):
            problems.append("ConfigMap does not match the spec")
        if (w.get("status") or {}).get("observedGeneration") != meta.get("generation"):
            problems.append("status.observedGeneration is not the generation")
        seen = last.get(meta["uid"])
        if seen is None:
            problems.append("never reconciled")
        elif seen.rv < int(meta["resourceVersion"]):
            problems.append(
                f"last reconcile saw resourceVersion {seen.rv} < final {meta['resourceVersion']}"
            )
        if problems:
            found.append({"key": key, "problems": problems})
    return found


def rendered(widget: Mapping[str, Any]) -> dict[str, str]:
    """The ConfigMap data the demo operator renders for a Widget, from the Widget as listed
    (the demo's `render` takes the typed model)."""
    return render(Widget.model_validate(widget))


def after_delete(
    deleted: Mapping[str, float], all_intervals: Iterable[Interval]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Reconciles of a deleted uid that started more than `DELETE_LAG` after the driver saw
    the deletion (violations), and those that started after it within the lag."""
    late: list[dict[str, Any]] = []
    within_lag: list[dict[str, Any]] = []
    for iv in all_intervals:
        seen = deleted.get(iv.uid or "")
        if seen is None or iv.start <= seen:
            continue
        row = {
            "key": iv.key,
            "process": iv.process,
            "rv": iv.rv,
            "deleting": iv.deleting,
            "seconds": iv.start - seen,
        }
        (within_lag if iv.start - seen <= DELETE_LAG else late).append(row)
    return late, within_lag


def rss_growth(
    samples: Sequence[tuple[float, int]], since: float, warmup: float, window: float
) -> dict[str, Any]:
    """Compare the medians of the first and last `window` seconds of samples taken after
    ``since + warmup``; not judged when fewer than two windows' worth remain."""
    kept = [(t, rss) for t, rss in samples if t >= since + warmup]
    out: dict[str, Any] = {"samples": len(samples), "judged": False}
    if samples:
        out["first"] = samples[0][1]
        out["last"] = samples[-1][1]
    if not kept or kept[-1][0] - kept[0][0] < 2 * window:
        return out
    first = statistics.median(rss for t, rss in kept if t <= kept[0][0] + window)
    last = statistics.median(rss for t, rss in kept if t >= kept[-1][0] - window)
    growth = (last - first) / first
    out.update(
        judged=True,
        median_first=first,
        median_last=last,
        growth=growth,
        ok=growth < RSS_GROWTH_LIMIT,
    )
    return out


def role_segments(
    started: float, ended: float, leading_since: float | None, role: str = "follower"
) -> list[tuple[str, float, float]]:
    """A process life cut where it took over the lease: ``(role, start, end)`` pieces, `role`
    before `leading_since` (or the whole life when it never led) and ``"leader"`` after.
    A process leads at most once: a leader that loses its lease exits and is restarted."""
    if leading_since is None or not started <= leading_since <= ended:
        return [(role, started, ended)]
    return [(role, started, leading_since), ("leader", leading_since, ended)]


def rss_by_role(
    samples: Sequence[tuple[float, int]],
    segments: Sequence[tuple[str, float, float]],
    churn_start: float,
    warmup: float,
    window: float,
) -> dict[str, Any]:
    """`rss_growth` of each role's samples alone, each warmed up from its own start (or from
    the churn's, if later); ``ok`` unless a judged role grew too much."""
    roles = {
        role: rss_growth(
            [(t, rss) for t, rss in samples if start <= t <= end],
            max(start, churn_start),
            warmup,
            window,
        )
        for role, start, end in segments
    }
    out: dict[str, Any] = {"samples": len(samples), "roles": roles}
    if samples:
        out["first"] = samples[0][1]
        out["last"] = samples[-1][1]
    out["judged"] = any(r["judged"] for r in roles.values())
    out["ok"] = all(r["ok"] for r in roles.values() if r["judged"])
    return out
