"""``fastctl migrate TARGET``: rewrite every object of a CRD at its storage version, then
set its ``status.storedVersions`` to that version alone, so older versions can be removed.

TARGET is what ``fastctl crd`` takes (an operator, ``module:make``, whose every CRD is
migrated; models, ``module:Model``) or CRD names (``widgets.example.com``). A CRD whose
``storedVersions`` is its storage version alone is left as it is. Each page of objects
prints one line of progress on stderr; the exit status is 0 when every CRD is migrated, 1
when one could not be (the line says why: a conversion webhook that does not answer, say,
and its ``storedVersions`` is then unchanged). Killed, it is safe to run again: it starts
over, and the objects already rewritten cost one request each and no write.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from fastctl._rate import RateLimit
from fastctl.cli import CliError, Subcommands
from fastctl.cli._target import load

__all__ = ["crd_names", "register"]


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "migrate",
        help="rewrite a CRD's objects at its storage version, then drop the old versions "
        "from status.storedVersions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "targets",
        nargs="+",
        metavar="TARGET",
        help="module:attr (an operator or models), or CRD names (plural.group)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube)")
    parser.add_argument(
        "--qps", type=float, default=100.0, help="object writes a second (default: 100)"
    )
    parser.add_argument("--burst", type=int, help="writes at once after a pause (default: qps)")
    parser.add_argument("--page-size", type=int, default=500, help="objects a list page (500)")
    parser.add_argument("--concurrency", type=int, default=8, help="writes in flight (8)")
    parser.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING, ERROR")
    parser.set_defaults(handler=handle)


def crd_names(targets: list[str]) -> list[str]:
    """The CRD names `targets` stand for (see the module docstring), in order, once each."""
    names: list[str] = []
    for target in targets:
        if ":" not in target:
            if "." not in target:
                raise CliError(f"{target}: expected module:attr or a CRD name (plural.group)")
            names.append(target)
            continue
        from fastctl.cli.crd import documents

        names.extend(doc["metadata"]["name"] for doc in documents([target]))
    return list(dict.fromkeys(names))


def handle(args: argparse.Namespace) -> int:
    from fastctl.cli.run import configure_logging

    configure_logging(args.log_level)
    if args.qps <= 0 or args.page_size <= 0 or args.concurrency <= 0:
        raise CliError("--qps, --page-size and --concurrency must be positive")
    rate = RateLimit(args.qps, args.burst or max(1, int(args.qps)))
    for target in args.targets:
        if ":" in target:
            load(target)  # an import error is reported before anything is written
    names = crd_names(args.targets)
    return asyncio.run(_migrate(names, rate, args))


async def _migrate(names: list[str], rate: RateLimit, args: argparse.Namespace) -> int:
    import aiohttp

    from fastctl.errors import StorageMigrationError
    from fastctl.kube._client import KubeconfigError, load_client
    from fastctl.kube._storage_migration import MigrationProgress
    from fastctl.runtime._storage_migration import StorageMigration

    def show(state: MigrationProgress) -> None:
        print(f"fastctl migrate: {state.summary()}", file=sys.stderr, flush=True)

    try:
        client = await load_client(args.kubeconfig)
    except KubeconfigError as exc:
        raise CliError(str(exc)) from None
    try:
        for name in names:
            migration = StorageMigration(
                client,
                name,
                rate=rate,
                page_size=args.page_size,
                concurrency=args.concurrency,
                progress=show,
            )
            try:
                result = await migration.run()
            except StorageMigrationError as exc:
                raise CliError(str(exc)) from None
            except (aiohttp.ClientError, OSError) as exc:  # no answer: nothing was changed
                raise CliError(f"{name}: the API server did not answer: {exc!r}") from None
            if result.listed == 0 and result.stored_versions == (result.storage_version,):
                print(
                    f"fastctl migrate: {name}: nothing to do (storedVersions "
                    f"[{result.storage_version}])",
                    file=sys.stderr,
                )
            else:
                print(
                    f"fastctl migrate: {name}: done, storedVersions "
                    f"{list(result.stored_versions)} -> [{result.storage_version}]",
                    file=sys.stderr,
                )
    finally:
        await client.close()
    return 0
