"""Every ``fastctl run`` flag takes effect on the Manager that runs the operator, or the
command stops with an error naming the flag: for a factory that builds its own Manager as
for Controllers the CLI puts in one (docs/authoring.md, "Running an operator").

Each case runs ``fastctl run`` through `main` with `Manager.run` replaced by a recorder, so
what is checked is the Manager as it would have run. `test_every_flag_has_a_case` fails
when a flag is added to ``fastctl run`` without a case here.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fastctl import RateLimit
from fastctl.cli import build_parser, main
from fastctl.runtime.manager import Manager
from fastctl.webhook import ManagedWebhookServer, WebhookServer

OPS = Path(__file__).parent / "operators" / "flagged.py"
MAKE, BARE, ELECTED, CONTROLLERS = (
    f"{OPS}:{n}" for n in ("make", "bare", "elected", "controllers")
)

RAN_ON: list[type] = []
"""The type of the loop each recorded `Manager.run` ran on."""


def _ran_on() -> type:
    """The type of the loop the last recorded `Manager.run` ran on."""
    return RAN_ON[-1]


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Manager]]:
    """The Managers `fastctl run` would have run (run() records instead of running)."""
    seen: list[Manager] = []

    async def record(self: Manager) -> None:
        seen.append(self)
        RAN_ON.append(type(asyncio.get_running_loop()))

    monkeypatch.setattr(Manager, "run", record)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield seen
    root.handlers[:], root.level = handlers, level


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return path


def run(ran: list[Manager], *argv: str, webhooks: bool = False) -> Manager:
    """`fastctl run` with `argv`; the Manager it would have run."""
    extra = [] if webhooks else ["--no-webhooks"]
    assert main(["run", *argv, *extra]) == 0
    assert len(ran) == 1
    return ran[0]


def refused(capsys: pytest.CaptureFixture[str], flag: str, *argv: str) -> str:
    """`fastctl run` with `argv` exits non-zero naming `flag`; the message."""
    assert main(["run", *argv]) != 0
    err = capsys.readouterr().err
    assert flag in err, err
    return err


Check = Callable[[list[Manager], pytest.CaptureFixture[str], Path], None]
CASES: dict[str, list[Check]] = {}


def case(flag: str) -> Callable[[Check], Check]:
    def register(check: Check) -> Check:
        CASES.setdefault(flag, []).append(check)
        return check

    return register


@case("--kubeconfig")
def _kubeconfig(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig))
    assert mgr.client.configuration.host == "https://127.0.0.1:6443"
    assert mgr.controllers[0].client is mgr.client  # the factory got that client


@case("--namespace")
def _namespace(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--namespace", "shop")
    assert mgr.controllers[0].namespace == "shop"
    refused(capsys, "--namespace", BARE, "--kubeconfig", str(kubeconfig), "--namespace", "x")


@case("--concurrency")
def _concurrency(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--concurrency", "3")
    assert mgr.controllers[0].concurrency == 3
    refused(capsys, "--concurrency", BARE, "--kubeconfig", str(kubeconfig), "--concurrency", "3")


@case("--leader-elect")
def _leader_elect(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--leader-elect", "mine")
    assert mgr.leader_election is not None
    assert mgr.leader_election.name == "mine"
    refused(capsys, "--leader-elect", ELECTED, "--kubeconfig", str(kubeconfig), "--leader-elect")


@case("--shard-group")
def _shard_group(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--shard-group", "g")
    assert mgr.sharding is not None
    assert mgr.sharding.group == "g"
    refused(capsys, "--shard-group", ELECTED, "--kubeconfig", str(kubeconfig), "--shard-group", "g")


@case("--unsharded")
def _unsharded(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    both = ("--shard-group", "g", "--leader-elect", "l", "--unsharded", "cms")
    mgr = run(ran, CONTROLLERS, "--kubeconfig", str(kubeconfig), *both)
    assert mgr._elected(mgr.controllers[0])
    refused(capsys, "--unsharded", MAKE, "--kubeconfig", str(kubeconfig), *both)


@case("--shard-key")
def _shard_key(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    argv = (MAKE, "--kubeconfig", str(kubeconfig), "--shard-group", "g")
    mgr = run(ran, *argv, "--shard-key", "namespace")
    assert mgr.sharding is not None
    assert mgr.sharding.key == "namespace"
    refused(capsys, "--shard-key", MAKE, "--kubeconfig", str(kubeconfig), "--shard-key", "uid")


@case("--shard-slots")
def _shard_slots(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(
        ran, MAKE, "--kubeconfig", str(kubeconfig), "--shard-group", "g", "--shard-slots", "64"
    )
    assert mgr.sharding is not None
    assert mgr.sharding.slots == 64
    refused(capsys, "--shard-slots", MAKE, "--kubeconfig", str(kubeconfig), "--shard-slots", "8")


def _lease_case(flag: str, value: str, read: Callable[[Any], object], expected: object) -> Check:
    def check(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
        mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--leader-elect", "l", flag, value)
        assert read(mgr.leader_election) == expected
        ran.clear()
        mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--shard-group", "g", flag, value)
        assert read(mgr.sharding) == expected
        refused(capsys, flag, MAKE, "--kubeconfig", str(kubeconfig), flag, value)
        refused(capsys, flag, ELECTED, "--kubeconfig", str(kubeconfig), flag, value)

    return check


case("--lease-namespace")(_lease_case("--lease-namespace", "ops", lambda c: c.namespace, "ops"))
case("--lease-duration")(_lease_case("--lease-duration", "21", lambda c: c.lease_duration, 21))
case("--renew-deadline")(_lease_case("--renew-deadline", "9", lambda c: c.renew_deadline, 9))
case("--retry-period")(_lease_case("--retry-period", "1.5", lambda c: c.retry_period, 1.5))


@case("--drain-timeout")
def _drain_timeout(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--drain-timeout", "7")
    assert mgr.drain_timeout == 7
    refused(
        capsys, "--drain-timeout", MAKE, "--kubeconfig", str(kubeconfig), "--drain-timeout", "nan"
    )


def _rate_limit_case(flag: str) -> Check:
    def check(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
        config = ("--kubeconfig", str(kubeconfig))
        mgr = run(ran, MAKE, *config, "--qps", "25", "--burst", "40")
        assert mgr.rate_limit == RateLimit(qps=25.0, burst=40)
        ran.clear()
        assert run(ran, MAKE, *config).rate_limit is None  # none unless asked for
        given = ("--qps", "7") if flag == "--qps" else ("--burst", "7")
        refused(capsys, "--qps and --burst go together", MAKE, *config, *given)
        refused(capsys, flag, MAKE, *config, "--qps", "0", "--burst", "1")
        refused(capsys, flag, ELECTED, *config, "--qps", "7", "--burst", "9")  # its own: one place

    return check


case("--qps")(_rate_limit_case("--qps"))
case("--burst")(_rate_limit_case("--burst"))


@case("--metrics-port")
def _metrics_port(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--metrics-port", "9100")
    assert mgr.servers.metrics_port == 9100
    ran.clear()
    assert (
        run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--metrics-port", "0").servers.metrics_port
        is None
    )
    refused(
        capsys, "--metrics-port", MAKE, "--kubeconfig", str(kubeconfig), "--metrics-port", "70000"
    )


@case("--metrics-insecure")
def _metrics_insecure(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--metrics-insecure")
    assert not mgr.servers.metrics_secure


@case("--metrics-cert-dir")
def _metrics_cert_dir(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    from fastctl._tls import ServingCertificate

    where = kubeconfig.parent / "metrics-tls"
    made = ServingCertificate.self_signed(where, ["localhost"], purpose="metrics")
    made.cert_file.rename(where / "tls.crt")
    made.key_file.rename(where / "tls.key")
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--metrics-cert-dir", str(where))
    assert mgr.servers.metrics_certificate is not None
    refused(
        capsys,
        "--metrics-cert-dir",
        MAKE,
        "--kubeconfig",
        str(kubeconfig),
        "--metrics-cert-dir",
        "/nonexistent",
    )


@case("--probe-port")
def _probe_port(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--probe-port", "9101")
    assert mgr.servers.probe_port == 9101


@case("--debug-queue")
def _debug_queue(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--debug-queue", "9102")
    assert mgr.servers.debug_queue_port == 9102


@case("--log-level")
def _log_level(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--log-level", "DEBUG")
    assert logging.getLogger().level == logging.DEBUG
    refused(capsys, "--log-level", MAKE, "--kubeconfig", str(kubeconfig), "--log-level", "LOUD")


@case("--log-format")
def _log_format(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    from fastctl.log import JsonFormatter

    run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--log-format", "json")
    assert isinstance(logging.getLogger().handlers[0].formatter, JsonFormatter)


@case("--tracing")
def _tracing(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    from fastctl import _tracing

    for target in (MAKE, CONTROLLERS):
        ran.clear()
        assert run(ran, target, "--kubeconfig", str(kubeconfig), "--tracing").tracing is True
    formatter = logging.getLogger().handlers[0].formatter
    assert formatter is not None
    assert "trace_id=%(trace_id)s" in str(formatter._fmt)
    ran.clear()
    assert run(ran, MAKE, "--kubeconfig", str(kubeconfig)).tracing is False
    with pytest.MonkeyPatch.context() as patch:  # the otel extra not installed
        patch.setattr(_tracing, "available", lambda: False)
        err = refused(capsys, "--tracing", MAKE, "--kubeconfig", str(kubeconfig), "--tracing")
    assert "fastctl[otel]" in err


@case("--webhook-cert-dir")
def _webhook_cert_dir(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    from fastctl._tls import ServingCertificate

    where = kubeconfig.parent / "webhook-tls"
    made = ServingCertificate.self_signed(where, ["localhost"])
    made.cert_file.rename(where / "tls.crt")
    made.key_file.rename(where / "tls.key")
    argv = (MAKE, "--kubeconfig", str(kubeconfig), "--webhook-cert-dir", str(where))
    mgr = run(ran, *argv, "--webhook-port", "9555", webhooks=True)
    (server,) = [r for r in mgr.runnables if isinstance(r, WebhookServer)]
    assert not isinstance(server, ManagedWebhookServer)
    assert server.port == 9555
    refused(
        capsys,
        "--webhook-cert-dir",
        MAKE,
        "--kubeconfig",
        str(kubeconfig),
        "--webhook-cert-dir",
        "/nonexistent",
    )


@case("--webhook-managed")
def _webhook_managed(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(
        ran, MAKE, "--kubeconfig", str(kubeconfig), "--webhook-managed", "flags", webhooks=True
    )
    (server,) = [r for r in mgr.runnables if isinstance(r, ManagedWebhookServer)]
    assert server.name == "flags"
    assert server.service is None  # local development: at this process's own address


@case("--webhook-service")
def _webhook_service(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    argv = (MAKE, "--kubeconfig", str(kubeconfig), "--webhook-managed", "flags")
    mgr = run(ran, *argv, "--webhook-service", "op-webhook.ops", webhooks=True)
    (server,) = [r for r in mgr.runnables if isinstance(r, ManagedWebhookServer)]
    assert server.service is not None
    assert (server.service.name, server.service.namespace) == ("op-webhook", "ops")
    refused(
        capsys,
        "--webhook-service",
        MAKE,
        "--kubeconfig",
        str(kubeconfig),
        "--webhook-service",
        "a.b",
    )


@case("--webhook-port")
def _webhook_port(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    argv = (MAKE, "--kubeconfig", str(kubeconfig), "--webhook-managed", "flags")
    mgr = run(ran, *argv, "--webhook-port", "9556", webhooks=True)
    (server,) = [r for r in mgr.runnables if isinstance(r, WebhookServer)]
    assert server.port == 9556
    refused(
        capsys,
        "--webhook-port",
        MAKE,
        "--kubeconfig",
        str(kubeconfig),
        "--webhook-port",
        "9556",
        "--no-webhooks",
    )


@case("--webhook-host")
def _webhook_host(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    argv = (MAKE, "--kubeconfig", str(kubeconfig), "--webhook-managed", "flags")
    mgr = run(ran, *argv, "--webhook-host", "127.0.0.1", webhooks=True)
    (server,) = [r for r in mgr.runnables if isinstance(r, WebhookServer)]
    assert server.host == "127.0.0.1"


@case("--no-webhooks")
def _no_webhooks(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig))  # --no-webhooks added by run()
    assert not any(isinstance(r, WebhookServer) for r in mgr.runnables)
    # A module with WEBHOOKS and no way to serve them is refused, naming the way out.
    refused(capsys, "--no-webhooks", MAKE, "--kubeconfig", str(kubeconfig))


@case("--loop")
def _loop(ran: list[Manager], capsys: Any, kubeconfig: Path) -> None:
    import uvloop

    mgr = run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--loop", "asyncio")
    assert mgr.controllers
    assert _ran_on() is not uvloop.Loop
    assert issubclass(_ran_on(), asyncio.BaseEventLoop)
    ran.clear()
    run(ran, MAKE, "--kubeconfig", str(kubeconfig), "--loop", "uvloop")
    assert _ran_on() is uvloop.Loop
    # Without the flag, $FASTCTL_LOOP chooses (the suite sets it to the loop it runs on).
    saved = os.environ.get("FASTCTL_LOOP")
    try:
        for choice, kind in (("uvloop", uvloop.Loop), ("", uvloop.Loop)):
            os.environ["FASTCTL_LOOP"] = choice
            ran.clear()
            run(ran, MAKE, "--kubeconfig", str(kubeconfig))
            assert _ran_on() is kind, choice
        os.environ["FASTCTL_LOOP"] = "asyncio"
        ran.clear()
        run(ran, MAKE, "--kubeconfig", str(kubeconfig))
        assert _ran_on() is not uvloop.Loop
        os.environ["FASTCTL_LOOP"] = "trio"
        refused(capsys, "FASTCTL_LOOP 'trio'", MAKE, "--kubeconfig", str(kubeconfig))
    finally:
        if saved is None:
            os.environ.pop("FASTCTL_LOOP", None)
        else:
            os.environ["FASTCTL_LOOP"] = saved


def _run_flags() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run_parser = sub.choices["run"]
    return {
        option
        for action in run_parser._actions
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }


def test_every_flag_has_a_case() -> None:
    assert _run_flags() == set(CASES)


@pytest.mark.parametrize("flag", sorted(CASES))
def test_the_flag_applies_or_is_refused(
    flag: str,
    ran: list[Manager],
    capsys: pytest.CaptureFixture[str],
    kubeconfig: Path,
) -> None:
    for check in CASES[flag]:
        ran.clear()
        check(ran, capsys, kubeconfig)
