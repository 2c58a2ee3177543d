"""The ``fastctl`` command line.

Each subcommand is one module with a ``register(subcommands)`` function that adds its
parser and sets ``handler`` (``(args) -> int``) as a default; adding a subcommand is that
module plus one line in `COMMANDS`. Modules import their heavy dependencies inside the
handlers, so ``fastctl --help`` stays fast.

A handler reports a failure by raising `CliError`: ``main`` prints it as one line,
``fastctl: error: ...``, and returns its exit code. Tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias

from fastctl._version import version

__all__ = ["COMMANDS", "CliError", "Subcommands", "build_parser", "main"]

COMMANDS: tuple[str, ...] = (
    "fastctl.cli.run",
    "fastctl.cli.crd",
    "fastctl.cli.manifests",
    "fastctl.cli.migrate",
    "fastctl.cli.demo",
    "fastctl.cli.control_plane",
    "fastctl.cli.inspect",
    "fastctl.cli.init",
)
"""The modules that provide subcommands, in ``--help`` order."""

if TYPE_CHECKING:
    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]
else:  # not subscriptable at run time
    Subcommands = argparse._SubParsersAction
Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A failure to report to the user as one line (no traceback), with an exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _CommandModule(Protocol):
    def register(self, subcommands: Subcommands) -> None: ...


class _Version(argparse.Action):
    """``--version``: the version is read when asked for, not when the parser is built (the
    installed metadata costs imports every other command does without)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"fastctl {version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastctl",
        description="Kubernetes controllers in Python on a Rust scheduling core.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version")
    subcommands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in COMMANDS:
        module: _CommandModule = importlib.import_module(name)
        module.register(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except CliError as exc:
        print(f"fastctl: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("fastctl: interrupted", file=sys.stderr)
        return 130
