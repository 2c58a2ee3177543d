"""Verbs per kind in the derived RBAC: ``needs(verbs={KIND: (...)})`` grants a kind what its
controller's reconcile sends for it and nothing the other owned kinds need."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration
from pydantic import BaseModel

from fastctl import ApplierConfig
from fastctl.demo import widgets
from fastctl.deploy import needs
from fastctl.kube import CustomResource, Resource
from fastctl.runtime import Controller
from fastctl.types import ObjectRef

from .test_rbac import by_resource, permissions_of

SECRET = Resource("v1", "Secret")
ACCOUNT = Resource("v1", "ServiceAccount")


class GadgetSpec(BaseModel):
    size: int = 1


class Gadget(CustomResource, group="verbs.fastctl.dev", version="v1"):
    spec: GadgetSpec


@pytest.fixture
async def offline() -> AsyncIterator[ApiClient]:
    async with ApiClient(Configuration(host="")) as api:
        yield api


async def _noop(obj: Any, ctx: Any) -> None:
    return None


def _mapper(obj: Any) -> list[ObjectRef]:
    return []


async def test_each_kind_gets_its_own_verbs(offline: ApiClient) -> None:
    quiet = ApplierConfig(failure_events=False)  # no Events rule for failed reconciles
    ctl = (
        Controller(offline, widgets.WIDGET, _noop, namespace="n", config=quiet)
        .owns(widgets.CONFIGMAP)
        .owns(SECRET)
        .watches(ACCOUNT, _mapper)
    )
    needs(
        ctl,
        status=False,
        finalizer=False,
        events=False,
        verbs={SECRET: ("create", "patch"), ACCOUNT: ("get",), widgets.WIDGET: ("get",)},
    )
    perms = await permissions_of(ctl, widgets)
    assert by_resource(perms.namespaced["n"]) == {
        ("", "configmaps"): ("create", "delete", "list", "patch", "watch"),  # `owned`
        ("", "secrets"): ("create", "list", "patch", "watch"),  # no delete
        ("", "serviceaccounts"): ("get", "list", "watch"),
        ("demo.fastctl.dev", "widgets"): ("get", "list", "watch"),
    }


async def test_an_owned_kind_with_no_verbs_is_only_listed_and_watched(offline: ApiClient) -> None:
    ctl = needs(Controller(offline, widgets.WIDGET, _noop).owns(SECRET), verbs={SECRET: ()})
    assert by_resource((await permissions_of(ctl, widgets)).cluster)[("", "secrets")] == (
        "list",
        "watch",
    )


async def test_a_typed_primary_is_named_by_its_model(offline: ApiClient) -> None:
    quiet = ApplierConfig(failure_events=False)
    ctl = Controller(offline, Gadget, _noop, namespace="n", config=quiet)
    needs(ctl, status=False, finalizer=False, events=False, verbs={Gadget: ("update",)})
    perms = await permissions_of(ctl, None)
    assert by_resource(perms.namespaced["n"]) == {
        ("verbs.fastctl.dev", "gadgets"): ("list", "update", "watch")
    }


async def test_a_kind_the_controller_does_not_watch_is_refused(offline: ApiClient) -> None:
    ctl = Controller(offline, widgets.WIDGET, _noop).owns(widgets.CONFIGMAP)
    with pytest.raises(ValueError, match=r"does not watch .*Secret.*rules="):
        needs(ctl, verbs={SECRET: ("get",)})


async def test_verbs_given_as_one_string_are_refused(offline: ApiClient) -> None:
    ctl = Controller(offline, widgets.WIDGET, _noop).owns(SECRET)
    with pytest.raises(TypeError, match="sequence of verb names"):
        needs(ctl, verbs={SECRET: "get"})
    with pytest.raises(TypeError, match="sequence of verb names"):
        needs(ctl, owned="patch")
