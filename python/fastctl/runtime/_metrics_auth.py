"""Who may scrape ``/metrics``: the bearer token, checked by the API server, briefly cached.

Metrics name the objects an operator manages and how it is doing, so the Manager serves
them only to callers the cluster's own RBAC allows, the way controller-runtime's
``WithAuthenticationAndAuthorization`` filter does:

1. a ``TokenReview`` asks the API server who the bearer token belongs to (401 without a
   token, or with one the server does not accept);
2. a ``SubjectAccessReview`` asks whether that user may ``get`` the non-resource URL
   ``/metrics`` (403 if not). A ClusterRole with ``nonResourceURLs: ["/metrics"]`` and
   ``verbs: ["get"]`` bound to Prometheus's ServiceAccount grants it.

Prometheus scrapes every 15 to 60 s with the same token, so each answer is cached by the
token's SHA-256 (never the token itself): an allowed token for `allowed_ttl` (60 s), a
refused one for `denied_ttl` (10 s, so a binding just created is honoured soon), at most
`max_entries` tokens (the oldest go first). Most scrapes then cost no API call, and a flood
of made-up tokens costs at most one pair of reviews each and cannot grow the cache. A review
that fails (the API server is down) is not cached and answers 500: the scrape is retried.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes_asyncio.client import ApiClient

from fastctl._clock import monotonic
from fastctl.kube._http import request_json

__all__ = ["MetricsAuthorizer", "Verdict"]

log = logging.getLogger("fastctl.health")

_TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to one scrape: an HTTP `status` (200, 401, 403 or 500) and why."""

    status: int
    reason: str

    @property
    def allowed(self) -> bool:
        return self.status == 200


class MetricsAuthorizer:
    """Checks the ``Authorization`` header of a scrape (see the module docstring)."""

    def __init__(
        self,
        client: ApiClient,
        *,
        path: str = "/metrics",
        allowed_ttl: float = 60.0,
        denied_ttl: float = 10.0,
        max_entries: int = 1024,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.client = client
        self.path = path
        self.allowed_ttl = allowed_ttl
        self.denied_ttl = denied_ttl
        self.max_entries = max_entries
        self._clock = clock
        self._cache: OrderedDict[bytes, tuple[float, Verdict]] = OrderedDict()
        self.reviews = 0
        """How many TokenReviews were sent (each cache miss with a token sends one)."""

    async def check(self, authorization: str | None) -> Verdict:
        """The verdict for an ``Authorization`` header value (``None``: no header)."""
        token = _bearer(authorization)
        if token is None:
            return Verdict(401, "a bearer token is required")
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            verdict = await self._review(token)
        except Exception as exc:  # the API server's trouble: retry on the next scrape
            log.warning("cannot review a metrics token: %s", exc)
            return Verdict(500, "the token could not be reviewed")
        ttl = self.allowed_ttl if verdict.allowed else self.denied_ttl
        self._cache[digest] = (now + ttl, verdict)
        self._cache.move_to_end(digest)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return verdict

    async def _review(self, token: str) -> Verdict:
        self.reviews += 1
        review = await self._create(
            _TOKEN_REVIEWS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        status = review.get("status") or {}
        if status.get("authenticated") is not True:  # a yes in so many words, not "false"
            return Verdict(401, "the token is not valid")
        user = status.get("user") or {}
        spec: dict[str, Any] = {
            "user": user.get("username", ""),
            "uid": user.get("uid", ""),
            "groups": user.get("groups") or [],
            "extra": user.get("extra") or {},
            "nonResourceAttributes": {"path": self.path, "verb": "get"},
        }
        access = await self._create(
            _ACCESS_REVIEWS,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        if (access.get("status") or {}).get("allowed") is True:
            return Verdict(200, "allowed")
        return Verdict(403, f"{spec['user'] or 'this user'} may not get {self.path}")

    async def _create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = await request_json(
            self.client, "POST", path, body=orjson.dumps(body), request_timeout=10.0
        )
        if not isinstance(answer, dict):
            raise ValueError(f"POST {path}: the answer is not an object")
        return answer


def _bearer(header: str | None) -> str | None:
    """The token of ``Bearer <token>`` (the scheme case-insensitive), else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token
