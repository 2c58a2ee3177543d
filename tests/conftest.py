"""Fixtures shared by the tests that talk to the real API server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient

from fastctl.client import load_client
from fastctl.testing.control_plane import ControlPlane


@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    """An admin client of the session's control plane."""
    client = await load_client(control_plane.kubeconfig)
    try:
        yield client
    finally:
        await client.close()
