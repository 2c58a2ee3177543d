"""The example operators' tests on the fake cluster against the same scenarios on the real
control plane: paired runs (fake, control plane, fake, control plane, ...), pytest's
``call`` duration of each test, medians and their ratios.

The fake's tests (`tests/unit/test_widget_operator_fake.py`,
`tests/unit/test_tenant_operator_fake.py`) run the operator on a `FakeCluster` on virtual
time; the control plane's (`tests/kube/test_widget_operator.py`, the Tenant's
service-account test in `tests/kube/test_tenant_operator.py`) on the session's
`ControlPlane`, whose start is reported apart (it is a fixture's setup, not a test's call).
Prints one JSON document: each scenario's runs and medians on both, and the ratio of the
medians.

    flock /tmp/fastctl-heavy.lock .venv/bin/python benches/fake_vs_control_plane.py \
        [ROUNDS [OTHER_CHECKOUT/python]]
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parent.parent

FAKE = [
    "tests/unit/test_widget_operator_fake.py::test_widget_lifecycle",
    "tests/unit/test_widget_operator_fake.py::test_many_widgets_converge",
    "tests/unit/test_tenant_operator_fake.py::"
    "test_the_tenant_operator_and_its_webhooks_on_a_fake_cluster",
]
REAL = [
    "tests/kube/test_widget_operator.py::test_widget_lifecycle",
    "tests/kube/test_widget_operator.py::test_many_widgets_converge",
    "tests/kube/test_tenant_operator.py::test_the_tenant_operator_converges_as_its_service_account",
]
SCENARIOS = ["Widget: one Widget's life", "Widget: 100 Widgets at once", "Tenant: two lives"]

_DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)$", re.MULTILINE)


def durations(
    tests: list[str], *marks: str, package: str | None = None
) -> tuple[dict[str, float], float]:
    """Each test's ``call`` seconds (pytest's JUnit report, to the millisecond), and the
    longest ``setup`` (the control plane's start, from ``--durations``)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
        cmd += [*marks, "--durations=0", "--durations-min=0", f"--junitxml={report}"]
        cmd += ["-o", "junit_duration_report=call", *tests]
        env = {**os.environ, **({"PYTHONPATH": package} if package else {})}
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}")
        calls = {
            f"{case.get('file') or ''}::{case.get('name')}": float(case.get("time") or 0)
            for case in ElementTree.parse(report).iter("testcase")
        }
    setup = max(
        (float(s) for s, phase, _ in _DURATION.findall(out.stdout) if phase == "setup"),
        default=0.0,
    )
    return {_short(k, tests): v for k, v in calls.items()}, setup


def _short(key: str, tests: list[str]) -> str:
    """The test id of `tests` a report's case names (by its function name)."""
    name = key.rpartition("::")[2]
    return next(t for t in tests if t.endswith(f"::{name}"))


def main(rounds: int, before: str | None) -> dict[str, object]:
    """`rounds` paired runs; with `before` (another checkout's ``python/`` folder), the
    fake's tests on that package too, in each round (before, after, control plane)."""
    old: list[dict[str, float]] = []
    fake: list[dict[str, float]] = []
    real: list[dict[str, float]] = []
    starts: list[float] = []
    for _ in range(rounds):
        if before:
            old.append(durations(FAKE, package=before)[0])
        fake.append(durations(FAKE)[0])
        calls, start = durations(REAL, "-m", "kube")
        real.append(calls)
        starts.append(start)
    out: dict[str, object] = {"rounds": rounds, "control_plane_setup_s": starts}
    for name, f, r in zip(SCENARIOS, FAKE, REAL, strict=True):
        fs, rs = [run[f] for run in fake], [run[r] for run in real]
        fm, rm = statistics.median(fs), statistics.median(rs)
        entry: dict[str, object] = {
            "fake_s": fs,
            "control_plane_s": rs,
            "fake_median_s": fm,
            "control_plane_median_s": rm,
            "ratio": round(rm / fm, 1) if fm else None,
        }
        if old:
            bs = [run[f] for run in old]
            bm = statistics.median(bs)
            entry.update(fake_before_s=bs, fake_before_median_s=bm, ratio_before=round(rm / bm, 1))
        out[name] = entry
    fsum = [sum(run[f] for f in FAKE) for run in fake]
    rsum = [sum(run[r] for r in REAL) for run in real]
    out["all three"] = {
        "fake_median_s": statistics.median(fsum),
        "control_plane_median_s": statistics.median(rsum),
        "ratio": round(statistics.median(rsum) / statistics.median(fsum), 1),
    }
    return out


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(json.dumps(main(rounds, sys.argv[2] if len(sys.argv) > 2 else None), indent=1))
