"""The option objects (`ApplierConfig`, `WatchConfig`): each option stated once, validated
at construction, the one full spelling on every entry point (``config=``), with only the
common options also taken as keywords."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

import fastctl
from fastctl import ApplierConfig, Controller, Resource, WatchConfig, applier, watcher
from fastctl._applier import _Driver
from fastctl.testing.model import ModelScheduler

WIDGET = Resource("example.com/v1", "Widget")


async def reconcile(obj: Any, ctx: None) -> None:
    return None


async def no_triggers() -> AsyncIterator[fastctl.ObjectRef]:
    return
    yield


def client() -> ApiClient:
    return ApiClient.__new__(ApiClient)  # never used: nothing is requested


def test_the_objects_are_exported_and_frozen() -> None:
    assert fastctl.kube.WatchConfig is WatchConfig
    with pytest.raises(dataclasses.FrozenInstanceError):
        ApplierConfig().concurrency = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        WatchConfig().page_size = 3  # type: ignore[misc]


def test_defaults_are_the_entry_points_defaults() -> None:
    """The keywords and the objects must not drift apart: each keyword default of the
    entry point equals the field default of its object."""
    for fn, cls in (
        (applier, ApplierConfig),
        (watcher, WatchConfig),
        (Controller.__init__, ApplierConfig),
        (Controller.__init__, WatchConfig),
    ):
        params = inspect.signature(fn).parameters
        for f in dataclasses.fields(cls):
            if f.name in params:
                assert params[f.name].default == f.default, (fn, f.name)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": -1}, "concurrency must be an int >= 0"),
        ({"concurrency": 1.5}, "concurrency must be an int >= 0"),
        ({"concurrency": True}, "concurrency must be an int >= 0"),
        ({"timeout": 0}, "timeout must be a number of seconds > 0"),
        ({"timeout": float("nan")}, "timeout must be a number of seconds > 0"),
        ({"timeout": "5"}, "timeout must be a number of seconds > 0"),
    ],
)
def test_applier_config_validates(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ApplierConfig(**kwargs)
    with pytest.raises(ValueError, match=message):  # the same error from the controller
        Controller(client(), WIDGET, reconcile, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"page_size": -1}, "page_size must be >= 0, got -1"),
        ({"timeout_seconds": 0}, "timeout_seconds and read_timeout must be > 0"),
        ({"read_timeout": 0.0}, "timeout_seconds and read_timeout must be > 0"),
    ],
)
def test_watch_config_validates(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WatchConfig(**kwargs)


def test_timeout_is_normalised_to_float() -> None:
    assert ApplierConfig(timeout=2).timeout == 2.0
    assert isinstance(ApplierConfig(timeout=2).timeout, float)
    assert ApplierConfig(concurrency=0).concurrency == 0  # 0: unbounded, valid


def test_new_scheduler_uses_the_options() -> None:
    sched = ApplierConfig(concurrency=3, debounce=0.5).new_scheduler()
    assert sched.concurrency == 3
    assert sched.debounce == 0.5


def test_controller_builds_its_configs_from_keywords() -> None:
    ctl = Controller(
        client(),
        WIDGET,
        reconcile,
        concurrency=4,
        debounce=0.25,
        timeout=9,
        label_selector="app=web",
    )
    assert ctl.config == ApplierConfig(concurrency=4, debounce=0.25, timeout=9.0)
    # Without a watch_config, the controller's cache drops managedFields.
    assert ctl.watch_config == WatchConfig(label_selector="app=web", strip_managed_fields=True)
    assert ctl.concurrency == 4
    assert ctl.label_selector == "app=web"
    assert ctl.scheduler.stats() is not None
    assert ctl.spec.watch_config_for(WIDGET).label_selector == "app=web"
    related = ctl.spec.watch_config_for(Resource("v1", "ConfigMap"))
    assert related == WatchConfig(strip_managed_fields=True)  # no selector on related ones


def test_controller_takes_config_objects() -> None:
    cfg = ApplierConfig(concurrency=2, debounce=1.0)
    wcfg = WatchConfig(field_selector="metadata.name=a", page_size=10)
    ctl = Controller(client(), WIDGET, reconcile, config=cfg, watch_config=wcfg)
    assert ctl.config is cfg
    # Used as given, but an unsaid strip_managed_fields is the controller's default: True
    # (a WatchConfig for a page size used to turn the stripping off).
    assert ctl.watch_config == replace(wcfg, strip_managed_fields=True)
    kept = WatchConfig(page_size=10, strip_managed_fields=False)
    assert Controller(client(), WIDGET, reconcile, watch_config=kept).watch_config is kept
    assert ctl.concurrency == 2
    assert ctl.scheduler.stats() is not None
    # The default scheduler is built from the config's options.
    assert ctl.scheduler.concurrency == 2  # type: ignore[attr-defined]
    assert ctl.scheduler.debounce == 1.0  # type: ignore[attr-defined]
    model = ModelScheduler(concurrency=1)
    assert Controller(client(), WIDGET, reconcile, config=cfg, scheduler=model).scheduler is model


def test_mixing_keywords_and_config_is_an_error() -> None:
    with pytest.raises(TypeError, match="either as keywords or as config=, not both"):
        Controller(client(), WIDGET, reconcile, concurrency=3, config=ApplierConfig())
    with pytest.raises(TypeError, match="either as keywords or as watch_config=, not both"):
        Controller(client(), WIDGET, reconcile, label_selector="a=b", watch_config=WatchConfig())
    with pytest.raises(TypeError, match="either as keywords or as config=, not both"):
        applier(reconcile, None, None, {}, no_triggers(), timeout=1, config=ApplierConfig())
    with pytest.raises(TypeError, match="config must be a ApplierConfig, got WatchConfig"):
        applier(reconcile, None, None, {}, no_triggers(), config=WatchConfig())  # type: ignore[arg-type]


async def test_watcher_mixing_keywords_and_config_is_an_error() -> None:
    with pytest.raises(TypeError, match="either as keywords or as config=, not both"):
        await anext(watcher(client(), WIDGET, label_selector="a=b", config=WatchConfig()))


KEYWORDS = {
    "Controller": ({"concurrency", "debounce", "timeout"}, {"label_selector"}),
    "applier": ({"concurrency", "debounce", "timeout"}, set()),
    "watcher": (set(), {"label_selector"}),
}
"""Per entry point, the fields of `ApplierConfig` and of `WatchConfig` it also takes as
keywords (docs/contract.md, "Options"): the common ones; every other option is spelled
once, in the object."""


@pytest.mark.parametrize("entry", sorted(KEYWORDS))
def test_each_option_has_one_spelling(entry: str) -> None:
    """An option object's field is a keyword of an entry point only when it is a common one:
    a field added to a config, or a keyword added to an entry point, is a decision here."""
    target = getattr(fastctl, entry)
    params = set(inspect.signature(target).parameters)
    applier_fields = {f.name for f in dataclasses.fields(ApplierConfig)}
    watch_fields = {f.name for f in dataclasses.fields(WatchConfig)}
    assert (params & applier_fields, params & watch_fields) == KEYWORDS[entry]


def test_a_removed_keyword_is_refused() -> None:
    """The options that live only in the objects are not accepted as keywords."""
    for keyword in ("executor", "fair_by", "group_concurrency", "strip_managed_fields"):
        removed: dict[str, Any] = {keyword: None}
        with pytest.raises(TypeError, match=keyword):
            Controller(client(), WIDGET, reconcile, **removed)
        if keyword != "strip_managed_fields":
            with pytest.raises(TypeError, match=keyword):
                applier(reconcile, None, None, {}, no_triggers(), **removed)


async def test_applier_runs_with_a_config() -> None:
    """The config's options reach the driver: concurrency bounds the reconciles running."""
    running = peak = finished = 0
    all_done = asyncio.Event()
    refs = [fastctl.ObjectRef(f"o{i}", "ns") for i in range(6)]

    async def slow(obj: Any, ctx: None) -> None:
        nonlocal running, peak, finished
        running += 1
        peak = max(peak, running)
        for _ in range(3):
            await asyncio.sleep(0)
        running -= 1
        finished += 1
        if finished == len(refs):
            all_done.set()

    async def triggers() -> AsyncIterator[fastctl.ObjectRef]:
        for ref in refs:
            yield ref
        await all_done.wait()

    store = {ref: {"metadata": {"name": ref.name}} for ref in refs}
    config = ApplierConfig(concurrency=2)
    unbounded = ModelScheduler(concurrency=0)  # so only the driver's own limit holds
    results = [
        r
        async for r in applier(
            slow, None, None, store, triggers(), config=config, scheduler=unbounded
        )
    ]
    assert len(results) == len(refs)
    assert peak == 2


def test_the_applier_default_scheduler_comes_from_the_config() -> None:
    config = ApplierConfig(concurrency=5, debounce=0.125)
    driver = _Driver(reconcile, None, None, {}, no_triggers(), config, None)
    assert driver.scheduler.concurrency == 5  # type: ignore[attr-defined]
    assert driver.scheduler.debounce == 0.125  # type: ignore[attr-defined]
