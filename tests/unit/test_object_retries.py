"""Object calls sent again after a 429, a 503 or a reset, where that is safe
(`fastctl.kube._call_retry`): the decision for each failure and kind of call, the backoff
and its cap, ``Retry-After`` from the header and from the Status body, and the calls
themselves (`get`, `create`, `patch`, `apply`, `delete`) against a scripted session on the
virtual clock, with each retry counted in ``rest_client_request_retries_total``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import orjson
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from fastctl import ApiError
from fastctl.kube import RetryPolicy, apply, create, delete, get, patch, set_retry_policy
from fastctl.kube._call_retry import Safety, retry_delay
from fastctl.kube._http import error_from_response
from fastctl.kube._objects import patch_safety
from fastctl.kube._request_metrics import REQUESTS
from fastctl.kube._resource import ResolvedResource
from fastctl.testing import virtual_time

NO_JITTER = RetryPolicy(retries=5, initial=0.25, maximum=2.0, jitter=0.0, max_retry_after=60.0)


def api_error(
    status: int, *, retry_after: int | None = None, header: str | None = None
) -> ApiError:
    body: dict[str, Any] = {"kind": "Status", "code": status, "reason": "X", "message": "m"}
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return error_from_response(
        status, orjson.dumps(body), method="PATCH", path="/p", retry_after=header
    )


def _connector_error() -> aiohttp.ClientConnectorError:
    key = aiohttp.client_reqrep.ConnectionKey("h", 1, False, False, None, None, None)
    return aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused"))


# -- the decision ----------------------------------------------------------------------------

RETRIED_FOR_EVERY_CALL = [
    ("429", lambda: api_error(429)),
    ("429 with Retry-After", lambda: api_error(429, retry_after=1)),
    ("503 with a Retry-After header", lambda: api_error(503, header="2")),
    ("503 with retryAfterSeconds", lambda: api_error(503, retry_after=2)),
    ("connection refused", _connector_error),
]
RETRIED_IF_IDEMPOTENT = [
    ("503", lambda: api_error(503)),
    ("reset", lambda: aiohttp.ClientOSError(104, "Connection reset by peer")),
    ("disconnected", lambda: aiohttp.ServerDisconnectedError()),
    ("answer cut short", lambda: aiohttp.ClientPayloadError("cut")),
    ("reset, raw", lambda: ConnectionResetError(104, "reset")),
]
NEVER_RETRIED = [
    ("500", lambda: api_error(500)),
    ("502", lambda: api_error(502)),
    ("504", lambda: api_error(504)),
    ("409", lambda: api_error(409)),
    ("404", lambda: api_error(404)),
    ("422", lambda: api_error(422)),
    ("timeout", lambda: TimeoutError()),
    ("aiohttp timeout", lambda: aiohttp.ServerTimeoutError("slow")),
    ("value error", lambda: ValueError("no")),
]


@pytest.mark.parametrize("safety", list(Safety))
@pytest.mark.parametrize(("what", "failure"), RETRIED_FOR_EVERY_CALL)
def test_a_failure_the_server_did_not_handle_is_retried_for_every_call(
    safety: Safety, what: str, failure: Callable[[], BaseException]
) -> None:
    assert retry_delay(NO_JITTER, safety, 1, failure()) is not None, what


@pytest.mark.parametrize(("what", "failure"), RETRIED_IF_IDEMPOTENT)
def test_a_failure_after_the_request_went_out_is_retried_only_if_idempotent(
    what: str, failure: Callable[[], BaseException]
) -> None:
    assert retry_delay(NO_JITTER, Safety.IDEMPOTENT, 1, failure()) is not None, what
    assert retry_delay(NO_JITTER, Safety.REJECTED_ONLY, 1, failure()) is None, what


@pytest.mark.parametrize("safety", list(Safety))
@pytest.mark.parametrize(("what", "failure"), NEVER_RETRIED)
def test_other_failures_are_the_callers(
    safety: Safety, what: str, failure: Callable[[], BaseException]
) -> None:
    assert retry_delay(NO_JITTER, safety, 1, failure()) is None, what


def test_a_certificate_that_does_not_verify_is_not_retried() -> None:
    key = aiohttp.client_reqrep.ConnectionKey("h", 1, True, True, None, None, None)
    exc = aiohttp.ClientConnectorCertificateError(key, ValueError("self-signed"))
    assert retry_delay(NO_JITTER, Safety.IDEMPOTENT, 1, exc) is None


def test_the_backoff_doubles_up_to_its_cap_and_the_retries_run_out() -> None:
    failure = api_error(429)
    delays = [retry_delay(NO_JITTER, Safety.IDEMPOTENT, n, failure) for n in range(1, 7)]
    assert delays == [0.25, 0.5, 1.0, 2.0, 2.0, None]
    assert retry_delay(RetryPolicy(retries=0), Safety.IDEMPOTENT, 1, failure) is None


def test_the_backoff_is_jittered_within_its_spread() -> None:
    policy = RetryPolicy(initial=1.0, maximum=10.0, jitter=0.2)
    delays = {retry_delay(policy, Safety.IDEMPOTENT, 1, api_error(429)) for _ in range(200)}
    assert all(d is not None and 0.8 <= d <= 1.2 for d in delays)
    assert len(delays) > 100  # spread, not one value


@pytest.mark.parametrize(
    ("failure", "asked"),
    [
        (api_error(429, header="3"), 3.0),
        (api_error(429, retry_after=3), 3.0),
        (api_error(429, retry_after=2, header="3"), 3.0),
        (api_error(503, retry_after=4, header="1"), 4.0),
    ],
)
def test_retry_after_from_the_header_or_the_body_is_honoured_with_jitter_upward(
    failure: ApiError, asked: float
) -> None:
    policy = RetryPolicy(initial=0.25, maximum=2.0, jitter=0.2)
    delays = [retry_delay(policy, Safety.REJECTED_ONLY, 1, failure) for _ in range(100)]
    assert all(d is not None and asked <= d <= asked * 1.2 for d in delays)
    assert len(set(delays)) > 50


def test_a_retry_after_past_the_bound_is_not_waited_for() -> None:
    policy = RetryPolicy(max_retry_after=30.0)
    assert retry_delay(policy, Safety.IDEMPOTENT, 1, api_error(429, retry_after=31)) is None
    assert retry_delay(policy, Safety.IDEMPOTENT, 1, api_error(429, retry_after=30)) is not None


@pytest.mark.parametrize("header", ["Fri, 31 Dec 1999 23:59:59 GMT", "soon", "0", "-4", ""])
def test_a_retry_after_header_that_is_not_seconds_is_ignored(header: str) -> None:
    assert api_error(429, header=header).retry_after is None


@pytest.mark.parametrize(
    ("body", "patch_type", "safety"),
    [
        ({"spec": {"a": 1}}, "merge", Safety.IDEMPOTENT),
        ({"spec": {"a": 1}}, "apply", Safety.IDEMPOTENT),
        ({"spec": {"a": 1}}, "strategic", Safety.REJECTED_ONLY),
        ({"metadata": {"resourceVersion": "7"}, "spec": {}}, "strategic", Safety.IDEMPOTENT),
        ([{"op": "add", "path": "/spec/x/-", "value": 1}], "json", Safety.REJECTED_ONLY),
        (
            [
                {"op": "test", "path": "/spec/y", "value": 1},
                {"op": "add", "path": "/spec/x/-", "value": 1},
            ],
            "json",
            Safety.REJECTED_ONLY,
        ),
        (
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "add", "path": "/spec/x/-", "value": 1},
            ],
            "json",
            Safety.IDEMPOTENT,
        ),
    ],
)
def test_a_patch_is_idempotent_when_it_sets_values_or_carries_its_own_precondition(
    body: Any, patch_type: Any, safety: Safety
) -> None:
    assert patch_safety(body, patch_type) is safety


@pytest.mark.parametrize(
    "policy",
    [
        {"retries": -1},
        {"retries": 1.5},
        {"initial": -1.0},
        {"maximum": float("inf")},
        {"jitter": 1.0},
        {"max_retry_after": float("nan")},
    ],
)
def test_a_retry_policy_refuses_nonsense(policy: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(policy))):
        RetryPolicy(**policy)


# -- the calls -------------------------------------------------------------------------------

CONFIGMAPS = ResolvedResource("", "v1", "ConfigMap", "configmaps", True, None, None)
HOST = "retries.example:6443"


class _Answer:
    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        self.status = status
        self._body = orjson.dumps(body)
        self.headers = headers

    async def __aenter__(self) -> _Answer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def read(self) -> bytes:
        return self._body


Step = BaseException | tuple[int, dict[str, Any], dict[str, str]]
Script = Sequence[Step]


class _Session:
    """Answers requests from a script, recording (method, time) of each attempt."""

    def __init__(self, script: Script) -> None:
        self.script: list[Step] = list(script)
        self.sent: list[tuple[str, float]] = []

    async def request(self, method: str, url: str, **kwargs: Any) -> _Answer:
        self.sent.append((method, asyncio.get_running_loop().time()))
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return _Answer(*step)


def throttled(retry_after: int) -> Step:
    """What priority and fairness answers: 429, the header and the Status's details."""
    body = {
        "kind": "Status",
        "code": 429,
        "reason": "TooManyRequests",
        "message": "Too many requests, please try again later.",
        "details": {"retryAfterSeconds": retry_after},
    }
    return 429, body, {"Retry-After": str(retry_after)}


OK: Step = (200, {"kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "5"}}, {})
CREATED: Step = (201, {"kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "5"}}, {})
UNAVAILABLE: Step = (503, {"kind": "Status", "code": 503, "reason": "ServiceUnavailable"}, {})


def scripted(script: Script, policy: RetryPolicy = NO_JITTER) -> tuple[ApiClient, _Session]:
    api = ApiClient(Configuration(host=f"https://{HOST}"))
    session = _Session(script)
    api.rest_client.pool_manager = session  # type: ignore[assignment]
    set_retry_policy(api, policy)
    return api, session


def retries_counted() -> dict[tuple[str, str], int]:
    return {(code, verb): n for (code, verb, host), n in REQUESTS.retries().items() if host == HOST}


@virtual_time
async def test_a_throttled_create_waits_out_retry_after_and_succeeds() -> None:
    before = retries_counted()
    api, session = scripted([throttled(1), throttled(1), CREATED])
    obj = {"metadata": {"name": "a", "namespace": "ns"}, "data": {}}
    created = await create(api, CONFIGMAPS, obj)
    assert created["metadata"]["resourceVersion"] == "5"
    assert session.sent == [("POST", 0.0), ("POST", 1.0), ("POST", 2.0)]
    after = retries_counted()
    assert after.get(("429", "POST"), 0) - before.get(("429", "POST"), 0) == 2


@virtual_time
async def test_a_create_is_not_sent_again_after_a_reset_or_a_bare_503() -> None:
    obj = {"metadata": {"name": "a", "namespace": "ns"}, "data": {}}
    api, session = scripted([aiohttp.ServerDisconnectedError(), CREATED])
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await create(api, CONFIGMAPS, obj)
    assert len(session.sent) == 1
    api, session = scripted([UNAVAILABLE, CREATED])
    with pytest.raises(ApiError) as caught:
        await create(api, CONFIGMAPS, obj)
    assert caught.value.status == 503
    assert len(session.sent) == 1


@virtual_time
async def test_idempotent_calls_are_sent_again_after_a_reset_and_a_bare_503() -> None:
    api, session = scripted([aiohttp.ServerDisconnectedError(), UNAVAILABLE, OK])
    assert (await get(api, CONFIGMAPS, "a", namespace="ns"))["metadata"]["name"] == "a"
    assert session.sent == [("GET", 0.0), ("GET", 0.25), ("GET", 0.75)]
    api, session = scripted([aiohttp.ClientOSError(104, "reset"), OK])
    await apply(api, CONFIGMAPS, {"metadata": {"name": "a", "namespace": "ns"}}, field_manager="t")
    assert [m for m, _ in session.sent] == ["PATCH", "PATCH"]
    api, session = scripted([UNAVAILABLE, OK])
    await patch(api, CONFIGMAPS, "a", {"data": {"x": "1"}}, namespace="ns")
    assert len(session.sent) == 2
    api, session = scripted([aiohttp.ServerDisconnectedError(), OK])
    await delete(api, CONFIGMAPS, "a", namespace="ns")
    assert [m for m, _ in session.sent] == ["DELETE", "DELETE"]


@virtual_time
async def test_a_json_patch_without_a_precondition_is_sent_once_after_a_reset() -> None:
    api, session = scripted([aiohttp.ServerDisconnectedError(), OK])
    ops = [{"op": "add", "path": "/data/x", "value": "1"}]
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await patch(api, CONFIGMAPS, "a", ops, namespace="ns", patch_type="json")
    assert len(session.sent) == 1


@virtual_time
async def test_a_call_that_keeps_failing_gives_up_after_its_retries_with_the_last_error() -> None:
    api, session = scripted([throttled(1)] * 6 + [OK], NO_JITTER)
    with pytest.raises(ApiError) as caught:
        await get(api, CONFIGMAPS, "a", namespace="ns")
    assert caught.value.status == 429
    assert caught.value.retry_after == 1.0
    assert len(session.sent) == 6  # the first attempt and five retries


@virtual_time
async def test_a_server_that_asks_for_too_long_is_not_waited_for() -> None:
    api, session = scripted([throttled(120), OK], RetryPolicy(max_retry_after=60.0))
    with pytest.raises(ApiError):
        await get(api, CONFIGMAPS, "a", namespace="ns")
    assert session.sent == [("GET", 0.0)]


@virtual_time
async def test_without_retries_every_failure_reaches_the_caller_at_once() -> None:
    api, session = scripted([throttled(1), OK], RetryPolicy(retries=0))
    with pytest.raises(ApiError):
        await get(api, CONFIGMAPS, "a", namespace="ns")
    assert len(session.sent) == 1
