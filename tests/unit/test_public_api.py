"""The public API as docs/contract.md and docs/architecture.md describe it: names are added,
never removed; every exported name resolves; no module is hidden behind a function of the
same name; the exception hierarchy holds; and the docs name only modules and objects that
exist, so they cannot go stale unnoticed."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import fastctl
import fastctl.errors
import fastctl.webhook
from fastctl._core import SCHEDULER_DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(fastctl.__file__).resolve().parent

PUBLIC_PACKAGES = (
    "fastctl",
    "fastctl.kube",
    "fastctl.runtime",
    "fastctl.runtime.leader",
    "fastctl.runtime.sharding",
    "fastctl.deploy",
    "fastctl.errors",
    "fastctl.types",
    "fastctl.testing",
    "fastctl.webhook",
)


def _names(text: str) -> set[str]:
    return set(text.split())


# What fastctl exported before: each of these must stay (new names are welcome).
FASTCTL_ALL = _names(
    """
    DEFAULT_CONCURRENCY INITIAL_LIST_PRIORITY Action ApiError Controller Discovery
    DiscoveryError ErrorPolicy EventKind FastctlError KubeconfigError LeaderElection LeaderElector
    LeadershipLost Manager Mapper ObjectRef Reconcile ReconcileCancelled ReconcileResult
    ReconcileTimeout Recorder ResolvedResource Resource ResourceNotFound Scheduler Store
    Trigger WatchError WatchEvent WatchStreamError applier finalizer load_client reflector
    watcher
    CustomResource KubeModel PrinterColumn ValidationRule InvalidObject SchemaError
    Predicate all_of annotations_changed any_of generation_changed labels_changed
    """
)
KUBE_ALL = _names(
    """
    ApiError Backoff Discovery DiscoveryError EventKind KubeconfigError PatchType Recorder
    ResolvedResource
    Resource ResourceNotFound Store WatchEvent add_finalizer apply apply_status
    controller_uid create delete finalizer get load_client patch reflector remove_finalizer
    resolved watcher MetadataOnlyUnsupported
    CustomResource KubeModel ObjectMeta PrinterColumn ValidationRule crd InvalidObject SchemaError
    """
)
RUNTIME_ALL = _names(
    """
    INITIAL_LIST_PRIORITY Controller LeaderElection LeaderElector Manager
    ObjectInspection QueueSummary ReasonCount RelatedCache
    Predicate all_of annotations_changed any_of generation_changed labels_changed
    """
)
DEPLOY_ALL = _names(
    """
    BUILTIN_RESOURCES EVENTS_RULE LEASE_RULE DeployOptions Needs Operator Permissions PolicyRule
    collect_crds deployment derive describe manifests metrics_rbac needs needs_of rbac_objects
    resolve_offline resolve_resources service_account to_yaml
    CA_NOTE CERT_DIR MANAGED_RULES shared_secret_rules webhook_objects webhook_rules
    webhook_secret webhook_service
    """
)
WEBHOOK_ALL = _names(
    """
    MAX_BODY_BYTES AdmissionRequest AdmissionWebhook Allow Converter Deny
    ManagedWebhookServer Service ServingCertificate SharedSecret WebhookMetrics WebhookServer
    Webhooks configurations conversion install json_patch shared_secret_of uninstall
    """
)


@pytest.mark.parametrize(
    ("package", "names"),
    [
        ("fastctl", FASTCTL_ALL),
        ("fastctl.kube", KUBE_ALL),
        ("fastctl.runtime", RUNTIME_ALL),
        ("fastctl.deploy", DEPLOY_ALL),
        ("fastctl.webhook", WEBHOOK_ALL),
    ],
)
def test_exports_only_grow(package: str, names: set[str]) -> None:
    exported = set(importlib.import_module(package).__all__)
    assert names <= exported, f"{package}.__all__ lost {sorted(names - exported)}"


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    assert len(module.__all__) == len(set(module.__all__)), "a name is listed twice"
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names what it does not define: {missing}"


def test_the_root_exports_the_option_objects() -> None:
    assert fastctl.ApplierConfig is importlib.import_module("fastctl._applier").ApplierConfig
    assert fastctl.WatchConfig is fastctl.kube.WatchConfig


def _submodules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(fastctl.__path__, "fastctl."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # running it is its whole point
        names.append(info.name)
    return names


@pytest.mark.parametrize("name", _submodules())
def test_no_public_module_is_shadowed(name: str) -> None:
    """``import fastctl.x.y as m`` and ``fastctl.x.y`` must be the same object: a package
    that binds a function to a submodule's name makes the module unreachable by attribute
    (``fastctl.kube.finalizer`` is the function because its module is ``_finalizer``)."""
    module = importlib.import_module(name)
    parent_name, _, short = name.rpartition(".")
    if short.startswith("_"):
        return  # implementation: reached through the package's names, not by attribute
    parent = sys.modules[parent_name]
    assert getattr(parent, short) is module, f"{parent_name}.{short} is not the module {name}"


def test_module_attributes_are_reachable() -> None:
    import fastctl.kube as kube

    assert callable(kube.add_finalizer)
    assert callable(kube.finalizer)
    assert callable(fastctl.finalizer)
    assert callable(fastctl.watcher)


def test_every_error_derives_from_fastctl_error() -> None:
    classes = [
        obj
        for obj in vars(fastctl.errors).values()
        if isinstance(obj, type)
        and issubclass(obj, BaseException)
        and obj.__module__ == "fastctl.errors"
    ]
    assert len(classes) == len(fastctl.errors.__all__)
    for cls in classes:
        assert issubclass(cls, fastctl.FastctlError), cls
    assert issubclass(fastctl.ResourceNotFound, LookupError)
    assert issubclass(fastctl.ReconcileTimeout, TimeoutError)
    assert issubclass(fastctl.LeadershipLost, RuntimeError)
    assert issubclass(fastctl.WatchStreamError, fastctl.WatchError)
    assert issubclass(fastctl.InvalidObject, ValueError)
    assert issubclass(fastctl.SchemaError, TypeError)


# -- the docs ---------------------------------------------------------------------------------

_TREE_CHARS = "│├└─"


def _architecture_tree() -> list[tuple[str, str]]:
    """(path relative to python/fastctl, description) for every line of the tree in
    docs/architecture.md: the code block that starts with ``python/fastctl/``."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```text\npython/fastctl/\n(.*?)```", text, re.S)
    assert block is not None, "docs/architecture.md has no tree of python/fastctl/"
    entries: list[tuple[str, str]] = []
    folders: list[str] = []
    for line in block.group(1).splitlines():
        start = next(i for i, ch in enumerate(line) if ch not in _TREE_CHARS + " ")
        assert start % 4 == 0, f"misaligned tree line: {line!r}"
        depth = start // 4 - 1
        name, _, description = line[start:].partition(" ")
        del folders[depth:]
        path = "/".join([*folders, name.rstrip("/")])
        entries.append((path + ("/" if name.endswith("/") else ""), description.strip()))
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
    return entries


def test_the_architecture_tree_matches_the_package() -> None:
    entries = _architecture_tree()
    listed = [path for path, _ in entries]
    assert len(listed) == len(set(listed)), "a line is listed twice"
    undescribed = [path for path, description in entries if not description]
    assert not undescribed, f"tree lines without a description: {undescribed}"
    on_disk = {
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py*") if p.suffix in (".py", ".pyi")
    }
    on_disk |= {str(p.relative_to(PACKAGE)) + "/" for p in PACKAGE.rglob("*") if p.is_dir()}
    on_disk -= {p for p in on_disk if "__pycache__" in p}
    assert set(listed) - on_disk == set(), "docs/architecture.md lists what does not exist"
    assert on_disk - set(listed) == set(), "docs/architecture.md misses modules or folders"


def test_the_readme_tree_names_real_folders() -> None:
    """README's Development section shows the short tree: every folder of the package, and
    the repository's top-level folders beside it."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```text\n(python/fastctl/\n?.*?)```", text, re.S)
    assert block is not None, "README.md has no tree of python/fastctl/"
    listed: set[str] = set()
    stack: list[str] = []
    for line in block.group(1).splitlines():
        stripped = line.lstrip(_TREE_CHARS + " ")
        name = stripped.split()[0].rstrip("/")
        depth = (len(line) - len(stripped)) // 4
        if depth == 0:  # a folder of the repository
            assert (ROOT / name).is_dir(), f"README's tree names {name}/, which does not exist"
            continue
        del stack[depth - 1 :]
        stack.append(name)
        listed.add("/".join(stack))
    folders = {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*")
        if p.is_dir() and "__pycache__" not in p.parts
    }
    assert listed == folders


def _logger_names() -> set[str]:
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "getLogger"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names.add(node.args[0].value)
    return names


def test_the_logger_table_lists_every_logger() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = set(re.findall(r"^\| `(fastctl[\w.]*)` \|", text, re.M))
    assert table == _logger_names()


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


CHANGES_HEADING = "## Changes before 1.0"
"""The section of docs/contract.md that names what is gone, on purpose."""


def _current_text(doc: Path) -> str:
    """`doc` without the section that lists the names renamed or removed before 1.0."""
    text = doc.read_text()
    start = text.find(CHANGES_HEADING)
    if start < 0:
        return text
    end = text.find("\n## ", start + len(CHANGES_HEADING))
    return text[:start] + (text[end:] if end >= 0 else "")


def test_the_docs_name_only_what_exists() -> None:
    """Every dotted ``fastctl.…`` name in README.md and docs/ is a module or an object (or a
    logger): a module that moves, or a name that goes, fails here until the docs follow.
    The "Changes before 1.0" table of docs/contract.md names the old spellings: left out."""
    loggers = _logger_names()
    stale = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name in re.findall(r"(?<![\w./-])fastctl(?:\.\w+)+", _current_text(doc)):
            if name not in loggers and not _resolves(name):
                stale.add(f"{doc.relative_to(ROOT)}: {name}")
    assert not stale, sorted(stale)


def test_the_docs_stand_alone() -> None:
    """The docs and the code cite only what is in the repository."""
    offenders = []
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *PACKAGE.rglob("*.py")]:
        if "DESIGN.md" in path.read_text():
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders


def _documented_keywords(doc: str, opening: str) -> dict[str, object]:
    """The ``name=default`` pairs of the call that starts with `opening` in `doc` (code
    blocks write signatures as calls; ``*,`` and comments are dropped)."""
    text = (ROOT / "docs" / doc).read_text()
    start = text.index(opening) + len(opening)
    depth, end = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        end += 1
    inside = re.sub(r"#[^\n]*", "", text[start : end - 1]).replace("*,", "")
    call = ast.parse(f"f({inside})", mode="eval").body
    assert isinstance(call, ast.Call)
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}


@pytest.mark.parametrize(
    ("doc", "opening", "target"),
    [
        ("contract.md", "Scheduler(", fastctl.Scheduler),
        ("contract.md", "fastctl.applier(", fastctl.applier),
        ("contract.md", "ctl = fastctl.Controller(", fastctl.Controller),
        ("kubernetes.md", "watcher(client, resource, ", fastctl.watcher),
        ("kubernetes.md", "WatchConfig(", fastctl.WatchConfig),
        ("applier.md", "`fastctl.applier(", fastctl.applier),
        ("webhooks.md", "fastctl.webhook.WebhookServer(", fastctl.webhook.WebhookServer),
    ],
)
def test_documented_signatures_match_the_code(doc: str, opening: str, target: object) -> None:
    """The signatures the docs print have the code's keywords and defaults."""
    documented = _documented_keywords(doc, opening)
    params = {
        name: p.default
        for name, p in inspect.signature(target).parameters.items()  # type: ignore[arg-type]
        if p.default is not inspect.Parameter.empty
    }
    if target is fastctl.Scheduler:
        # The binding takes None for "the default", which lives once in Rust and is
        # published as SCHEDULER_DEFAULTS: the docs must print those values.
        defaults: dict[str, object] = dict(SCHEDULER_DEFAULTS)
        params = {name: defaults[name] for name in params}
    assert documented == params
