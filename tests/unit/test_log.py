"""Every log line from inside a reconcile names its object."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

import fastctl
from fastctl import ObjectRef
from fastctl.log import JsonFormatter, ObjectContextFilter


async def test_log_lines_from_a_reconcile_name_the_object(
    caplog: pytest.LogCaptureFixture,
) -> None:
    user_log = logging.getLogger("my.operator")
    refs = [ObjectRef("a", "ns"), ObjectRef("b", "ns")]
    caplog.handler.addFilter(ObjectContextFilter())

    async def reconcile(obj: Any, ctx: None) -> None:
        user_log.warning("working on %s", obj["name"])

    async def triggers() -> AsyncIterator[ObjectRef]:
        for ref in refs:
            yield ref

    store = {ref: {"name": ref.name} for ref in refs}
    stream = fastctl.applier(reconcile, None, None, store, _until(triggers(), 2))
    results = [result async for result in stream]
    assert len(results) == 2
    records = [r for r in caplog.records if r.name == "my.operator"]
    assert {(r.getMessage(), r.fastctl_object) for r in records} == {  # type: ignore[attr-defined]
        ("working on a", "ns/a"),
        ("working on b", "ns/b"),
    }
    user_log.warning("outside")
    assert caplog.records[-1].fastctl_object == "-"  # type: ignore[attr-defined]


async def _until(source: AsyncIterator[ObjectRef], n: int) -> AsyncIterator[ObjectRef]:
    """Yield `source`, then stay open long enough for `n` reconciles to run."""
    async for item in source:
        yield item
    await asyncio.sleep(0.2)


def test_json_formatter_writes_one_object_per_line() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %s", ("now",), None)
    ObjectContextFilter().filter(record)
    entry = orjson.loads(JsonFormatter().format(record))
    assert entry["message"] == "failed now"
    assert entry["level"] == "ERROR"
    assert entry["object"] == "-"
