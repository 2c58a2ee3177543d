"""The scale benchmark's arithmetic (benches/e2e/scale.py): how an operator's report lines,
the driver's readings and its live changes become the figures in docs/benchmarks.md. The
run itself is `benches/e2e/run_scale.py` (minutes, a control plane, Go and cargo); this
checks only what it computes, with made-up readings.

    .venv/bin/python -m pytest benches/test_bench_scale.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent / "e2e"))

from scale import combine, per_object, summarize_run

MIB = 2**20


def _run(
    objects: int,
    *,
    rss: int,
    cpu: float,
    cached: float,
    seen: list[dict[str, Any]] | None = None,
    changes: list[tuple[str, float, float]] | None = None,
) -> dict[str, Any]:
    started = 1000.0
    messages = [
        {"cached": started + cached},
        {"first_reconcile": started + cached + 0.01},
        *(seen or []),
        {"all_first": started + cached + 2.0, "cpu_seconds": cpu},
        {"settled": started + cached + 2.1},
    ]
    return summarize_run(
        messages,
        started=started,
        objects=objects,
        memory={"VmRSS": rss, "VmHWM": rss + MIB},
        changes=changes or [],
    )


def test_live_changes_are_timed_from_their_first_reconcile_and_missed_ones_counted() -> None:
    seen = [
        {"seen": "live-1", "t": 1010.004, "reconciles": 5},
        {"seen": "live-1", "t": 1010.5, "reconciles": 6},  # a later reconcile: not the first
        {"seen": "live-3", "t": 1012.001, "reconciles": 7},
    ]
    changes = [
        ("live-1", 1010.0, 1010.002),
        ("live-2", 1011.0, 1011.001),
        ("live-3", 1012.0, 1012.002),
    ]
    row = _run(100, rss=60 * MIB, cpu=3.0, cached=1.5, seen=seen, changes=changes)
    assert row["live_from_ack_ms"] == [2.0, -1.0]
    assert row["live_from_send_ms"] == [4.0, 1.0]
    assert (row["live_changes"], row["live_changes_not_seen"]) == (3, 1)
    assert row["cached_seconds"] == pytest.approx(1.5)
    assert row["first_reconcile_seconds"] == pytest.approx(1.51)
    assert row["all_reconciled_seconds"] == pytest.approx(3.5)


def test_a_run_that_never_reported_its_cache_is_refused() -> None:
    with pytest.raises(ValueError, match="cached"):
        summarize_run(
            [{"all_first": 1.0, "cpu_seconds": 0.1}],
            started=0.0,
            objects=1,
            memory={"VmRSS": 1, "VmHWM": 1},
            changes=[],
        )


def test_per_object_figures_subtract_the_empty_run() -> None:
    empty = _run(0, rss=40 * MIB, cpu=0.5, cached=0.4)
    full = _run(100_000, rss=40 * MIB + 300_000_000, cpu=5.5, cached=3.4)
    figures = per_object(full, empty)
    assert figures["rss_bytes_per_object"] == pytest.approx(3000.0)
    assert figures["peak_rss_bytes_per_object"] == pytest.approx(3000.0)
    assert figures["cpu_us_per_object"] == pytest.approx(50.0)
    assert figures["list_seconds"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="one without"):
        per_object(empty, full)


def test_rounds_combine_as_medians_of_paired_differences() -> None:
    pairs = [
        (
            _run(1000, rss=50 * MIB + 3_000_000, cpu=1.0, cached=1.0),
            _run(0, rss=50 * MIB, cpu=0.5, cached=0.5),
        ),
        (
            _run(1000, rss=70 * MIB + 4_000_000, cpu=2.0, cached=1.0),
            _run(0, rss=70 * MIB, cpu=0.5, cached=0.5),
        ),
        (
            _run(1000, rss=60 * MIB + 3_500_000, cpu=1.5, cached=1.0),
            _run(0, rss=60 * MIB, cpu=1.5, cached=0.5),
        ),
    ]
    row = combine(pairs)
    # Each round against its own empty run, then the median: not the median full run less
    # the median empty run (60 MiB + 3.5 MB against 60 MiB would agree here; the CPU not).
    assert row["rss_bytes_per_object"] == pytest.approx(3500.0)
    assert row["cpu_us_per_object"] == pytest.approx(500.0)
    assert row["empty_rss_bytes"] == 60 * MIB
    assert row["objects"] == 1000
    assert len(row["rounds"]) == 3
