"""How an entry point takes its options: as keywords, or as one option object.

The option objects (`fastctl.ApplierConfig`, `fastctl.kube.WatchConfig`) state each option
once, with its default and its validation; they are the one full spelling, and internals
take them. The public entry points keep a few common options as keywords too
(``concurrency``, ``debounce``, ``timeout``; ``label_selector``) and turn them into the
object in one place, `pick`, which also accepts a ready-made object (``config=``) and
refuses a call that mixes the two, since it could not say which one wins.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["pick"]

C = TypeVar("C")


def pick(config: C | None, keywords: C, default: C, *, name: str = "config") -> C:
    """`config` when given (the keywords must then be at their defaults), else `keywords`.

    `keywords` is the object built from the entry point's keywords and `default` the object
    built from none; comparing the two tells whether any keyword was set.
    """
    if config is None:
        return keywords
    if not isinstance(config, type(default)):
        raise TypeError(f"{name} must be a {type(default).__name__}, got {type(config).__name__}")
    if keywords != default:
        raise TypeError(f"pass the options either as keywords or as {name}=, not both")
    return config
