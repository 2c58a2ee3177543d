"""The demo operator's opt-in reconcile record (``FASTCTL_DEMO_RECORD``), which the soak
reads to check, from outside the processes, that no two reconciles of one object overlap."""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from fastctl.demo._record import RECORD_ENV, recorded
from fastctl.demo.widgets import make_controller

OBJ = {"metadata": {"namespace": "ns", "name": "a", "uid": "u1", "resourceVersion": "7"}}


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_start_and_end_of_each_reconcile_with_the_version_seen(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"

    async def ok(obj: dict[str, Any], ctx: None) -> str:
        assert [r["ev"] for r in lines(path)] == ["start"]  # written before the body runs
        return "done"

    assert await recorded(ok, str(path))(OBJ, None) == "done"
    start, end = lines(path)
    assert (start["ev"], end["ev"], end["outcome"]) == ("start", "end", "ok")
    assert (start["key"], start["uid"], start["rv"]) == ("ns/a", "u1", "7")
    assert start["mono"] <= end["mono"]
    assert start["pid"] == end["pid"]


async def test_an_error_or_a_cancellation_still_ends_the_reconcile(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"

    async def boom(obj: dict[str, Any], ctx: None) -> None:
        raise ValueError("no")

    async def hang(obj: dict[str, Any], ctx: None) -> None:
        await asyncio.sleep(3600)

    with pytest.raises(ValueError, match="no"):
        await recorded(boom, str(path))(OBJ, None)
    task = asyncio.ensure_future(recorded(hang, str(path))(OBJ, None))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [(r["ev"], r.get("outcome")) for r in lines(path)] == [
        ("start", None),
        ("end", "ValueError"),
        ("start", None),
        ("end", "CancelledError"),
    ]


def test_the_demo_records_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes_asyncio.client import ApiClient

    from fastctl.demo import widgets

    client: Any = object.__new__(ApiClient)
    monkeypatch.delenv(RECORD_ENV, raising=False)
    # inspect.unwrap sees through the typed controller's validating wrapper.
    assert inspect.unwrap(make_controller(client).reconcile) is widgets.reconcile
    monkeypatch.setenv(RECORD_ENV, str(tmp_path / "rec.jsonl"))
    assert inspect.unwrap(make_controller(client).reconcile) is not widgets.reconcile


async def test_a_typed_object_is_recorded_from_its_json(tmp_path: Path) -> None:
    """The demo's reconcile is typed: the record reads the model's metadata."""
    from fastctl.demo.widgets import Widget

    path = tmp_path / "rec.jsonl"
    widget = Widget.model_validate({**OBJ, "spec": {}})

    async def ok(obj: Widget, ctx: None) -> None:
        return None

    await recorded(ok, str(path))(widget, None)
    start, _ = lines(path)
    assert (start["key"], start["uid"], start["rv"]) == ("ns/a", "u1", "7")
