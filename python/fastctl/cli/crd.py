"""``fastctl crd module:Model [module:Model ...]``: print a model's CRD as YAML.

Each target names a `fastctl.CustomResource` subclass; several targets are versions of one
kind and make one CRD (exactly one declares ``storage=True``). The output is ready for
``kubectl apply -f -`` (or ``--json`` for JSON). A model that no structural schema can
express fails with the field path and the rule it breaks.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fastctl.cli import CliError, Subcommands

__all__ = ["register", "render"]


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "crd",
        help="print the CRD of typed custom resource models (module:Model)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("targets", nargs="+", metavar="module:Model", help="model classes")
    parser.add_argument("--json", action="store_true", help="JSON instead of YAML")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    sys.stdout.write(render(args.targets, as_json=args.json))
    return 0


def render(targets: list[str], *, as_json: bool = False) -> str:
    """The CRD of `targets` as YAML (or JSON) text."""
    from fastctl.cli._target import load

    try:
        from fastctl.errors import SchemaError
        from fastctl.kube._model import CustomResource, crd
    except ImportError as exc:
        raise CliError(
            f"typed resources need pydantic: pip install 'fastctl[typed]' ({exc})"
        ) from None
    models = []
    for target in targets:
        model = load(target).value
        if not (isinstance(model, type) and issubclass(model, CustomResource)):
            raise CliError(f"{target} is not a fastctl.CustomResource subclass")
        models.append(model)
    try:
        document: dict[str, Any] = crd(*models)
    except (SchemaError, ValueError, TypeError) as exc:
        raise CliError(str(exc)) from None
    if as_json:
        return json.dumps(document, indent=2) + "\n"
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise CliError(
            "YAML output needs PyYAML: pip install 'fastctl[typed]' (or --json)"
        ) from None
    text: str = yaml.safe_dump(document, sort_keys=False, width=100)
    return text
