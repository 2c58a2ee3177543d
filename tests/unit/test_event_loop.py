"""The event loop fastctl's own entry points run on (`fastctl._loop`): uvloop when it is
installed, asyncio's own when asked or when it is missing, a choice that cannot be honoured
refused by name; and `fastctl demo` takes the same choice as `fastctl run`
(tests/unit/test_run_flags.py covers ``fastctl run --loop``)."""

from __future__ import annotations

import asyncio
import inspect
import sys

import pytest
import uvloop

from fastctl import _loop
from fastctl._loop import LoopChoiceError, choose, run
from fastctl.cli import main


async def _loop_type() -> type:
    return type(asyncio.get_running_loop())


@pytest.fixture
def no_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvloop as if not installed (on Windows, PyPy)."""
    monkeypatch.setitem(sys.modules, "uvloop", None)


def test_auto_is_uvloop_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FASTCTL_LOOP", raising=False)
    assert choose() == "uvloop"
    assert run(_loop_type()) is uvloop.Loop
    monkeypatch.setenv("FASTCTL_LOOP", "auto")
    assert run(_loop_type()) is uvloop.Loop


def test_asyncio_by_argument_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTCTL_LOOP", "uvloop")
    ran_on = run(_loop_type(), loop="asyncio")  # the argument wins over the environment
    assert issubclass(ran_on, asyncio.BaseEventLoop)
    monkeypatch.setenv("FASTCTL_LOOP", "asyncio")
    assert issubclass(run(_loop_type()), asyncio.BaseEventLoop)
    assert run(_loop_type(), loop="uvloop") is uvloop.Loop


def test_asyncio_means_asyncio_s_own_loop_even_under_uvloop_s_policy() -> None:
    """A program (or this suite on uvloop) may have installed uvloop's policy, which
    ``asyncio.new_event_loop()`` follows; asked for asyncio, fastctl still runs on it."""
    old = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        assert issubclass(run(_loop_type(), loop="asyncio"), asyncio.BaseEventLoop)
    finally:
        asyncio.set_event_loop_policy(old)


@pytest.mark.usefixtures("no_uvloop")
def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FASTCTL_LOOP", raising=False)
    assert choose() == "asyncio"
    assert issubclass(run(_loop_type()), asyncio.BaseEventLoop)
    with pytest.raises(LoopChoiceError, match=r"--loop uvloop: uvloop is not installed"):
        choose("uvloop")
    monkeypatch.setenv("FASTCTL_LOOP", "uvloop")
    with pytest.raises(LoopChoiceError, match=r"FASTCTL_LOOP uvloop: uvloop is not"):
        choose()


def test_an_unknown_choice_is_refused_and_the_coroutine_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FASTCTL_LOOP", "trio")
    coro = _loop_type()
    with pytest.raises(LoopChoiceError, match=r"FASTCTL_LOOP 'trio' is not one of auto"):
        run(coro)
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # no "never awaited"
    assert _loop.CHOICES == ("auto", "uvloop", "asyncio")


@pytest.mark.usefixtures("no_uvloop")
def test_demo_refuses_a_loop_it_cannot_have_before_starting_anything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--loop", "uvloop", "--kubeconfig", "/nonexistent"]) != 0
    assert "--loop uvloop: uvloop is not installed" in capsys.readouterr().err
