"""A reconcile's span started in the extension by its controller's `ReconcileSpans`
(`fastctl._core`, made once per source and scheduler by `fastctl._otel.ControllerTracing`):
what was pending for the key (links, queue wait, priority, links dropped) and what the
scheduler says (attempt, fair group) reach the span as the SDK's path put them; the strings
it keeps are Python's own, refused when not UTF-8 as a copy would refuse them; a watch
event kind's name is read from the enum member's field, with any other object's ``name``.
"""

from __future__ import annotations

import contextvars
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from fastctl import ObjectRef, _tracing
from fastctl._core import OtlpSpan
from fastctl._otel import MAX_LINKS, ControllerTracing, Reason
from fastctl._otlp import OtlpExport
from fastctl.kube._watcher import EventKind

from .test_tracing_fast import attributes, wire

KEY = ObjectRef("a", "ns").key


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def scheduler(failures: int, group: Any = None) -> Any:
    return SimpleNamespace(failures=lambda key: failures, group_of=lambda key: group)


def traced() -> tuple[TracerProvider, list[bytes], ControllerTracing, Clock]:
    requests: list[bytes] = []
    provider = TracerProvider()
    provider.add_span_processor(OtlpExport(requests.append, lambda: None))
    assert _tracing.enable(provider)
    tracing = _tracing.active()
    assert tracing is not None
    controller = tracing.controller("widgets", "Widget")
    clock = Clock()
    controller.bind(clock)
    return provider, requests, controller, clock


def run_once(controller: ControllerTracing, sched: Any) -> OtlpSpan:
    def one() -> OtlpSpan:
        run = controller.start(KEY, sched)
        assert type(run) is OtlpSpan
        run.enter()
        run.end(None, None, 0.0, again=False)
        return run

    return contextvars.copy_context().run(one)


def ref(name: str = "a", namespace: str | None = "ns") -> list[Any]:
    """A watch's triggers: one ref (typed loosely, as the watches hand them over)."""
    return [ObjectRef(name, namespace)]


def link(triggers: Any) -> Any:
    (trigger,) = triggers
    return trigger.link


def event(kind: Any, name: str = "a") -> Any:
    meta = {"name": name, "namespace": "ns", "resourceVersion": "7"}
    return SimpleNamespace(kind=kind, _meta=lambda: meta)


def test_what_was_pending_and_the_scheduler_reach_the_span() -> None:
    provider, requests, controller, clock = traced()
    try:
        for i in range(MAX_LINKS + 2):  # two past the limit: counted, not kept
            changed = event(EventKind.APPLY, f"c{i}")
            (trigger,) = controller.related("ConfigMap", True, changed, ref())
            controller.queued(trigger)
        clock.now = 102.5
        run_once(controller, scheduler(2, "team-a"))
        clock.now = 103.0
        controller.queued(ObjectRef("a", "ns"))
        clock.now = 90.0  # the clock read before `since`: no negative wait
        run_once(controller, scheduler(0))
    finally:
        _tracing.disable()
        provider.shutdown()
    first, second = wire(requests)
    assert first.name == second.name == "reconcile widgets"
    assert attributes(first) == {
        "fastctl.controller": "widgets",
        "fastctl.object": KEY,
        "fastctl.reconcile.attempt": 3,
        "fastctl.reconcile.queue_wait": 2.5,
        "fastctl.reconcile.links_dropped": 2,
        "fastctl.reconcile.priority": 0,
        "fastctl.reconcile.fair_group": "team-a",
        "fastctl.reconcile.outcome": "done",
    }
    assert len(first.links) == MAX_LINKS
    assert {kv.key: kv.value.string_value for kv in first.links[0].attributes} == {
        "fastctl.trigger.reason": Reason.OWNED_CHILD,
        "fastctl.watch.kind": "ConfigMap",
        "fastctl.watch.object": "ns/c0",
        "k8s.resource_version": "7",
    }
    assert attributes(second) == {
        "fastctl.controller": "widgets",
        "fastctl.object": KEY,
        "fastctl.reconcile.attempt": 1,  # the second scheduler's answer, not the first's
        "fastctl.reconcile.queue_wait": 0.0,
        "fastctl.reconcile.priority": 0,
        "fastctl.reconcile.outcome": "done",
    }
    assert list(second.links) == []


def test_a_key_with_nothing_pending_has_no_queue_wait_and_no_links() -> None:
    provider, requests, controller, _ = traced()
    try:
        run_once(controller, object())  # a scheduler without `failures` or `group_of`
    finally:
        _tracing.disable()
        provider.shutdown()
    (span,) = wire(requests)
    assert attributes(span) == {
        "fastctl.controller": "widgets",
        "fastctl.object": KEY,
        "fastctl.reconcile.attempt": 1,
        "fastctl.reconcile.priority": 0,
        "fastctl.reconcile.outcome": "done",
    }


def test_a_string_that_is_not_utf8_is_refused_when_set_not_at_the_end() -> None:
    provider, requests, controller, _ = traced()
    try:

        def one() -> None:
            run: Any = controller.start(KEY, scheduler(0))
            run.enter()
            with pytest.raises(UnicodeEncodeError):
                run.set_attribute("user.bad", "\ud800")
            with pytest.raises(UnicodeEncodeError):
                controller.start("\ud800", scheduler(0))
            run.set_attribute("user.good", "ü")
            run.end(None, None, 0.0, again=False)

        contextvars.copy_context().run(one)
    finally:
        _tracing.disable()
        provider.shutdown()
    (span,) = wire(requests)
    assert attributes(span)["user.good"] == "ü"
    assert "user.bad" not in attributes(span)


def test_a_watch_event_kind_is_named_by_its_field_or_its_name() -> None:
    """An enum member's `_name_` (its `name` is a property); another object's `name`."""
    provider, _, controller, _ = traced()
    try:
        other = SimpleNamespace(name="INIT_DONE")
        for kind, reason in (
            (EventKind.INIT_DONE, Reason.RELIST),
            (other, Reason.RELIST),
            (EventKind.APPLY, Reason.MAPPED_OBJECT),
        ):
            assert link(controller.related("ConfigMap", False, event(kind), ref()))[3] == reason
        for kind, deleted in ((EventKind.DELETE, True), (SimpleNamespace(name="DELETE"), True)):
            assert link(controller.related("ConfigMap", True, event(kind), ref()))[6] is deleted
        relist = event(SimpleNamespace(name="INIT_DONE"))
        assert link(controller.primary(relist, ref()))[3] == Reason.RELIST
    finally:
        _tracing.disable()
        provider.shutdown()
