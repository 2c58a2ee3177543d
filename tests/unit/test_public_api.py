"""The public API as docs/contract.md states it: exactly the pinned 1.0 names, listed on that
page; every exported name resolves; no module is hidden behind a function of the same name;
the exception hierarchy holds; the docs name only modules and objects that exist, and teach
only public imports, so they cannot go stale unnoticed."""

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
import fastctl.testing
import fastctl.webhook
from fastctl._core import SCHEDULER_DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(fastctl.__file__).resolve().parent


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


PUBLIC: dict[str, frozenset[str]] = {
    "fastctl": _names(
        """
        INITIAL_LIST_PRIORITY Action ApiError ApplierConfig Controller CustomResource Discovery
        DiscoveryError ErrorPolicy EventKind FastctlError InvalidObject KubeModel
        KubeconfigError LeaderElection LeaderElector LeadershipLost ListFrame Manager Mapper
        Namespaces ObjectEvent ObjectRef Predicate PrinterColumn RateLimit ReadYourWrites
        Reconcile ReconcileCancelled ReconcileResult ReconcileTimeout Recorder
        ResolvedResource Resource ResourceNotFound Scheduler SchemaError ServerOptions
        Sharding StorageMigration StorageMigrationError Store Trigger ValidationRule
        WatchConfig WatchError WatchEvent
        WatchStreamError
        all_of annotations_changed any_of applier finalizer generation_changed labels_changed
        load_client reflector watcher
        """
    ),
    "fastctl.kube": _names(
        """
        ApiError Backoff Condition CustomResource Discovery DiscoveryError EventKind
        InvalidObject KubeModel KubeconfigError ListFrame MetadataOnlyUnsupported
        Namespaces ObjectEvent ObjectMeta PatchType PrinterColumn RateLimit Recorder
        ResolvedResource Resource ResourceNotFound RetryPolicy SchemaError Store
        ValidationRule WatchConfig WatchEvent add_finalizer apply apply_status
        chain_transforms controller_uid crd create delete drop_annotations
        drop_last_applied drop_managed_fields finalizer get keep_paths list load_client
        owner_reference patch reflector remove_finalizer set_condition set_rate_limit
        set_retry_policy watcher
        """
    ),
    "fastctl.runtime": _names(
        """
        INITIAL_LIST_PRIORITY Controller LeaderElection LeaderElector Manager ObjectInspection
        Predicate QueueSummary ReadYourWrites ReasonCount RelatedCache ServerOptions Sharding
        StorageMigration all_of annotations_changed any_of generation_changed labels_changed
        """
    ),
    "fastctl.runtime.leader": _names("LeaderElection LeaderElector"),
    "fastctl.runtime.sharding": _names("Sharding"),
    "fastctl.webhook": _names(
        """
        MAX_BODY_BYTES AdmissionRequest AdmissionWebhook Allow Converter Deny
        ManagedWebhookServer Service ServingCertificate SharedSecret WebhookServer Webhooks
        configurations conversion install json_patch shared_secret_of uninstall
        """
    ),
    "fastctl.deploy": _names(
        "CERT_DIR DeployOptions Permissions PolicyRule derive manifests needs to_yaml"
    ),
    "fastctl.testing": _names(
        """
        ETCD_VERSION K8S_VERSION Binaries BinariesNotFoundError BuildError Cluster
        ControlPlane ControlPlaneError Deadlock FakeCluster FakeClusterError RecordedRequest
        Spin StartupError VirtualTimeLoop build_binaries ensure_binaries find_binaries
        reconcile_once run_until_quiet run_virtual virtual_time
        """
    ),
    "fastctl.testing.model": _names("ModelScheduler"),
    "fastctl.errors": _names(
        """
        ApiError DiscoveryError FastctlError InvalidObject KubeconfigError LeadershipLost
        ReconcileCancelled ReconcileTimeout ResourceNotFound SchemaError
        StorageMigrationError WatchError WatchStreamError
        """
    ),
    "fastctl.types": _names(
        "Action ErrorPolicy Mapper ObjectRef Reconcile ReconcileResult Trigger"
    ),
    "fastctl.log": _names(
        "JsonFormatter ObjectContextFilter RedactingFilter current_object mark_sensitive redact"
    ),
    "fastctl.tracing": _names("disable enable is_enabled"),
}
"""The 1.0 API: each public namespace and its ``__all__``, in full (docs/contract.md, "The
public names"). From 1.0 on, names may be added here (and on that page); removing or
renaming one needs a deprecation path first."""

PUBLIC_PACKAGES = tuple(PUBLIC)

HOMES = (
    "fastctl.runtime.controller",
    "fastctl.runtime.manager",
    "fastctl.testing.binaries",
    "fastctl.testing.cluster",
    "fastctl.testing.control_plane",
    "fastctl.testing.fake",
    "fastctl.testing.pytest_plugin",
)
"""Modules without an underscore that define public names but are not where users import
them from: their ``__all__`` may only hold names some public namespace exports."""

APPLICATIONS = ("fastctl.cli", "fastctl.demo")
"""Applications of the library (the ``fastctl`` command, the example operator): no API."""


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_exports_are_the_pinned_list(package: str) -> None:
    exported = set(importlib.import_module(package).__all__)
    pinned = PUBLIC[package]
    assert exported == pinned, (
        f"{package}.__all__ differs from the 1.0 list: "
        f"not pinned {sorted(exported - pinned)}, missing {sorted(pinned - exported)}"
    )


def _contract_names() -> dict[str, frozenset[str]]:
    """The "The public names" block of docs/contract.md: a namespace per unindented line,
    its names on the indented lines below it."""
    text = (ROOT / "docs" / "contract.md").read_text()
    block = re.search(r"## The public names\n.*?```text\n(.*?)```", text, re.S)
    assert block is not None, "docs/contract.md has no list of the public names"
    listed: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            assert line not in listed, f"{line} is listed twice"
            current = listed[line] = []
        else:
            assert current is not None, f"names before any namespace: {line!r}"
            current.extend(line.split())
    for namespace, names in listed.items():
        assert len(names) == len(set(names)), f"{namespace}: a name is listed twice"
    return {namespace: frozenset(names) for namespace, names in listed.items()}


def test_the_contract_lists_the_pinned_names() -> None:
    assert _contract_names() == PUBLIC


def _walk() -> list[str]:
    return [info.name for info in pkgutil.walk_packages(fastctl.__path__, "fastctl.")]


def test_every_module_is_public_private_a_home_or_an_application() -> None:
    """A new module without an underscore is a decision: pin it, or say what it is."""
    undecided = [
        name
        for name in _walk()
        if not any(part.startswith("_") for part in name.split("."))
        and name not in PUBLIC
        and name not in HOMES
        and not name.startswith(tuple(f"{app}." for app in APPLICATIONS))
        and name not in APPLICATIONS
    ]
    assert undecided == []


@pytest.mark.parametrize("home", HOMES)
def test_homes_export_only_public_names(home: str) -> None:
    exported = set(getattr(importlib.import_module(home), "__all__", ()))
    public = set().union(*PUBLIC.values())
    assert exported <= public, f"{home}.__all__ exports internals: {sorted(exported - public)}"


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
    return [name for name in _walk() if name.rsplit(".", 1)[-1] != "__main__"]


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


def _span_attributes() -> set[str]:
    """The ``fastctl.…`` span attribute names the tracing module writes (its string
    constants), so docs/tracing.md may name them."""
    tree = ast.parse((PACKAGE / "_otel.py").read_text())
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"fastctl(?:\.\w+)+", node.value)
    }


def test_the_docs_name_only_what_exists() -> None:
    """Every dotted ``fastctl.…`` name in README.md and docs/ is a module or an object (or a
    logger, or a span attribute): a module that moves, or a name that goes, fails here
    until the docs follow. The "Changes before 1.0" table of docs/contract.md names the old
    spellings: left out."""
    known = _logger_names() | _span_attributes()
    stale = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name in re.findall(r"(?<![\w./-])fastctl(?:\.\w+)+", _current_text(doc)):
            if name not in known and not _resolves(name):
                stale.add(f"{doc.relative_to(ROOT)}: {name}")
    assert not stale, sorted(stale)


def test_the_docs_stand_alone() -> None:
    """The docs and the code cite only what is in the repository."""
    offenders = []
    for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *PACKAGE.rglob("*.py")]:
        if "DESIGN.md" in path.read_text():
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders


TEACHING = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").glob("*.py")),
    *sorted((PACKAGE / "demo").glob("*.py")),
]
"""What users copy from: the README, the docs, the examples and the demo operator."""

INTERNALS_SHOWN = {
    ("python/fastctl/demo/widgets.py", "fastctl.demo._record"),
}
"""(file, module) pairs where an underscored module is imported on purpose: the demo's own
record of its reconciles (a module of the application, not of the library)."""

_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(fastctl[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]+)"
    r"|import[ \t]+(fastctl[\w.]*))",
    re.M,
)


def _fastctl_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every ``from fastctl… import names`` and ``import fastctl…`` in
    `path`: a Python file's import statements, or the lines of a Markdown file."""
    if path.suffix == ".py":
        found: list[tuple[str, list[str]]] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((node.module, [alias.name for alias in node.names]))
            elif isinstance(node, ast.Import):
                found.extend((alias.name, []) for alias in node.names)
        return [(module, names) for module, names in found if module.split(".")[0] == "fastctl"]
    found = []
    for match in _IMPORT.finditer(path.read_text()):
        module = match.group(1) or match.group(3)
        listed = re.sub(r"#[^\n]*", "", match.group(2) or "").strip("()")
        names = [item.split()[0] for item in listed.split(",") if item.strip()]
        found.append((module, names))
    return found


def test_the_docs_find_imports() -> None:
    """The import scanner above is not vacuous."""
    imports = _fastctl_imports(ROOT / "README.md")
    helpers = ["Condition", "apply", "apply_status", "owner_reference", "set_condition"]
    assert ("fastctl.kube", helpers) in imports
    assert any(module == "fastctl" and "Controller" in names for module, names in imports)


@pytest.mark.parametrize("path", TEACHING, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_teach_only_public_imports(path: Path) -> None:
    """What users copy imports only public names from public namespaces: no ``_module``
    (unless listed in `INTERNALS_SHOWN`), no home module (``fastctl.runtime.controller``:
    the namespace that exports the name is where to import it from), no name outside the
    namespace's ``__all__``. The example operator (`fastctl.demo`) is the exception the
    examples run."""
    where = str(path.relative_to(ROOT))
    wrong = []
    for module, names in _fastctl_imports(path):
        if module == "fastctl.demo" or module.startswith("fastctl.demo."):
            if any(part.startswith("_") for part in module.split(".")) and (
                (where, module) not in INTERNALS_SHOWN
            ):
                wrong.append(f"{module} (private)")
            continue
        if (where, module) in INTERNALS_SHOWN:
            continue
        if module not in PUBLIC:
            wrong.append(f"{module} (not a public namespace)")
            continue
        public_modules = {m.rpartition(".")[2] for m in PUBLIC if m.startswith(module + ".")}
        hidden = [n for n in names if n not in PUBLIC[module] and n not in public_modules]
        if hidden:
            wrong.append(f"{module}: {', '.join(hidden)} (not exported)")
    assert wrong == []


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
        ("contract.md", "fastctl.testing.run_virtual(", fastctl.testing.run_virtual),
        ("contract.md", "fastctl.testing.VirtualTimeLoop(", fastctl.testing.VirtualTimeLoop),
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
