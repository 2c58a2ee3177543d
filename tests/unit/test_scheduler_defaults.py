"""The scheduler's defaults are written once, in Rust (`Config::default`), and published as
`fastctl._core.SCHEDULER_DEFAULTS`. The pure-Python model keeps its own literal defaults, as
an independent oracle should; these tests are what keeps the two from drifting apart."""

from __future__ import annotations

import inspect
from typing import Any

from fastctl import Scheduler
from fastctl._core import SCHEDULER_DEFAULTS
from fastctl.testing.model import ModelScheduler

SETTINGS = (
    "concurrency",
    "debounce",
    "debounce_max",
    "max_wait",
    "backoff_base",
    "backoff_max",
    "group_concurrency",
)


def keyword_defaults(cls: type[Any]) -> dict[str, Any]:
    """The keyword-only parameters of `cls` and their defaults, as its signature states them."""
    params = inspect.signature(cls).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def settings(s: Scheduler | ModelScheduler) -> dict[str, Any]:
    return {name: getattr(s, name) for name in SETTINGS}


def test_the_model_defaults_equal_the_rust_ones() -> None:
    assert keyword_defaults(ModelScheduler) == SCHEDULER_DEFAULTS


def test_the_defaults_cover_every_keyword_of_the_binary() -> None:
    assert keyword_defaults(Scheduler).keys() == SCHEDULER_DEFAULTS.keys()


def test_the_binary_runs_with_the_published_defaults() -> None:
    expected = {**SCHEDULER_DEFAULTS, "debounce_max": 10 * SCHEDULER_DEFAULTS["debounce"]}
    assert settings(Scheduler()) == {name: expected[name] for name in SETTINGS}
    assert settings(Scheduler()) == settings(ModelScheduler())


def test_none_means_the_default() -> None:
    # Callers that forward an optional setting may pass None instead of restating the default.
    explicit_none = Scheduler(**dict.fromkeys(SCHEDULER_DEFAULTS))
    assert settings(explicit_none) == settings(Scheduler())


def test_changing_the_published_copy_changes_nothing() -> None:
    published = SCHEDULER_DEFAULTS["max_wait"]
    SCHEDULER_DEFAULTS["max_wait"] = published + 1.0
    try:
        assert Scheduler().max_wait == published
    finally:
        SCHEDULER_DEFAULTS["max_wait"] = published
