"""pytest plugin for fastctl (registered through the ``pytest11`` entry point).

Placeholder until the control plane fixtures land: it only registers the markers.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers so ``--strict-markers`` accepts them in any project."""
    config.addinivalue_line("markers", "kube: needs the real local control plane")
