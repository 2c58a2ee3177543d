"""The soak's checks on hand-made records: each must catch the failure it is named after.

``python -m pytest benches/soak/test_checks.py -q`` (not part of the suite: no cluster, but
the soak itself is not in CI either)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checks


def rec(ev: str, key: str, mono: float, rv: int = 1, uid: str = "u") -> dict[str, Any]:
    return {"ev": ev, "key": key, "uid": uid, "rv": str(rv), "mono": mono}


def test_overlap_across_processes_and_an_open_reconcile_of_a_killed_one() -> None:
    a = checks.intervals("a", [rec("start", "k", 1), rec("end", "k", 2), rec("start", "k", 5)], 9)
    b = checks.intervals("b", [rec("start", "k", 2.5), rec("end", "k", 3)], 9)
    assert checks.overlaps(a + b) == []
    late = checks.intervals("c", [rec("start", "k", 8), rec("end", "k", 10)], 20)
    found = checks.overlaps(a + b + late)  # a's last reconcile never ended: it ran until 9
    assert [(f["first"], f["second"], f["first_open"]) for f in found] == [("a", "c", True)]


def test_lost_when_the_last_reconcile_saw_an_older_version_or_the_configmap_differs() -> None:
    widget = {
        "metadata": {
            "namespace": "ns",
            "name": "w",
            "uid": "u",
            "resourceVersion": "5",
            "generation": 2,
        },
        "spec": {"data": {"a": "{name}"}},
        "status": {"observedGeneration": 2},
    }
    cms = {"w-rendered": {"data": {"a": "w"}}}
    seen5 = checks.intervals("a", [rec("start", "ns/w", 1, rv=5), rec("end", "ns/w", 2)], 3)
    assert checks.lost([widget], cms, seen5) == []
    seen4 = checks.intervals("a", [rec("start", "ns/w", 1, rv=4), rec("end", "ns/w", 2)], 3)
    assert checks.lost([widget], cms, seen4)
    assert checks.lost([widget], {"w-rendered": {"data": {"a": "x"}}}, seen5)


def test_reconciled_after_delete() -> None:
    ivs = checks.intervals("a", [rec("start", "k", 10.5), rec("end", "k", 11)], 20)
    assert checks.after_delete({"u": 10.0}, ivs)[0] == []
    assert checks.after_delete({"u": 10.0 - checks.DELETE_LAG - 1}, ivs)[0]


def test_rss_growth_is_judged_on_medians_after_the_warmup() -> None:
    flat = [(float(t), 100 if t < 50 else 1000) for t in range(0, 400, 10)]
    verdict = checks.rss_growth(flat, since=0, warmup=50, window=100)
    assert verdict["judged"]
    assert verdict["ok"]
    growing = [(float(t), 1000 + t) for t in range(0, 400, 10)]
    assert not checks.rss_growth(growing, since=0, warmup=50, window=100)["ok"]
    assert not checks.rss_growth(flat[:20], since=0, warmup=50, window=100)["judged"]


def test_rss_is_judged_per_role_leader_windows_against_leader_windows() -> None:
    # A follower at 100 for 1000 s takes over and settles at 130: flat in each role.
    samples = [(float(t), 100 if t < 1000 else 130) for t in range(0, 2000, 10)]
    segments = checks.role_segments(0, 2000, leading_since=1000)
    assert [role for role, *_ in segments] == ["follower", "leader"]
    verdict = checks.rss_by_role(samples, segments, churn_start=0, warmup=100, window=200)
    assert verdict["ok"]
    assert all(r["judged"] for r in verdict["roles"].values())
    # the whole life at once sees the change of role as growth
    assert not checks.rss_growth(samples, since=0, warmup=100, window=200)["ok"]


def test_rss_growth_within_a_role_fails() -> None:
    segments = checks.role_segments(0, 2000, leading_since=1000)
    leader_grows = [
        (float(t), 100 if t < 1000 else 100 + (t - 1000) // 10) for t in range(0, 2000, 10)
    ]
    verdict = checks.rss_by_role(leader_grows, segments, churn_start=0, warmup=100, window=200)
    assert verdict["roles"]["follower"]["ok"]
    assert not verdict["roles"]["leader"]["ok"]
    assert not verdict["ok"]
    follower_grows = [(float(t), 100 + t // 10 if t < 1000 else 300) for t in range(0, 2000, 10)]
    verdict = checks.rss_by_role(follower_grows, segments, churn_start=0, warmup=100, window=200)
    assert not verdict["roles"]["follower"]["ok"]
    assert not verdict["ok"]


def test_a_role_too_short_to_judge_and_a_process_that_never_led() -> None:
    samples = [(float(t), 100 + t) for t in range(0, 2000, 10)]  # growing throughout
    short = checks.rss_by_role(
        samples, checks.role_segments(0, 2000, 1800), churn_start=0, warmup=100, window=200
    )
    assert not short["roles"]["leader"]["judged"]
    assert not short["ok"]  # the follower part is long enough, and it grew
    never = checks.role_segments(0, 2000, None)
    assert never == [("follower", 0, 2000)]
    assert checks.role_segments(0, 2000, 2500) == never  # a takeover after it ended
    # the warm-up counts from the churn's start when the role began before it
    flat_after = [(float(t), 50 if t < 500 else 100) for t in range(0, 2000, 10)]
    verdict = checks.rss_by_role(flat_after, never, churn_start=400, warmup=100, window=200)
    assert verdict["ok"]


def test_a_leader_is_warmed_up_from_its_takeover() -> None:
    # After the takeover the new leader fills its queue and connection pool: RSS ramps from
    # 100 to 130 in 150 s, then stays flat. Warmed up from the takeover, that is no growth;
    # warmed up from the start of the churn only, the ramp would be in the first window.
    def rss(t: int) -> int:
        return 100 if t < 1000 else min(130, 100 + (t - 1000) // 5)

    samples = [(float(t), rss(t)) for t in range(0, 2000, 10)]
    segments = checks.role_segments(0, 2000, leading_since=1000)
    verdict = checks.rss_by_role(samples, segments, churn_start=0, warmup=200, window=200)
    assert verdict["roles"]["leader"]["judged"]
    assert verdict["roles"]["leader"]["median_first"] == 130
    assert verdict["ok"]
