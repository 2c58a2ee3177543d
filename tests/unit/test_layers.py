"""The layering rule of docs/architecture.md ("Who may import whom"), checked on every
import statement of the package: the engine imports no Kubernetes layer, `kube` no runtime,
`runtime` no `webhook` or `deploy`, `testing` neither of those two, and nothing inside the library
imports the facade `fastctl/__init__.py` (which only re-exports).
Imports under ``if TYPE_CHECKING:`` are annotations only and do not count."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import fastctl

PACKAGE = Path(fastctl.__file__).resolve().parent

LAYERS = ("engine", "kube", "runtime", "webhook", "deploy", "testing", "app")
"""Lowest first: a layer may import its own and the ones before it."""

ALLOWED = {
    "engine": {"engine"},
    "kube": {"engine", "kube"},
    "runtime": {"engine", "kube", "runtime"},
    "webhook": {"engine", "kube", "runtime", "webhook"},
    "deploy": {"engine", "kube", "runtime", "webhook", "deploy"},
    "testing": {"engine", "kube", "runtime", "webhook", "testing"},
    "app": set(LAYERS),
}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("kube", "runtime", "webhook", "deploy", "testing"):
        return parts[1]
    if len(parts) > 1 and parts[1] in ("cli", "demo"):
        return "app"
    return "engine"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, except those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def imports(path: Path) -> Iterator[str]:
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


FACADES = {"fastctl"}
"""Re-exports only: the root package."""

LIBRARY = [
    p
    for p in sorted(PACKAGE.rglob("*.py"))
    if module_name(p) not in FACADES and layer_of(module_name(p)) != "app"
]


@pytest.mark.parametrize("path", LIBRARY, ids=module_name)
def test_a_module_imports_only_its_layer_and_those_below(path: Path) -> None:
    me = module_name(path)
    for target in imports(path):
        if target != "fastctl" and not target.startswith("fastctl."):
            continue
        assert target != "fastctl", f"{me} imports the facade fastctl/__init__.py"
        assert layer_of(target) in ALLOWED[layer_of(me)], f"{me} imports {target}"


def test_the_check_sees_imports() -> None:
    """The walk finds the imports it must judge (else the test above passes vacuously)."""
    controller = PACKAGE / "runtime" / "controller" / "_run.py"
    assert "fastctl.kube._watcher" in set(imports(controller))
    errors = PACKAGE / "errors.py"
    assert "fastctl.kube._resource" not in set(imports(errors))  # under TYPE_CHECKING only
