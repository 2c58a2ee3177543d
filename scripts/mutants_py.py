"""The Python half of `scripts/mutants`: run mutmut on one target and summarise the results.

mutmut reads one configuration per directory and mutates a copy of the tree under
`./mutants`, so each target gets its own scratch directory, `target/mutants/<target>/`,
holding a copy of the package as `src/fastctl` (mutmut names modules from their path and
knows only the `src/` prefix), of `tests/`, and a `pyproject.toml` with that target's
`[tool.mutmut]` section. The mutated copy's `src/` is put first on the import path, so the
tests import the mutated package and never the working tree.

Each target is judged by the fast tests that need no API server and cover it (TARGETS).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "_mutants_pytest"
PLUGIN_FILE = f"{PLUGIN}.py"


@dataclass(frozen=True)
class Target:
    """What to mutate (globs over `python/...`) and which tests judge the mutants."""

    files: tuple[str, ...]
    tests: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    timeout_multiplier: float = 15.0
    """A mutant that runs this many times longer than its tests did unmutated is a timeout
    (mutmut's default: 15)."""


TARGETS: dict[str, Target] = {
    "applier": Target(
        ("python/fastctl/_applier.py",),
        (
            "tests/unit/test_applier.py",
            "tests/unit/test_applier_edges.py",
            "tests/unit/test_applier_details.py",
        ),
        # Its hung mutants dominate the run (each waits out the limit): a survivor runs in
        # about its measured time, far below five times it.
        timeout_multiplier=5.0,
    ),
    "leader": Target(
        (
            "python/fastctl/runtime/leader/_rules.py",
            "python/fastctl/runtime/leader/_elector.py",
            "python/fastctl/runtime/leader/_lease_api.py",
        ),
        (
            "tests/unit/test_leader.py",
            "tests/unit/test_leader_chaos.py",
            "tests/unit/test_leader_timing.py",
            "tests/unit/test_leader_edges.py",
            "tests/unit/test_lease_api.py",
        ),
        # The chaos test runs once per mutant: fewer examples, the same for every mutant.
        # A mutant can leave the elector spinning the event loop (no timeout inside the loop
        # can end that): pytest-timeout fails such a test after 20 s instead of mutmut's
        # 90 s limit.
        env=(("FASTCTL_LEADER_CHAOS_EXAMPLES", "40"), ("PYTEST_ADDOPTS", "--timeout=20")),
    ),
    "store": Target(
        ("python/fastctl/kube/_store.py",),
        ("tests/unit/test_store.py", "tests/unit/test_controller_relist.py"),
    ),
    "watcher": Target(
        ("python/fastctl/kube/_watcher.py",),
        # The watch loop itself (`_Watcher.run`: list, watch, bookmarks, 410, backoff) is
        # driven without a server by the fallback, sharded and fuzz tests (a scripted
        # transport); test_watcher.py alone only reaches the config and event parsing.
        (
            "tests/unit/test_watcher.py",
            "tests/unit/test_watcher_fallbacks.py",
            "tests/unit/test_watcher_sharded.py",
            "tests/unit/test_fuzz_watch.py",
            "tests/unit/test_controller_relist.py",
        ),
    ),
    "controller": Target(
        (
            "python/fastctl/runtime/controller/_controller.py",
            "python/fastctl/runtime/controller/_spec.py",
            "python/fastctl/runtime/controller/_environment.py",
            "python/fastctl/runtime/controller/_wrappers.py",
            "python/fastctl/runtime/controller/_run.py",
        ),
        # Every unit test that runs a Controller (on a scripted watch or a fake API
        # server); the Manager's run it in the environments a Manager builds.
        (
            "tests/unit/test_controller_run.py",
            "tests/unit/test_controller_builder.py",
            "tests/unit/test_triggers.py",
            "tests/unit/test_controller_relist.py",
            "tests/unit/test_controller_filters.py",
            "tests/unit/test_controller_signals.py",
            "tests/unit/test_children.py",
            "tests/unit/test_controller_owner_refs.py",
            "tests/unit/test_settled_events.py",
            "tests/unit/test_typed_controller.py",
            "tests/unit/test_startup_retry.py",
            "tests/unit/test_inspect.py",
            "tests/unit/test_debounce.py",
            "tests/unit/test_fair_by.py",
            "tests/unit/test_group_concurrency.py",
            "tests/unit/test_options.py",
            "tests/unit/test_rbac.py",
            "tests/unit/test_manager_shared_watch.py",
            "tests/unit/test_manager_mixed.py",
            "tests/unit/test_manager_drain.py",
            "tests/unit/test_sharding_runtime.py",
            # inspect, queue_summary and scheduler_stats on the loop's clock (the rest of
            # test_clock.py reads the source, which mutmut rewrites).
            "tests/unit/test_clock.py::"
            "test_looking_into_a_controller_keeps_its_scheduler_on_the_virtual_clock",
        ),
    ),
    "manager": Target(
        (
            "python/fastctl/runtime/manager/_manager.py",
            "python/fastctl/runtime/manager/_roles.py",
            "python/fastctl/runtime/manager/_watches.py",
            "python/fastctl/runtime/manager/_servers.py",
            "python/fastctl/runtime/manager/_drain.py",
            "python/fastctl/runtime/manager/_collectors.py",
        ),
        (
            "tests/unit/test_manager_options.py",
            "tests/unit/test_manager_servers.py",
            "tests/unit/test_manager_lifecycle.py",
            "tests/unit/test_manager_ends.py",
            "tests/unit/test_manager_drain.py",
            "tests/unit/test_manager_mixed.py",
            "tests/unit/test_manager_scrape.py",
            "tests/unit/test_manager_shared_watch.py",
            "tests/unit/test_controller_signals.py",
            "tests/unit/test_sharding_config.py",
            "tests/unit/test_sharding_runtime.py",
            "tests/unit/test_startup_retry.py",
            "tests/unit/test_run_flags.py",
            "tests/unit/test_options.py",
            "tests/unit/test_webhook_server.py",
            "tests/unit/test_webhook_managed.py",
        ),
    ),
    "sharding": Target(
        (
            "python/fastctl/runtime/sharding/_rules.py",
            "python/fastctl/runtime/sharding/_slots.py",
            "python/fastctl/runtime/sharding/_assignment.py",
            "python/fastctl/runtime/sharding/_member.py",
            "python/fastctl/runtime/sharding/_member_api.py",
            "python/fastctl/runtime/sharding/_gate.py",
            "python/fastctl/runtime/sharding/_watch.py",
            "python/fastctl/runtime/sharding/_handover.py",
            "python/fastctl/runtime/sharding/_metrics.py",
        ),
        # The protocol's own tests, which run real members on a virtual clock (the end-to-end
        # property, the slow-server timings, the simulation's sharded worlds), and the gate's
        # and the primary watch's tests (a sharded controller). Not the sharded Managers of
        # test_manager_lifecycle.py and test_manager_mixed.py: they wait for a member on the
        # real clock, so a mutant that keeps the member from settling hangs them, and every
        # line of `_member.py` and `_rules.py` they reach the tests above reach too
        # (docs/testing.md, "The sharding target's tests").
        (
            "tests/unit/test_sharding_config.py",
            "tests/unit/test_sharding_handover.py",
            "tests/unit/test_sharding_lease_api.py",
            "tests/unit/test_sharding_members.py",
            "tests/unit/test_sharding_protocol.py",
            "tests/unit/test_sharding_timing.py",
            "tests/unit/test_sharding_runtime.py",
            "tests/unit/test_sharding_slots.py",
            "tests/unit/test_sharding_edges.py",
            "tests/unit/test_controller_run.py",
            "tests/sim/test_sharding.py",
        ),
        # The same schedules for every mutant, fewer than CI runs. A test that has used 10 s
        # of CPU more than five times its time in the stats run is a timeout
        # (scripts/mutants_pytest.py): a mutant that keeps a member from settling spins the
        # virtual clock, and costs seconds instead of five times all its tests.
        env=(
            ("FASTCTL_SHARDING_PROTOCOL_EXAMPLES", "15"),
            ("FASTCTL_SIM_EXAMPLES", "10"),
            ("FASTCTL_MUTANTS_TEST_SECONDS", "10"),
        ),
        timeout_multiplier=5.0,
    ),
    "own_writes": Target(
        ("python/fastctl/runtime/_own_writes.py",),
        (
            "tests/unit/test_own_writes.py",
            "tests/unit/test_own_writes_registry.py",
            "tests/unit/test_controller_filters.py",
            "tests/unit/test_settled_events.py",
        ),
    ),
    "settled_events": Target(
        ("python/fastctl/runtime/_settled_events.py",),
        (
            "tests/unit/test_settled_events.py",
            "tests/unit/test_own_writes.py",
            "tests/unit/test_controller_filters.py",
        ),
    ),
    "filters": Target(
        ("python/fastctl/runtime/_filters.py",),
        (
            "tests/unit/test_event_filters.py",
            "tests/unit/test_controller_filters.py",
            "tests/unit/test_own_writes.py",
            "tests/unit/test_controller_run.py",
        ),
    ),
    "children": Target(
        ("python/fastctl/runtime/_children.py", "python/fastctl/runtime/_triggers.py"),
        (
            "tests/unit/test_children.py",
            "tests/unit/test_triggers.py",
            "tests/unit/test_event_filters.py",
            "tests/unit/test_controller_relist.py",
            "tests/unit/test_controller_run.py",
        ),
    ),
}

# mutmut's exit codes, folded into the columns of the summary.
STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    -24: "timeout",
    24: "timeout",
    152: "timeout",
    255: "timeout",
}


def _toml_list(items: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def prepare(name: str, target: Target) -> Path:
    """A fresh scratch directory for `name` (old results are dropped: each run is whole)."""
    scratch = ROOT / "target" / "mutants" / name
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc")
    shutil.copytree(ROOT / "python", scratch / "src", ignore=ignore)
    shutil.copytree(ROOT / "tests", scratch / "tests", ignore=ignore)
    write_config(scratch, target)
    # Python caches "no importer" for a path that does not exist at start-up, so the mutated
    # tree's import root must exist before mutmut starts.
    (scratch / "mutants" / "src").mkdir(parents=True)
    _install_plugin(scratch)
    return scratch


def _install_plugin(scratch: Path) -> None:
    """The pytest plugin of the runs (`scripts/mutants_pytest.py`: signals a mutant leaves
    unhandled fail the tests), importable from the mutated tree's import root."""
    shutil.copy(ROOT / "scripts" / "mutants_pytest.py", scratch / "mutants" / "src" / PLUGIN_FILE)


def write_config(scratch: Path, target: Target) -> None:
    config = (ROOT / "pyproject.toml").read_text()
    config += (
        "\n[tool.mutmut]\n"
        'source_paths = ["src/fastctl"]\n'
        f"only_mutate = {_toml_list([f.replace('python/', 'src/', 1) for f in target.files])}\n"
        f"pytest_add_cli_args_test_selection = {_toml_list(target.tests)}\n"
        f'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "{PLUGIN}"]\n'
        # The scratch directory sits inside the repository: git's view of it is not the copy's.
        "use_git_change_detection = false\n"
        f"timeout_multiplier = {target.timeout_multiplier}\n"
    )
    (scratch / "pyproject.toml").write_text(config)


def results(scratch: Path) -> dict[str, str]:
    """Mutant name -> status, from mutmut's per-file `.meta` records."""
    out: dict[str, str] = {}
    for meta in sorted((scratch / "mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        for key, code in data.get("exit_code_by_key", {}).items():
            out[key] = STATUS.get(code, "suspicious") if code is not None else "not checked"
    return out


def print_summary(title: str, counts: Counter[str], survivors: list[str]) -> None:
    generated = sum(counts.values())
    unviable = counts["unviable"]
    caught = counts["killed"] + counts["timeout"]
    viable = generated - unviable
    score = 100.0 * caught / viable if viable else 100.0
    print(f"== {title}")
    print(
        f"generated {generated}  killed {counts['killed']}  survived {len(survivors)}  "
        f"timeout {counts['timeout']}  unviable {unviable}  score {score:.1f}% "
        "((killed + timeout) / (generated - unviable))"
    )
    for s in survivors:
        print(f"  survived: {s}")


def run(name: str) -> int:
    target = TARGETS[name]
    scratch = prepare(name, target)
    env = _env(scratch, target)
    rc = subprocess.call(["mutmut", "run", "--max-children", "1"], cwd=scratch, env=env)
    _say_exit(rc)
    summary(name)
    return rc


def _env(scratch: Path, target: Target) -> dict[str, str]:
    """The mutated tree first on the import path, the target's settings, and the log of each
    mutant's run (`runs.log`: start, end and status, to tell a timeout from a pause)."""
    log = str(scratch / "runs.log")
    return dict(
        os.environ,
        PYTHONPATH=str(scratch / "mutants" / "src"),
        FASTCTL_MUTANTS_LOG=log,
        **dict(target.env),
    )


def _say_exit(rc: int) -> None:
    """mutmut's own failures (or a signal that ended it) would otherwise look like a run
    that merely stopped early ("not run yet")."""
    if rc < 0:
        print(f"mutmut was ended by signal {-rc}", file=sys.stderr)
    elif rc != 0:
        print(f"mutmut exited with status {rc}", file=sys.stderr)


def rerun(name: str, names: list[str]) -> int:
    """Run the survivors of the last run of `name` again (or the mutants `names`), against
    the tests as they are now (the copy's `tests/` and test selection are refreshed; the
    mutants and the other results are kept)."""
    target = TARGETS[name]
    scratch = ROOT / "target" / "mutants" / name
    survivors = names or sorted(
        k for k, v in results(scratch).items() if v in ("survived", "no tests")
    )
    if not survivors:
        return summary(name)
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc")
    shutil.copytree(ROOT / "tests", scratch / "tests", ignore=ignore, dirs_exist_ok=True)
    write_config(scratch, target)
    _install_plugin(scratch)
    env = _env(scratch, target)
    # mutmut forgets the results of the mutants it was not asked to run: keep them.
    metas = sorted((scratch / "mutants").rglob("*.py.meta"))
    before = {m: json.loads(m.read_text()).get("exit_code_by_key", {}) for m in metas}
    cmd = ["mutmut", "run", "--max-children", "1", *survivors]
    rc = subprocess.call(cmd, cwd=scratch, env=env)
    _say_exit(rc)
    for meta, old in before.items():
        data = json.loads(meta.read_text())
        codes = data.get("exit_code_by_key", {})
        data["exit_code_by_key"] = {k: old.get(k) if v is None else v for k, v in codes.items()}
        meta.write_text(json.dumps(data))
    summary(name)
    return rc


def summary(name: str) -> int:
    """The summary of the last (or the running) mutmut run of `name`; mutants not yet run
    are counted apart."""
    target = TARGETS[name]
    scratch = ROOT / "target" / "mutants" / name
    status = results(scratch)
    not_run = sum(1 for v in status.values() if v == "not checked")
    status = {k: v for k, v in status.items() if v != "not checked"}
    counts = Counter(status.values())
    survivors = sorted(k for k, v in status.items() if v not in ("killed", "timeout"))
    print_summary(
        f"{name} ({', '.join(target.files)}; tests: {', '.join(target.tests)})",
        counts,
        [f"{s} [{status[s]}]" for s in survivors],
    )
    if not_run:
        print(f"  not run yet: {not_run}")
    print(f"  (show one: cd {scratch} && mutmut show NAME)")
    return 0


def summary_rust(out: Path) -> int:
    """cargo-mutants writes one line per mutant in caught/missed/timeout/unviable.txt."""

    def lines(name: str) -> list[str]:
        path = out / name
        return [x for x in path.read_text().splitlines() if x] if path.exists() else []

    counts: Counter[str] = Counter(
        killed=len(lines("caught.txt")),
        survived=len(lines("missed.txt")),
        timeout=len(lines("timeout.txt")),
        unviable=len(lines("unviable.txt")),
    )
    print_summary("rust (src/scheduler/, judged by cargo test --lib)", counts, lines("missed.txt"))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "targets":
        print("\n".join(TARGETS))
        sys.exit(0)
    if (
        len(sys.argv) > 2
        and sys.argv[1] in ("run", "rerun", "summary")
        and sys.argv[2] not in TARGETS
    ):
        print(
            f"unknown target {sys.argv[2]!r}; targets: rust, all, {', '.join(TARGETS)}",
            file=sys.stderr,
        )
        sys.exit(2)
    if sys.argv[1] == "run":
        sys.exit(run(sys.argv[2]))
    if sys.argv[1] == "rerun":
        sys.exit(rerun(sys.argv[2], sys.argv[3:]))
    if sys.argv[1] == "summary":
        sys.exit(summary(sys.argv[2]))
    sys.exit(summary_rust(Path(sys.argv[2])))
