"""Bad input to the Scheduler: each is refused with an exception whose message names the
problem, and leaves the scheduler exactly as it was (and internally consistent)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from fastctl import Scheduler
from fastctl.testing.model import ModelScheduler


def populated() -> Scheduler:
    s = Scheduler(seed=1)
    s.add_many(["a", "b", "c"], now=0.0)
    s.add("w", after=10, now=0.0)
    assert s.pop(now=1.0) == "a"
    s.add("a", now=1.0)  # dirty
    assert s.pop(now=1.0) == "b"
    return s


def snapshot(s: Scheduler) -> tuple[Any, ...]:
    # stats() at the current clock does not move time; next_ready_at and membership too.
    return (
        s.stats(now=1.0),
        len(s),
        s.in_flight,
        s.next_ready_at(),
        [(k, k in s, s.is_in_flight(k), s.failures(k)) for k in "abcw"],
    )


Call = Callable[[Scheduler], object]

BAD_CALLS: list[tuple[str, Call, type[Exception], str]] = [
    ("add int key", lambda s: s.add(1), TypeError, "key must be str, not int"),  # type: ignore[arg-type]
    ("add bytes key", lambda s: s.add(b"a"), TypeError, "key must be str, not bytes"),  # type: ignore[arg-type]
    ("add None key", lambda s: s.add(None), TypeError, "key must be str, not NoneType"),  # type: ignore[arg-type]
    ("add NaN after", lambda s: s.add("x", after=math.nan), ValueError, "after must be"),
    ("add negative after", lambda s: s.add("x", after=-1.0), ValueError, "after must be"),
    ("add NaN now", lambda s: s.add("x", now=math.nan), ValueError, "now must be a finite"),
    ("add inf now", lambda s: s.add("x", now=math.inf), ValueError, "now must be a finite"),
    ("add str after", lambda s: s.add("x", after="1"), TypeError, "after"),  # type: ignore[arg-type]
    (
        "add_many bad key",
        lambda s: s.add_many(["x", "y", 3]),  # type: ignore[list-item]
        TypeError,
        "index 2 must be str, not int",
    ),
    ("add_many a str", lambda s: s.add_many("xyz"), TypeError, "not a str"),
    ("add_many NaN", lambda s: s.add_many(["x"], after=math.nan), ValueError, "after must be"),
    ("add_many not iterable", lambda s: s.add_many(5), TypeError, "not iterable"),  # type: ignore[arg-type]
    ("pop NaN now", lambda s: s.pop(now=math.nan), ValueError, "now must be"),
    ("pop_many negative", lambda s: s.pop_many(-1), ValueError, "max must be >= 0, got -1"),
    ("done absent", lambda s: s.done("zz"), KeyError, "'zz' is not in flight"),
    ("done queued", lambda s: s.done("c"), KeyError, "'c' is not in flight"),
    ("done int key", lambda s: s.done(5), TypeError, "key must be str, not int"),  # type: ignore[arg-type]
    (
        "done NaN requeue",
        lambda s: s.done("b", requeue_after=math.nan),
        ValueError,
        "requeue_after must be",
    ),
    (
        "done negative requeue",
        lambda s: s.done("b", requeue_after=-2),
        ValueError,
        "requeue_after must be",
    ),
    ("done NaN now", lambda s: s.done("b", now=math.nan), ValueError, "now must be"),
    ("forget int", lambda s: s.forget(1), TypeError, "key must be str"),  # type: ignore[arg-type]
    ("contains int", lambda s: 1 in s, TypeError, "key must be str"),  # type: ignore[operator]
    ("is_in_flight int", lambda s: s.is_in_flight(1), TypeError, "key must be str"),  # type: ignore[arg-type]
    ("stats NaN now", lambda s: s.stats(now=math.nan), ValueError, "now must be"),
]


@pytest.mark.parametrize(
    ("call", "exc", "message"),
    [pytest.param(c, e, m, id=name) for name, c, e, m in BAD_CALLS],
)
def test_bad_call_is_refused_and_changes_nothing(
    call: Call, exc: type[Exception], message: str
) -> None:
    s = populated()
    before = snapshot(s)
    with pytest.raises(exc, match=message):
        call(s)
    s._check_consistency()
    assert snapshot(s) == before
    # And it still works.
    s.done("b", now=2.0)
    s.done("a", now=2.0)
    assert s.pop_many(10, now=2.0) == ["c", "a"]


def test_a_failed_add_many_adds_nothing() -> None:
    s = Scheduler()
    with pytest.raises(TypeError):
        s.add_many(["a", "b", object()])  # type: ignore[list-item]
    assert len(s) == 0
    assert s.stats(now=0.0)["adds_total"] == 0


def test_an_iterator_that_raises_adds_nothing() -> None:
    def keys() -> Any:
        yield "a"
        raise RuntimeError("boom")

    s = Scheduler()
    with pytest.raises(RuntimeError, match="boom"):
        s.add_many(keys())
    assert len(s) == 0


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"concurrency": -1}, ValueError, "concurrency must be an int >= 0"),
        ({"debounce": -1.0}, ValueError, "debounce must be"),
        ({"debounce": math.nan}, ValueError, "debounce must be"),
        ({"debounce": 2.0, "debounce_max": 1.0}, ValueError, "debounce_max must be >= debounce"),
        ({"max_wait": math.nan}, ValueError, "max_wait must be"),
        ({"max_wait": -1.0}, ValueError, "max_wait must be"),
        ({"backoff_base": -0.1}, ValueError, "backoff_base must be"),
        ({"backoff_max": math.nan}, ValueError, "backoff_max must be"),
        ({"seed": -1}, ValueError, "seed must be an int in"),
        ({"seed": 2**64}, ValueError, "seed must be an int in"),
        ({"seed": "x"}, ValueError, "seed must be an int in"),
        ({"group_concurrency": -1}, ValueError, r"group_concurrency must be an int in \[0, "),
        ({"group_concurrency": True}, ValueError, "group_concurrency must be .* got True"),
        ({"group_concurrency": 1.5}, ValueError, "group_concurrency must be .* got 1.5"),
        ({"group_concurrency": "2"}, ValueError, "group_concurrency must be .* got '2'"),
        ({"group_concurrency": 2**32}, ValueError, "group_concurrency must be .* got 4294967296"),
    ],
)
@pytest.mark.parametrize("cls", [Scheduler, ModelScheduler])
def test_bad_config_is_refused(
    cls: type[Scheduler] | type[ModelScheduler],
    kwargs: dict[str, Any],
    exc: type[Exception],
    message: str,
) -> None:
    with pytest.raises(exc, match=message):
        cls(**kwargs)


def test_constructor_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        Scheduler(4)  # type: ignore[call-arg]


def test_huge_values_are_clamped_not_errors() -> None:
    s = Scheduler(debounce=math.inf, backoff_max=math.inf, backoff_base=1e308, max_wait=math.inf)
    assert s.debounce == s.debounce_max == s.backoff_max == s.backoff_base == 15_552_000.0
    assert s.max_wait == math.inf
    s.add("a", after=1e308, now=1e15)
    assert s.next_ready_at() == 1e15 + 15_552_000.0


@pytest.mark.parametrize("name", ["add", "done", "forget", "is_in_flight"])
def test_model_refuses_the_same_keys(name: str) -> None:
    m = ModelScheduler()
    with pytest.raises(TypeError, match="key must be str, not int"):
        getattr(m, name)(1)


def test_done_many_refuses_bad_keys_whole_and_names_the_key_not_in_flight() -> None:
    """Batched done: a non-str key (or a str as the batch) refuses the whole batch with a
    TypeError naming its index; a key not in flight stops it with the done() KeyError."""
    for impl in (Scheduler(seed=0), ModelScheduler(seed=0)):
        impl.add_many(["a", "b", "c"], now=0.0)
        assert impl.pop_many(3, now=0.0) == ["a", "b", "c"]
        with pytest.raises(TypeError, match=r"done_many\(\) key at index 1 must be str, not int"):
            impl.done_many(["a", 1], now=1.0)  # type: ignore[list-item]
        with pytest.raises(TypeError, match="not a str"):
            impl.done_many("abc", now=1.0)
        assert impl.in_flight == 3
        with pytest.raises(KeyError, match=r"done_many\(\): key 'x' is not in flight"):
            impl.done_many(["a", "x", "b"], now=1.0)
        assert (impl.is_in_flight("a"), impl.is_in_flight("b")) == (False, True)
        impl.done_many(iter(["b", "c"]), now=1.0)
        assert (impl.in_flight, len(impl)) == (0, 0)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "2", 2**32])
@pytest.mark.parametrize("cls", [Scheduler, ModelScheduler])
def test_a_bad_group_cap_is_refused_and_changes_nothing(
    cls: type[Scheduler] | type[ModelScheduler], bad: Any
) -> None:
    s = cls(group_concurrency=2)
    with pytest.raises(ValueError, match="group_concurrency must be an int in"):
        s.set_group_concurrency("g", bad)
    with pytest.raises(ValueError, match="non-empty"):
        s.set_group_concurrency("", 1)
    assert s.group_concurrency_of("g") == 2
