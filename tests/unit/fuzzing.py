"""Shared Hypothesis settings and strategies of the input-boundary fuzz tests
(``tests/unit/test_fuzz_*.py``).

Each test runs a small number of examples by default, so the suite stays fast;
``FASTCTL_FUZZ_EXAMPLES=1000 python -m pytest tests/unit/test_fuzz_*.py`` is the long run
(docs/security.md). Derandomized and without an example database: a failure reproduces
from the command alone.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

_BASE = settings(
    derandomize=True,
    database=None,
    deadline=None,  # the machine is shared: a slow example is no bug (hangs are guarded)
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)


def fuzz_settings(examples: int) -> settings:
    """`examples` inputs (``FASTCTL_FUZZ_EXAMPLES`` overrides it) on the deterministic
    `_BASE` settings."""
    return settings(_BASE, max_examples=int(os.environ.get("FASTCTL_FUZZ_EXAMPLES", examples)))


SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)

JSON: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON value, small."""


_DROP = object()


def shaped(template: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values shaped like `template` (a dict of strategies or nested templates), each key
    now and then dropped or replaced by any `JSON` value: mostly right, wrong in one or two
    places, which reaches further into the code than uniformly random JSON does."""
    fields = {
        key: _mostly(shaped(value) if isinstance(value, dict) else value, JSON | st.just(_DROP))
        for key, value in template.items()
    }
    whole = st.fixed_dictionaries(fields).map(
        lambda d: {k: v for k, v in d.items() if v is not _DROP}
    )
    return _mostly(whole, JSON)


def _mostly(right: st.SearchStrategy[Any], wrong: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`right` 39 times in 40, else `wrong`."""
    return st.integers(0, 39).flatmap(lambda n: right if n else wrong)
