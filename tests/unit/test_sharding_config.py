"""Choosing sharding: the ``fastctl run`` flags build the `Sharding` they say, and a command
line that mixes sharding and leader election must name the leader-elected controllers
(``--unsharded``), checked before anything starts (docs/sharding.md)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.cli import build_parser, main
from fastctl.cli._run_options import configure
from fastctl.runtime.leader import LeaderElection
from fastctl.runtime.manager import Manager
from fastctl.runtime.sharding import Sharding


def parse(*extra: str) -> Sharding | None:
    args = build_parser().parse_args(["run", "nowhere:make", *extra])
    manager = Manager(ApiClient.__new__(ApiClient), metrics_port=None, probe_port=None)
    configure(manager, args, built_by=None)
    made = manager.sharding
    assert made is None or isinstance(made, Sharding)
    return made


def test_the_flags_build_the_sharding_they_say() -> None:
    assert parse() is None
    made = parse(
        *("--shard-group", "widgets", "--shard-key", "namespace", "--shard-slots", "32"),
        *("--lease-namespace", "ops", "--lease-duration", "20", "--renew-deadline", "12"),
        *("--retry-period", "3"),
    )
    assert made is not None
    assert (made.group, made.key, made.slots, made.namespace) == ("widgets", "namespace", 32, "ops")
    assert (made.lease_duration, made.renew_deadline, made.retry_period) == (20, 12, 3)
    assert parse("--shard-group", "widgets").key == "uid"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shard-group", "g", "--leader-elect"], "name the leader-elected controllers"),
        (["--unsharded", "x"], "--unsharded needs --shard-group and --leader-elect"),
        (["--unsharded", "x", "--leader-elect"], "--unsharded needs --shard-group and"),
    ],
)
def test_mixing_the_modes_on_the_command_line_is_checked_before_the_target_loads(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The target does not exist: the refusal must come first.
    code = main(["run", "no_such_module:make", *argv])
    assert code == 1
    assert message in capsys.readouterr().err


def test_a_manager_with_both_modes_shards_every_controller_by_default() -> None:
    client = ApiClient.__new__(ApiClient)  # never used
    mgr = Manager(client, leader_election=LeaderElection("x"), sharding=Sharding("g"))
    assert mgr.sharding is not None
    assert mgr.leader_election is not None
