"""Looking into the queue: the reasons a key's run merged (bounded, moved to the run when
it starts, dropped with the key), `Controller.inspect` and `queue_summary`, the
``/debug/queue`` server (local clients only, names and reasons only) and ``fastctl
inspect``."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator, Callable
from typing import Any
from unittest import mock

import pytest
from aiohttp.test_utils import make_mocked_request

from fastctl import Action, ObjectRef, Resource, Scheduler, Trigger
from fastctl._applier import ApplierConfig, _Driver
from fastctl._channel import Channel
from fastctl._reasons import MAX_ERROR, MAX_REASONS, ReasonLog
from fastctl.cli import main
from fastctl.cli.inspect import render_object, render_summary
from fastctl.runtime import Controller
from fastctl.runtime._debug_queue import DebugQueueServer, is_loopback

SECRET = "s3cr3t-value-never-shown"


def _obj(name: str, namespace: str = "ns") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"token": SECRET}},
        "spec": {"password": SECRET},
    }


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


# -- the reason log on its own ------------------------------------------------------------


def test_reasons_merge_with_counts_and_keep_the_last_few() -> None:
    clock = _Clock()
    log = ReasonLog("Widget changed", clock=clock)
    for _ in range(3):
        clock.t += 1
        log.queued("ns/a", None)
    entry = log.get("ns/a")
    assert entry is not None
    (only,) = entry.pending.values()
    assert (only.reason, only.count, only.first, only.last) == ("Widget changed", 3, 101, 103)
    for i in range(MAX_REASONS + 2):
        log.queued("ns/a", f"owned ConfigMap changed: ns/c{i}")
    assert len(entry.pending) == MAX_REASONS
    assert entry.dropped == 3
    # The least recently seen go first: the primary change and c0, c1.
    assert "Widget changed" not in entry.pending
    assert "owned ConfigMap changed: ns/c1" not in entry.pending
    assert f"owned ConfigMap changed: ns/c{MAX_REASONS + 1}" in entry.pending


def test_a_repeated_reason_counts_as_recently_seen() -> None:
    log = ReasonLog(clock=_Clock())
    log.queued("k", "first")
    for i in range(MAX_REASONS - 1):
        log.queued("k", f"r{i}")
    log.queued("k", "first")  # seen again: now the most recent
    log.queued("k", "one more")
    entry = log.get("k")
    assert entry is not None
    assert "first" in entry.pending
    assert "r0" not in entry.pending
    assert entry.pending["first"].count == 2


# -- through the applier ------------------------------------------------------------------


class _Run:
    """An applier on a real Scheduler with a reason log, fed through a channel."""

    def __init__(self, reconcile: Any, store: dict[ObjectRef, Any], **scheduler: Any) -> None:
        self.triggers: Channel[ObjectRef | Trigger] = Channel()
        self.log = ReasonLog("Widget changed")
        self.scheduler = Scheduler(**scheduler)
        self.driver = _Driver(
            reconcile, None, None, store, self.triggers, ApplierConfig(), self.scheduler, self.log
        )
        self.results: list[Any] = []

    async def consume(self) -> None:
        async for result in self.driver.results():
            self.results.append(result)


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(2000):
        if check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


@contextlib.asynccontextmanager
async def _running(run: _Run) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(run.consume())
    try:
        yield task
    finally:
        run.triggers.close()
        await asyncio.wait_for(task, 10)


async def test_a_run_takes_its_reasons_and_a_clean_end_forgets_the_key() -> None:
    ref = ObjectRef("a", "ns")
    gate = asyncio.Event()
    started = 0

    async def reconcile(obj: Any, ctx: Any) -> None:
        nonlocal started
        started += 1
        if started == 1:
            await gate.wait()

    run = _Run(reconcile, {ref: _obj("a")})
    async with _running(run):
        await run.triggers.put(Trigger(ref, reason="list", priority=-100))
        await run.triggers.put(ref)
        await run.triggers.put(ref)
        await _until(lambda: started == 1)
        entry = run.log.get("ns/a")
        assert entry is not None
        assert entry.pending == {}, "the run took the pending reasons"
        assert entry.running is not None
        assert {r.reason: r.count for r in entry.running.values()} in (
            {"list": 1, "Widget changed": 2},  # all merged before the run started
            {"list": 1},  # or the run started first: the changes are pending
        )
        await run.triggers.put(Trigger(ref, reason="owned ConfigMap changed: ns/c"))
        await _until(lambda: "owned ConfigMap changed: ns/c" in entry.pending)
        gate.set()
        await _until(lambda: started >= 2 and len(run.scheduler) == 0)
        await _until(lambda: run.scheduler.in_flight == 0)
        assert len(run.log) == 0, "done with nothing to follow: the key is dropped"


async def test_a_failed_run_keeps_its_error_until_a_success() -> None:
    ref = ObjectRef("b", "ns")
    fail = True

    async def reconcile(obj: Any, ctx: Any) -> Action | None:
        if fail:
            raise RuntimeError("boom " * 200)
        return Action.requeue(3600)

    run = _Run(reconcile, {ref: _obj("b")}, backoff_base=0.05, backoff_max=0.05)
    async with _running(run):
        await run.triggers.put(ref)
        await _until(lambda: run.scheduler.failures("ns/b") >= 1)
        entry = run.log.get("ns/b")
        assert entry is not None
        assert entry.error is not None
        assert entry.error == "RuntimeError: " + "boom " * 200, "kept whole"
        assert "error retry" in entry.pending or entry.running is not None
        fail = False
        await _until(lambda: run.scheduler.failures("ns/b") == 0 and bool(run.results))
        await _until(lambda: run.scheduler.in_flight == 0)
        entry = run.log.get("ns/b")
        assert entry is not None, "requeued: still held"
        assert entry.error is None, "a success clears the error"
        assert set(entry.pending) == {"requeue"}


async def test_the_log_never_holds_more_keys_than_the_scheduler() -> None:
    store = {ObjectRef(f"k{i}", "ns"): _obj(f"k{i}") for i in range(500)}

    async def reconcile(obj: Any, ctx: Any) -> None:
        await asyncio.sleep(0)

    run = _Run(reconcile, store)
    async with _running(run):
        for _ in range(3):
            for ref in store:
                await run.triggers.put(Trigger(ref, reason="reconcile_all_on"))
        # An object gone from the cache: popped and dropped without a run.
        await run.triggers.put(ObjectRef("gone", "ns"))
        await _until(lambda: len(run.scheduler) == 0 and run.scheduler.in_flight == 0)
    assert len(run.log) == 0


# -- Controller.inspect -------------------------------------------------------------------


def _controller(**kw: Any) -> Controller:
    async def reconcile(obj: Any, ctx: Any) -> None:
        return None

    ctl = Controller(mock.Mock(), Resource("example.com/v1", "Widget"), reconcile, **kw)
    ctl.record_reasons()
    ctl.store = {ObjectRef("cached", "ns"): _obj("cached")}  # type: ignore[assignment]
    return ctl


def _log(ctl: Controller) -> ReasonLog:
    assert ctl._reasons is not None
    return ctl._reasons


def test_reasons_are_off_until_asked_for() -> None:
    async def reconcile(obj: Any, ctx: Any) -> None:
        return None

    ctl = Controller(mock.Mock(), Resource("example.com/v1", "Widget"), reconcile)
    assert ctl._reasons is None
    assert ctl.record_reasons() is ctl
    assert ctl._reasons is not None


def test_an_unknown_object_is_not_known_not_an_error() -> None:
    ctl = _controller()
    answer = ctl.inspect("ns", "nope")
    assert answer.state == "not_known"
    assert "not known to this controller" in answer.message
    assert not answer.cached
    idle = ctl.inspect("ns", "cached")
    assert (idle.state, idle.cached) == ("idle", True)


def test_a_bad_name_is_refused_clearly() -> None:
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        _controller().inspect("ns", "")


def test_inspect_reports_state_position_reasons_and_backoff() -> None:
    ctl = _controller(concurrency=1)
    sched = ctl.scheduler
    assert isinstance(sched, Scheduler)
    for name in ("x", "y", "cached"):
        sched.add(f"ns/{name}")
        _log(ctl).queued(f"ns/{name}", None)
    _log(ctl).queued("ns/cached", "watched Secret changed: ns/creds")
    answer = ctl.inspect("ns", "cached")
    assert answer.state == "ready"
    assert (answer.ahead, answer.ahead_at_priority, answer.priority) == (2, 2, 0)
    assert [r.reason for r in answer.reasons] == [
        "watched Secret changed: ns/creds",
        "Widget changed",
    ]
    assert "2 ready ahead of it" in answer.message
    # Running, then failing: waiting with its backoff and attempts.
    assert sched.pop() == "ns/x"
    assert ctl.inspect("ns", "x").state == "in_flight"
    sched.add("ns/x")
    assert ctl.inspect("ns", "x").state == "in_flight_dirty"
    assert sched.pop() is None  # concurrency 1
    sched.done("ns/x", failed=True)
    waiting = ctl.inspect("ns", "x")
    assert waiting.attempts == 1
    assert waiting.backoff is not None
    summary = ctl.queue_summary()
    assert (summary.ready, summary.in_flight, summary.cached) == (3, 0, 1)
    assert summary.oldest_ready is not None
    assert summary.oldest_ready["name"] == "y"
    assert summary.by_group == {}


def test_inspect_names_the_fair_group_and_counts_its_turns() -> None:
    ctl = _controller(config=ApplierConfig(concurrency=1, fair_by="namespace"))
    sched = ctl.scheduler
    assert isinstance(sched, Scheduler)
    sched.add_many([f"flood/{i}" for i in range(4)], group="flood")
    sched.add_many(["calm/0", "calm/1"], group="calm")
    sched.add("plain/0")
    # Served in turn: flood/0, calm/0, plain/0, flood/1, calm/1, flood/2, flood/3.
    answer = ctl.inspect("calm", "1")
    assert (answer.state, answer.group) == ("ready", "calm")
    assert (answer.ahead, answer.ahead_at_priority, answer.ahead_in_group) == (4, 4, 1)
    assert "4 ready ahead of it (4 at its priority 0, 1 of group calm)" in answer.message
    assert ctl.inspect("flood", "3").ahead == 6
    plain = ctl.inspect("plain", "0")
    assert (plain.group, plain.ahead) == (None, 2)
    assert "of group" not in plain.message
    assert sched.pop() == "flood/0"
    running = ctl.inspect("flood", "0")
    assert (running.state, running.group) == ("in_flight", "flood")
    summary = ctl.queue_summary()
    assert summary.by_group == {
        "calm": {"keys": 2, "ready": 2, "in_flight": 0, "weight": 1, "group_concurrency": 0}
        | {"held": False},
        "flood": {"keys": 4, "ready": 3, "in_flight": 1, "weight": 1, "group_concurrency": 0}
        | {"held": False},
    }
    assert summary.oldest_ready is not None
    assert (summary.oldest_ready["name"], summary.oldest_ready["group"]) == ("1", "flood")
    text = render_object(ctl.inspect("calm", "1").to_json())
    assert "group:     calm" in text
    assert "position:  3 ahead (3 at its priority, 1 of its group)" in text
    summary_text = render_summary(summary.to_json())
    assert "oldest ready: flood/1 for" in summary_text
    assert "(group flood)" in summary_text
    assert "group flood: 4 keys, 3 ready, 1 in flight (weight 1)" in summary_text


def test_inspect_says_a_key_is_held_by_its_groups_cap() -> None:
    """A ready object of a group at its cap says it is held and has no place in line; the
    others' positions do not count it; the summary marks the group held."""
    ctl = _controller(config=ApplierConfig(concurrency=4, fair_by="namespace", group_concurrency=1))
    sched = ctl.scheduler
    assert isinstance(sched, Scheduler)
    sched.add_many(["slow/0", "slow/1", "slow/2"], group="slow", priority=1)
    sched.add("calm/0", group="calm")
    assert sched.pop() == "slow/0"
    held = ctl.inspect("slow", "2")
    assert (held.state, held.held, held.group) == ("ready", True, "slow")
    assert (held.ahead, held.ahead_at_priority, held.ahead_in_group) == (None, None, 1)
    assert held.message.startswith("held: its group slow has 1 of 1 reconciles running")
    assert "1 of its group ahead of it" in held.message
    calm = ctl.inspect("calm", "0")
    assert (calm.held, calm.ahead) == (False, 0), "slow's higher-priority keys are held"
    text = render_object(held.to_json())
    assert "held:      group slow has its cap of reconciles running" in text
    assert "position:" not in text
    summary = ctl.queue_summary()
    assert summary.group_concurrency == 1
    assert summary.by_group is not None
    assert summary.by_group["slow"] == {
        "keys": 3,
        "ready": 2,
        "in_flight": 1,
        "weight": 1,
        "group_concurrency": 1,
        "held": True,
    }
    assert summary.oldest_ready is not None
    assert summary.oldest_ready["name"] == "0"
    assert summary.oldest_ready["group"] == "calm", "the oldest key that can be served"
    summary_text = render_summary(summary.to_json())
    assert "at most 1 in flight per group" in summary_text
    assert "group slow: 3 keys, 2 ready, 1 in flight (weight 1, held)" in summary_text
    assert held.group_concurrency == 1
    # A group's own cap: shown where it differs from the default; raising it releases.
    sched.set_group_concurrency("slow", 2)
    released = ctl.inspect("slow", "2")
    assert (released.held, released.group_concurrency, released.ahead) == (False, 2, 1)
    summary_text = render_summary(ctl.queue_summary().to_json())
    assert "group slow: 3 keys, 2 ready, 1 in flight (weight 1, at most 2)" in summary_text
    assert sched.pop() == "slow/1"
    assert "has 2 of 2 reconciles running" in ctl.inspect("slow", "2").message
    sched.done("slow/0")
    assert not ctl.inspect("slow", "2").held


# -- the /debug/queue server --------------------------------------------------------------


def _request(path: str, peer: str, host: str = "127.0.0.1:8082") -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (peer, 40000) if name == "peername" else default
    )
    return make_mocked_request("GET", path, headers={"Host": host}, transport=transport)


@pytest.mark.parametrize(
    ("peer", "host", "status"),
    [
        ("127.0.0.1", "127.0.0.1:8082", 200),
        ("::1", "[::1]:8082", 200),
        ("::ffff:127.0.0.1", "localhost:8082", 200),
        ("10.1.2.3", "127.0.0.1:8082", 403),  # a remote peer
        ("192.168.0.5", "operator:8082", 403),
        ("127.0.0.1", "evil.example:8082", 403),  # DNS rebinding: a page's own host name
    ],
)
async def test_the_endpoint_answers_local_clients_only(peer: str, host: str, status: int) -> None:
    ctl = _controller()
    server = DebugQueueServer(lambda: [ctl])
    response = await server._all(_request("/debug/queue", peer, host))
    assert response.status == status
    remote = DebugQueueServer(lambda: [ctl], allow_remote=True)
    assert (await remote._all(_request("/debug/queue", peer, host))).status == 200


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("127.8.9.10")
    assert not is_loopback("10.0.0.1")
    assert not is_loopback(None)
    assert not is_loopback("x")


@contextlib.asynccontextmanager
async def _serving(ctl: Controller) -> AsyncIterator[str]:
    server = DebugQueueServer(lambda: [ctl], port=0)
    await server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.stop()


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["inspect", *argv])
    return code, out.getvalue()


async def test_the_json_names_objects_and_never_carries_their_contents() -> None:
    ctl = _controller(scheduler=Scheduler(backoff_base=60))
    ctl.store[ObjectRef("failing", "ns")] = _obj("failing")  # type: ignore[index]
    sched = ctl.scheduler
    assert isinstance(sched, Scheduler)
    sched.add("ns/failing")
    _log(ctl).queued("ns/failing", None)
    sched.pop()
    _log(ctl).started("ns/failing")
    sched.done("ns/failing", failed=True)
    _log(ctl).finished(
        "ns/failing", error=ValueError("bad spec"), requeue="error retry", again=True
    )
    async with _serving(ctl) as url:
        code, text = await asyncio.to_thread(_cli, "--address", url, "--json", "ns/failing")
        summary_code, summary = await asyncio.to_thread(_cli, "--address", url, "--json")
    assert code == 0
    assert summary_code == 0
    assert SECRET not in text
    assert SECRET not in summary
    answer = json.loads(text)
    assert answer["state"] == "waiting"
    assert answer["attempts"] == 1
    assert answer["last_error"] == "ValueError: bad spec"
    assert {"spec", "metadata", "labels", "status"}.isdisjoint(answer)
    assert [r["reason"] for r in answer["reasons"]] == ["error retry"]
    assert json.loads(summary)[0]["controller"] == "widget"


ESCALATION = (
    'roles.rbac.authorization.k8s.io "tenant-a" is forbidden: user '
    '"system:serviceaccount:ops:tenant-operator" (groups=["system:serviceaccounts" '
    '"system:serviceaccounts:ops" "system:authenticated"]) is attempting to grant RBAC '
    "permissions not currently held:\n"
    + "".join(
        f'{{APIGroups:[""], Resources:["configmaps{i}"], Verbs:["get" "list"]}}\n' for i in range(8)
    )
    + f'{{APIGroups:["apps"], Resources:["deployments"], Verbs:["escalate"]}} token={SECRET}'
)


async def test_fastctl_inspect_shows_the_whole_last_error_scrubbed() -> None:
    """A 403 for an RBAC escalation names the missing permission at its end: past 300
    characters, the part a cut once dropped. The remembered Secret value is still scrubbed."""
    from fastctl import _redact

    _redact.remember({"kind": "Secret", "metadata": {"name": "s"}, "data": {"t": _b64(SECRET)}})
    try:
        await _inspect_the_escalation()
    finally:
        _redact._forget_all()


async def _inspect_the_escalation() -> None:
    ctl = _controller(scheduler=Scheduler(backoff_base=60))
    ctl.store[ObjectRef("failing", "ns")] = _obj("failing")  # type: ignore[index]
    sched = ctl.scheduler
    assert isinstance(sched, Scheduler)
    sched.add("ns/failing")
    _log(ctl).queued("ns/failing", None)
    sched.pop()
    _log(ctl).started("ns/failing")
    sched.done("ns/failing", failed=True)
    # The operator's own words around the API server's: scrubbed here, not by ApiError.
    error = RuntimeError(f"creating the tenant's Role failed: 403 Forbidden: {ESCALATION}")
    _log(ctl).finished("ns/failing", error=error, requeue="error retry", again=True)
    assert len(ESCALATION) > 600
    async with _serving(ctl) as url:
        code, text = await asyncio.to_thread(_cli, "--address", url, "ns/failing")
    assert code == 0
    assert 'Resources:["deployments"], Verbs:["escalate"]' in text, text
    assert "configmaps0" in text
    assert SECRET not in text
    assert "token=<redacted>" in text


def test_only_a_pathological_error_is_cut() -> None:
    from fastctl._reasons import error_text

    assert len(error_text(RuntimeError("x" * (MAX_ERROR * 2)))) == MAX_ERROR


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


async def test_fastctl_inspect_prints_a_readable_answer() -> None:
    ctl = _controller(concurrency=1)
    sched = ctl.scheduler
    assert isinstance(sched, Scheduler)
    for name in ("first", "cached"):
        sched.add(f"ns/{name}")
        _log(ctl).queued(f"ns/{name}", "list")
    async with _serving(ctl) as url:
        _, text = await asyncio.to_thread(_cli, "--address", url, "ns/cached")
        _, unknown = await asyncio.to_thread(_cli, "--address", url, "ns/nope")
        _, summary = await asyncio.to_thread(_cli, "--address", url)
        _, wrong = await asyncio.to_thread(_cli, "--address", url, "--controller", "x", "a/b")
    assert "ns/cached in controller widget: ready" in text
    assert "position:  1 ahead (1 at its priority)" in text
    assert "list x1" in text
    assert "not known to this controller" in unknown
    assert "ready 2, waiting 0, in flight 0/1" in summary
    assert "oldest ready: ns/first" in summary
    assert wrong == ""


def test_fastctl_inspect_says_when_no_operator_answers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--address", "http://127.0.0.1:9", "ns/a"]) == 1
    assert "cannot reach the operator" in capsys.readouterr().err
