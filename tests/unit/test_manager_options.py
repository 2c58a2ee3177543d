"""A Manager before it runs: its options and defaults, every refusal with the exact message a
user reads, its readiness as ``/readyz`` answers it, which watches its controllers share,
and its own metric."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from fastctl.kube._watcher import WatchConfig
from fastctl.runtime.controller import Controller
from fastctl.runtime.leader import LeaderElection
from fastctl.runtime.manager import Manager, ServerOptions
from fastctl.runtime.manager._watches import share_watches
from fastctl.runtime.sharding import Sharding

from .test_controller_relist import CHILD, NS, WIDGET, client

ELECTION = LeaderElection("l", identity="me")
SHARDING = Sharding("g", identity="me", slots=4)
API = client()  # one cluster: controllers on one client may share watches


async def _nothing(obj: Any, ctx: Any) -> None:
    return None


def _ctl(name: str = "widgets", *, namespace: str | None = NS) -> Controller:
    return Controller(API, WIDGET, _nothing, name=name, namespace=namespace)


def _manager(**kw: Any) -> Manager:
    return Manager(client(), metrics_port=None, probe_port=None, **kw)


def _message(exc: pytest.ExceptionInfo[BaseException]) -> str:
    return str(exc.value.args[0])


# -- options and defaults ------------------------------------------------------------------


def test_the_port_keywords_and_the_defaults() -> None:
    mgr = Manager(client(), metrics_port=9000, probe_port=9001)
    assert mgr.servers == ServerOptions(metrics_port=9000, probe_port=9001)
    assert Manager(client()).servers == ServerOptions()
    assert Manager(client()).drain_timeout == 30.0  # docs/contract.md


def test_servers_are_given_as_keywords_or_as_options_not_both() -> None:
    with pytest.raises(TypeError) as both:
        Manager(client(), metrics_port=1, servers=ServerOptions())
    assert _message(both) == "pass the options either as keywords or as servers=, not both"
    with pytest.raises(TypeError) as wrong:
        Manager(client(), servers={"metrics_port": 1})  # type: ignore[arg-type]
    assert _message(wrong) == "servers must be a ServerOptions, got dict"


def test_a_registry_given_is_the_one_served() -> None:
    registry = CollectorRegistry()
    mgr = Manager(client(), registry=registry, leader_election=ELECTION)
    assert mgr.registry is registry
    assert b"leader_election_master_status" in generate_latest(registry)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"metrics_port": 65536},
            "metrics_port must be a port number (0-65535) or None, got 65536",
        ),
        ({"metrics_port": -1}, "metrics_port must be a port number (0-65535) or None, got -1"),
        ({"probe_port": True}, "probe_port must be a port number (0-65535) or None, got True"),
        ({"probe_port": "80"}, "probe_port must be a port number (0-65535) or None, got '80'"),
        (
            {"metrics_port": None, "probe_port": None, "debug_queue_port": 70000},
            "debug_queue_port must be a port number (0-65535) or None, got 70000",
        ),
    ],
)
def test_a_port_that_is_not_one_is_refused_by_name(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="port number") as refused:
        ServerOptions(**options)
    assert _message(refused) == message


def test_the_whole_port_range_is_accepted() -> None:
    ServerOptions(metrics_port=0, probe_port=65535, debug_queue_port=None)


def test_a_certificate_for_plain_http_is_refused() -> None:
    from fastctl._tls import ServingCertificate

    certificate = object.__new__(ServingCertificate)
    with pytest.raises(ValueError, match="unused") as refused:
        ServerOptions(metrics_secure=False, metrics_certificate=certificate)
    assert _message(refused) == (
        "metrics_certificate with metrics_secure=False: it would be unused"
    )


# -- adding ------------------------------------------------------------------------------


def test_what_cannot_be_added_is_refused_with_why() -> None:
    with pytest.raises(TypeError) as not_a_controller:
        _manager().add("widgets")  # type: ignore[arg-type]
    assert _message(not_a_controller) == "expected a fastctl.Controller, got str"
    mgr = _manager().add(_ctl())
    with pytest.raises(ValueError, match="two controllers") as twice:
        mgr.add(_ctl())
    assert _message(twice) == (
        "two controllers named 'widgets': give one a name= (metrics and logs tell "
        "controllers apart by name)"
    )
    with pytest.raises(ValueError, match="sharded=False") as unsharded:
        _manager(sharding=SHARDING).add(_ctl(), sharded=False)
    assert _message(unsharded) == (
        "add(controller, sharded=False) needs a Manager with both sharding= and "
        "leader_election=: without leader election the controller would run on every "
        "replica at once"
    )


async def test_a_manager_with_nothing_to_run_is_refused() -> None:
    with pytest.raises(ValueError, match="no controllers") as empty:
        await _manager().run()
    assert _message(empty) == "Manager has no controllers: add one with manager.add(...)"


# -- readiness -----------------------------------------------------------------------------


class Component:
    """A runnable; `ready` is what its ``is_ready()`` answers (no such method if absent)."""

    def __init__(self, ready: object = None) -> None:
        self.started = False
        if ready is not None:
            self.is_ready = lambda: ready

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        pass


class Webhooks(Component):
    pass


@pytest.mark.parametrize(
    ("answers", "readiness"),
    [
        ([None, True], (True, "ready")),
        ([None, (True, "")], (True, "ready")),
        ([None, False], (False, "Webhooks not ready")),
        ([None, (False, "no certificate yet")], (False, "no certificate yet")),
        ([None, (False, "")], (False, "Webhooks not ready")),
    ],
)
def test_readiness_asks_every_runnable_that_can_say(
    answers: list[object], readiness: tuple[bool, str]
) -> None:
    """A runnable without ``is_ready`` is skipped, the others are asked in turn; a bare
    False gets a reason naming the runnable's type."""
    mgr = _manager()
    for answer in answers:
        mgr.add_runnable(Component(answer) if answer is None else Webhooks(answer))
    assert mgr.readiness() == readiness
    assert mgr.is_ready() is readiness[0]


def test_readiness_waits_for_every_controllers_caches() -> None:
    mgr = _manager().add(_ctl())
    assert mgr.readiness() == (False, "controller widgets: caches not synced")
    assert mgr.is_ready() is False


# -- which watches are shared --------------------------------------------------------------


def test_controllers_share_a_watch_only_of_the_same_namespace() -> None:
    a, b, c = _ctl("a"), _ctl("b"), _ctl("c", namespace="other")
    shared = share_watches([a, b, c], sharded=lambda ctl: False)
    assert [w.name for w in shared.watches] == [str(WIDGET)]
    assert set(shared.sources["a"]) == set(shared.sources["b"]) == {None}
    assert shared.sources["c"] == {}


def test_a_sharded_controller_shares_its_related_watches_not_its_primary() -> None:
    a, b = _ctl("a").owns(CHILD), _ctl("b").owns(CHILD)
    shared = share_watches([a, b], sharded=lambda ctl: True)
    assert [w.name for w in shared.watches] == [str(CHILD)]
    assert set(shared.sources["a"]) == set(shared.sources["b"]) == {0}


def test_controllers_with_other_watch_options_do_not_share() -> None:
    a = _ctl("a")
    b = Controller(
        API, WIDGET, _nothing, name="b", namespace=NS, watch_config=WatchConfig(page_size=1)
    )
    assert share_watches([a, b], sharded=lambda ctl: False).watches == ()


# -- the Manager's own metric ----------------------------------------------------------------


def test_the_leader_gauge_is_described() -> None:
    text = generate_latest(_manager(leader_election=ELECTION).registry).decode()
    assert (
        "# HELP leader_election_master_status 1 if this replica is the leader of the lease, "
        "else 0" in text
    )
    assert 'leader_election_master_status{name="l"} 0.0' in text
    assert "leader_election_master_status" not in generate_latest(_manager().registry).decode()
