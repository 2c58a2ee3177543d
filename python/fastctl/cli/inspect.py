"""``fastctl inspect [--controller NAME] [--address URL] [--json] [NAMESPACE/NAME]``: ask a
running operator (``fastctl run --debug-queue``, ``Manager(debug_queue_port=...)``) where
an object is in its controllers' queues and why, or, without a name, for every
controller's queue summary (docs/inspect.md).

The operator serves on its loopback only: run this in the pod (``kubectl exec``) or through
``kubectl port-forward POD 8082``.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from fastctl.cli import CliError, Subcommands

__all__ = ["fetch", "render_object", "render_summary"]

DEFAULT_ADDRESS = "http://127.0.0.1:8082"
_TIMEOUT = 10.0


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "inspect",
        help="ask a running operator why an object is (not) being reconciled",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "object",
        nargs="?",
        metavar="NAMESPACE/NAME",
        help="the object (NAME alone: cluster-scoped); omitted: the queue summaries",
    )
    parser.add_argument("--controller", help="the controller's name (default: all of them)")
    parser.add_argument(
        "--address", default=DEFAULT_ADDRESS, help=f"the operator's debug queue ({DEFAULT_ADDRESS})"
    )
    parser.add_argument("--json", action="store_true", help="print the JSON answer")
    parser.set_defaults(handler=handle)


def fetch(address: str, *parts: str) -> Any:
    """GET ``/debug/queue/<parts...>`` from `address` as JSON; a failure is a `CliError`."""
    path = "/".join(["debug", "queue", *(urllib.parse.quote(p, safe="") for p in parts)])
    url = f"{address.rstrip('/')}/{path}"
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            detail = exc.reason
        raise CliError(f"{url}: {exc.code} {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CliError(
            f"cannot reach the operator at {address} ({reason}); is it running with "
            "--debug-queue, and is the port forwarded (kubectl port-forward POD 8082)?"
        ) from None


def handle(args: argparse.Namespace) -> int:
    address = args.address
    if args.object is None:
        if args.controller:
            summaries = [fetch(address, args.controller)]
        else:
            summaries = fetch(address)["controllers"]
        if args.json:
            print(json.dumps(summaries if not args.controller else summaries[0], indent=2))
        else:
            print("\n\n".join(render_summary(s) for s in summaries) or "no controllers")
        return 0
    namespace, sep, name = args.object.rpartition("/")
    if (sep and not namespace) or not name:
        raise CliError(f"expected NAMESPACE/NAME or NAME, got {args.object!r}")
    parts = [namespace, name] if namespace else [name]
    if args.controller:
        names = [args.controller]
    else:
        names = [s["controller"] for s in fetch(address)["controllers"]]
    answers = [fetch(address, ctl, *parts) for ctl in names]
    if not args.controller:
        # Every controller is asked; show the ones that know the object, if any does.
        known = [a for a in answers if a["state"] != "not_known"]
        answers = known or answers
    if args.json:
        print(json.dumps(answers[0] if len(answers) == 1 else answers, indent=2))
    else:
        print("\n\n".join(render_object(a) for a in answers) or "no controllers")
    return 0


def _ago(seconds: float | None) -> str:
    return "" if seconds is None else f" ({seconds:.1f}s ago)"


def render_object(a: dict[str, Any]) -> str:
    """A readable answer for one object."""
    ref = f"{a['namespace']}/{a['name']}" if a["namespace"] else a["name"]
    lines = [f"{ref} in controller {a['controller']}: {a['state']}", f"  {a['message']}"]
    if a["state"] in ("not_known", "idle"):
        return "\n".join(lines)
    lines.append(f"  priority:  {a['priority']}")
    if a.get("group") is not None:
        lines.append(f"  group:     {a['group']}")
    if a["attempts"]:
        lines.append(f"  attempts:  {a['attempts']} failed (backoff ~{a['backoff']:.3g}s)")
    if a["ready_at"] is not None:
        lines.append(f"  next run:  {a['ready_at']} (in {a['ready_in']:.1f}s)")
    if a["since"] is not None:
        lines.append(f"  since:     {a['since']} ({a['age']:.1f}s)")
    if a.get("held"):
        lines.append(f"  held:      group {a['group']} has its cap of reconciles running")
    if a["ahead"] is not None:
        position = f"  position:  {a['ahead']} ahead ({a['ahead_at_priority']} at its priority"
        if a.get("group") is not None:
            position += f", {a['ahead_in_group']} of its group"
        lines.append(position + ")")
    if a["last_error"]:
        lines.append(f"  error:     {a['last_error']}{_ago(a['last_error_ago'])}")
    for title, key in (("queued for", "reasons"), ("running for", "running_reasons")):
        if a[key]:
            lines.append(f"  {title}:")
            lines += [
                f"    {r['reason']} x{r['count']} (last {r['last_ago']:.1f}s ago)" for r in a[key]
            ]
    if a["dropped_reasons"]:
        lines.append(f"    … and {a['dropped_reasons']} older reasons")
    return "\n".join(lines)


def render_summary(s: dict[str, Any]) -> str:
    """A readable queue summary of one controller."""
    limit = s["concurrency"] or "no limit"
    lines = [
        f"controller {s['controller']}: {s['cached']} cached",
        f"  ready {s['ready']}, waiting {s['waiting']}, in flight {s['in_flight']}/{limit}"
        f" ({s['dirty']} to run again)",
    ]
    if s["ready_by_priority"]:
        by = ", ".join(f"{p}: {n}" for p, n in s["ready_by_priority"].items())
        lines.append(f"  ready by priority: {by}")
    oldest = s["oldest_ready"]
    if oldest is not None:
        ref = f"{oldest['namespace']}/{oldest['name']}" if oldest["namespace"] else oldest["name"]
        group = f" (group {oldest['group']})" if oldest.get("group") is not None else ""
        lines.append(f"  oldest ready: {ref} for {oldest['age']:.1f}s{group}")
    if s["next_ready_in"] is not None:
        lines.append(f"  next waiting ready in {s['next_ready_in']:.1f}s")
    if s.get("group_concurrency"):
        lines.append(f"  at most {s['group_concurrency']} in flight per group")
    for name, c in sorted((s.get("by_group") or {}).items()):
        cap = c.get("group_concurrency")
        own = f", at most {cap}" if cap and cap != s.get("group_concurrency") else ""
        held = ", held" if c.get("held") else ""
        lines.append(
            f"  group {name}: {c['keys']} keys, {c['ready']} ready, {c['in_flight']} in flight"
            f" (weight {c['weight']}{own}{held})"
        )
    return "\n".join(lines)
