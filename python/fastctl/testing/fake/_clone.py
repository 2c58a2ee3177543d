"""Copies of the JSON objects a fake cluster stores and hands out.

The fake copies an object wherever a real server would hold a separate one (a request's
body, the stored version, what a client gets back), so a caller changing what it holds
never changes what is stored. A round trip through orjson does that about six times
faster than `copy.deepcopy` for an object of a few kilobytes (3.4 against 21 us for a
Widget with managed fields and conditions; docs/benchmarks.md), and gives what a client
of a real server gets: JSON types (a tuple becomes a list, a datetime its RFC 3339 text).
A value JSON cannot hold (an integer past 64 bits, a key that is not text) falls back to
`copy.deepcopy`, so the fake refuses nothing a deep copy took.
"""

from __future__ import annotations

import copy
from typing import TypeVar

import orjson

__all__ = ["clone"]

T = TypeVar("T")


def clone(value: T) -> T:
    """A deep copy of a JSON value (see the module docstring)."""
    if value is None:
        return value
    try:
        out: T = orjson.loads(orjson.dumps(value))
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return copy.deepcopy(value)
    return out
