"""Deprecated alias of the object API, kept so ``from fastctl.apply import apply`` (the
spelling of fastctl 0.1) keeps working: import from `fastctl.kube` instead."""

import warnings

from fastctl.kube._objects import (
    ApiError,
    PatchType,
    apply,
    apply_status,
    create,
    delete,
    get,
    patch,
    resolved,
)

__all__ = [
    "ApiError",
    "PatchType",
    "apply",
    "apply_status",
    "create",
    "delete",
    "get",
    "patch",
    "resolved",
]


warnings.warn(
    "fastctl.apply is deprecated: import apply, apply_status, get, patch, create and delete "
    "from fastctl.kube",
    DeprecationWarning,
    stacklevel=2,
)
