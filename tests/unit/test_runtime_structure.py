"""The runtime's structure, checked: the Manager builds environments and reads only what a
Controller offers publicly (its spec, name, client, run/stream/shutdown). The size of its
modules (and every other's) is test_module_lines.py's.

Like the layer test (test_layers.py), these read the source: a Manager that reaches into a
Controller's private state again fails here before it is reviewed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fastctl

PACKAGE = Path(fastctl.__file__).parent
RUNTIME = PACKAGE / "runtime"
MANAGER = sorted((RUNTIME / "manager").glob("*.py"))


def foreign_private_uses(source: str) -> list[str]:
    """Attribute reads ``x._name`` where ``x`` is not ``self``/``cls``: another object's
    private member (dunders and module-private imports are not attribute reads)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", MANAGER, ids=lambda p: p.name)
def test_the_manager_uses_no_private_member_of_another_object(path: Path) -> None:
    assert foreign_private_uses(path.read_text()) == []


def test_the_check_sees_a_private_call() -> None:
    """The check above is not vacuous: it finds what it must refuse."""
    source = "def f(self, ctl):\n    ctl._gate_on(None)\n    self._ok()\n    x.__class__\n"
    assert foreign_private_uses(source) == ["line 2: ctl._gate_on"]
