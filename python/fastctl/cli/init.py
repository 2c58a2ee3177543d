"""``fastctl init NAME``: a new operator project, ready to test and to run.

It writes, into ``NAME/`` (or ``--directory``): a ``pyproject.toml``; a package with a typed
custom resource, a reconcile that renders a ConfigMap it owns and reports a ``Ready``
condition and ``observedGeneration``, and two admission webhooks (``WEBHOOKS``: a defaulting
one that records who created an object, a validating one that refuses what the reconcile
could never render); tests that run on a fake cluster in memory and on a real control plane
(the ``cluster`` fixture), tests of the webhooks and of a fault (a conflict, retried) on the
fake alone, and one of the manifests; a Dockerfile; and a README whose two commands install
the project and run its tests. ``fastctl crd``, ``fastctl run`` and ``fastctl manifests``
take its operator as they are.
"""

from __future__ import annotations

import argparse
import re
import string
from pathlib import Path

from fastctl.cli import CliError, Subcommands

__all__ = ["project_files", "register", "write_project"]

_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,40}[a-z0-9])?$")


def register(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "init",
        help="start a new operator project (a typed resource, a reconcile, tests, a Dockerfile)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", help="the project's name: lower case, digits and dashes")
    parser.add_argument("--directory", help="where to write it (default: ./NAME)")
    parser.add_argument("--group", help="the API group of its resource (default: NAME.example.com)")
    parser.add_argument("--kind", help="the kind of its resource (default: NAME in CamelCase)")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    target = Path(args.directory) if args.directory else Path(args.name)
    written = write_project(target, args.name, group=args.group, kind=args.kind)
    print(f"wrote {len(written)} files into {target}/; next, from there:")
    print("  python -m pip install -e '.[test]'")
    print("  python -m pytest")
    return 0


def write_project(
    target: Path, name: str, *, group: str | None = None, kind: str | None = None
) -> list[Path]:
    """Write the project `name` into `target` (which must not exist or be empty)."""
    if target.exists() and any(target.iterdir()):
        raise CliError(f"{target} exists and is not empty")
    files = project_files(name, group=group, kind=kind)
    written = []
    for relative, text in files.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def project_files(
    name: str, *, group: str | None = None, kind: str | None = None
) -> dict[str, str]:
    """The project's files, by path relative to its root."""
    if not _NAME.match(name):
        raise CliError(
            f"invalid project name {name!r}: lower case letters, digits and dashes, "
            "starting with a letter"
        )
    package = name.replace("-", "_")
    kind = kind or "".join(part.capitalize() for part in name.split("-"))
    if not re.match(r"^[A-Z][A-Za-z0-9]*$", kind):
        raise CliError(f"invalid kind {kind!r}: CamelCase letters and digits")
    group = group or f"{name}.example.com"
    from fastctl._version import version

    values = {
        "name": name,
        "package": package,
        "kind": kind,
        "group": group,
        "snake": re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower(),
        "fastctl_version": version(),
    }
    return {
        path: string.Template(template).substitute(values)
        for path, template in _TEMPLATES.items()
        for path in [string.Template(path).substitute(values)]
    }


_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$name"
version = "0.1.0"
description = "A Kubernetes operator written with fastctl"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["fastctl[typed,webhook]>=$fastctl_version"]

[project.optional-dependencies]
test = ["fastctl[testing,typed]>=$fastctl_version", "pytest>=8"]

[tool.setuptools]
packages = ["$package"]

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "-ra --strict-markers"
"""

_OPERATOR = '''\
"""The $kind operator: each $kind renders a ConfigMap it owns, and reports a Ready
condition and the generation it has seen in its status.

Two admission webhooks guard it (``WEBHOOKS``): a defaulting one records who created each
$kind in an annotation (which no schema default can know), and a validating one refuses
data keys a ConfigMap cannot hold (the reconcile could never render them).

Run it with ``fastctl run $package.operator:make --webhook-managed $name`` (which serves the
webhooks and installs their configurations); its CRD is ``fastctl crd
$package.operator:$kind``; ``fastctl manifests $package.operator:make --image IMAGE`` writes
everything a cluster needs to run it, the webhook configurations included.
"""

from __future__ import annotations

import re
from typing import Any

from fastctl import Action, Controller, CustomResource, KubeModel, Resource
from fastctl.kube import Condition, apply, apply_status, owner_reference, set_condition
from fastctl.webhook import AdmissionRequest, Allow, Deny, Webhooks
from kubernetes_asyncio.client import ApiClient
from pydantic import Field

CONFIGMAP = Resource("v1", "ConfigMap")
FIELD_MANAGER = "$name"


class ${kind}Spec(KubeModel):
    data: dict[str, str] = Field(default_factory=dict)
    """What the ConfigMap holds."""


class ${kind}Status(KubeModel):
    observed_generation: int = 0
    conditions: list[Condition] = Field(default_factory=list)


class $kind(CustomResource, group="$group", version="v1"):
    """A ConfigMap to render."""

    spec: ${kind}Spec
    status: ${kind}Status | None = None


CRDS = [$kind]
"""The CRDs ``fastctl manifests`` and ``fastctl crd`` write for this operator."""


async def reconcile(obj: $kind, client: ApiClient) -> Action | None:
    meta = obj.metadata
    name, namespace = str(meta.name), str(meta.namespace)
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [owner_reference(obj)],
        },
        "data": obj.spec.data,
    }
    await apply(client, CONFIGMAP, child, field_manager=FIELD_MANAGER)
    conditions: list[Any] = [
        c.model_dump(mode="json", by_alias=True, exclude_none=True)
        for c in (obj.status.conditions if obj.status else [])
    ]
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Rendered",
        "message": f"ConfigMap {name} is up to date",
    }
    set_condition(conditions, ready, generation=meta.generation)
    status = {
        "apiVersion": "$group/v1",
        "kind": "$kind",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"observedGeneration": meta.generation, "conditions": conditions},
    }
    await apply_status(client, $kind.resource(), status, field_manager=FIELD_MANAGER)
    return None


def make(client: ApiClient, *, namespace: str | None = None) -> Controller:
    """The operator, as ``fastctl run`` builds it: every namespace, or the one
    ``fastctl run --namespace`` (and ``fastctl manifests --namespace``) gives."""
    return Controller(client, $kind, reconcile, context=client, namespace=namespace).owns(
        CONFIGMAP
    )


# -- webhooks --------------------------------------------------------------------------------

WEBHOOKS = Webhooks()
"""The admission webhooks ``fastctl run`` serves and ``fastctl manifests`` configures."""

CREATED_BY = "$group/created-by"
KEY = re.compile(r"^[-._a-zA-Z0-9]+$$")
"""What a ConfigMap's data key may be."""


@WEBHOOKS.mutating($kind.resource(), name="default.$group", operations=["CREATE"])
def default(request: AdmissionRequest) -> dict[str, Any]:
    """Record who created the $kind, which no schema default can know."""
    obj = request.object
    assert obj is not None  # CREATE only
    annotations = obj.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.setdefault(CREATED_BY, str(request.user_info.get("username") or "unknown"))
    return obj


@WEBHOOKS.validating($kind.resource(), name="validate.$group")
def validate(request: AdmissionRequest) -> Allow | Deny:
    """Refuse data keys a ConfigMap cannot hold: the reconcile could never render them."""
    data = ((request.object or {}).get("spec") or {}).get("data") or {}
    bad = sorted(key for key in data if not KEY.match(key))
    if bad:
        return Deny(f"spec.data keys must be letters, digits, '-', '_' or '.': {bad}")
    return Allow()
'''

_TESTS = '''\
"""The operator's tests. ``test_..._on_either`` runs twice: on a fake cluster in memory
and on a real etcd + kube-apiserver (marked ``kube``; ``pytest -m "not kube"`` skips it).
On the fake alone: the webhooks, called by the fake API server as a real one calls them,
and a conflict on the first write, which only a fake cluster can make on purpose. Last,
the manifests ``fastctl manifests`` writes configure both webhooks."""

from __future__ import annotations

from typing import Any

import pytest
from fastctl.cli import main as fastctl
from fastctl.kube import ApiError, create, get
from fastctl.testing import Cluster, FakeCluster, run_until_quiet, run_virtual

from $package.operator import CONFIGMAP, CREATED_BY, WEBHOOKS, $kind, make


def ${snake}(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "$group/v1",
        "kind": "$kind",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"data": data},
    }


def test_a_${snake}_gets_its_configmap_and_is_ready_on_either(cluster: Cluster) -> None:
    async def main() -> None:
        await cluster.install($kind)
        client = await cluster.client()
        ns = cluster.namespace
        await create(client, $kind.resource(), ${snake}("example", ns, greeting="hello"))
        await run_until_quiet(make(client))
        child = await get(client, CONFIGMAP, "example", namespace=ns)
        assert child["data"] == {"greeting": "hello"}
        obj = await get(client, $kind.resource(), "example", namespace=ns)
        assert obj["status"]["observedGeneration"] == 1
        ready = [c for c in obj["status"]["conditions"] if c["type"] == "Ready"]
        assert [(c["status"], c["observedGeneration"]) for c in ready] == [("True", 1)]

    cluster.run(main())


def test_a_conflict_on_the_first_write_is_retried(fake_cluster: FakeCluster) -> None:
    async def main() -> None:
        fake_cluster.install($kind)
        client = fake_cluster.client()
        fake_cluster.create(${snake}("example", "default", greeting="hello"))
        fake_cluster.fail(409, verb="apply", resource="configmaps")
        await run_until_quiet(make(client), quiet=60)  # virtual seconds: past the backoff
        child = fake_cluster.get("v1", "ConfigMap", "example")
        assert child is not None
        assert child["data"] == {"greeting": "hello"}
        codes = [r.status for r in fake_cluster.requests_of("apply", "configmaps")]
        assert codes[:2] == [409, 201]
        await client.close()

    run_virtual(main())


def test_the_webhooks_default_and_refuse(fake_cluster: FakeCluster) -> None:
    async def main() -> None:
        fake_cluster.install($kind)
        fake_cluster.add_webhooks(WEBHOOKS)
        client = fake_cluster.client(user="alice")
        made = await create(client, $kind.resource(), ${snake}("example", "default", a="1"))
        assert made["metadata"]["annotations"][CREATED_BY] == "alice"
        with pytest.raises(ApiError) as refused:
            await create(client, $kind.resource(), ${snake}("bad", "default", **{"no/slash": "1"}))
        assert refused.value.status == 403
        assert "spec.data keys must be" in str(refused.value)
        assert fake_cluster.get("$group/v1", "$kind", "bad") is None
        await run_until_quiet(make(client))  # the operator's own writes pass the webhooks
        child = fake_cluster.get("v1", "ConfigMap", "example")
        assert child is not None
        assert child["data"] == {"a": "1"}
        await client.close()

    run_virtual(main())


def test_the_manifests_configure_both_webhooks(capsys: pytest.CaptureFixture[str]) -> None:
    assert fastctl(["manifests", "$package.operator:make", "--image", "$name:test"]) == 0
    manifests = capsys.readouterr().out
    assert "kind: CustomResourceDefinition" in manifests
    assert "kind: MutatingWebhookConfiguration" in manifests
    assert "kind: ValidatingWebhookConfiguration" in manifests
    assert "default.$group" in manifests
    assert "validate.$group" in manifests
'''

_DOCKERFILE = """\
# The operator's image: `docker build -t IMAGE .`, then
# `fastctl manifests $package.operator:make --image IMAGE | kubectl apply -f -`.
# It runs as the non-root user 65532 the generated Deployment asks for.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \\
    PYTHONUNBUFFERED=1 \\
    PIP_NO_CACHE_DIR=1 \\
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md /app/
COPY $package/ /app/$package/
RUN pip install /app

USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["fastctl"]
"""

_README = """\
# $name

A Kubernetes operator written with fastctl: each `$kind` (`$group/v1`) renders a
ConfigMap it owns, and reports a `Ready` condition and the generation it has seen. Two
admission webhooks guard it: a defaulting one records who created each `$kind`, a
validating one refuses data keys a ConfigMap cannot hold.

Install it and run its tests:

```sh
python -m pip install -e '.[test]'
python -m pytest
```

Where fastctl comes from no package index, point pip at a directory holding its wheel
first (`maturin build --release` or `scripts/build-wheels` in fastctl's checkout put one
in its `dist/`): `export PIP_FIND_LINKS=/path/to/fastctl/dist`. pip takes fastctl from
there and the rest from the index.

The tests run on a fake cluster in memory, and the same test again on a real etcd +
kube-apiserver (`fastctl control-plane build` makes them, with Go installed; without them
those tests fail and say how to get them). `python -m pytest -m "not kube"` runs the fake
half only, in about a second.

Run it against a local control plane, its webhooks served by the same process
(`--webhook-managed` certifies them and installs their configurations, pointing at this
process):

```sh
eval "$$(fastctl control-plane up)"
fastctl crd $package.operator:$kind | kubectl apply -f -
fastctl run $package.operator:make --webhook-managed $name
```

Against a remote cluster the API server cannot call this process: run it there with
`--no-webhooks`, or deploy it (the CRD, a ServiceAccount, its RBAC, the webhook
configurations and a Deployment; the webhooks' certificate from cert-manager):

```sh
docker build -t IMAGE .
fastctl manifests $package.operator:make --image IMAGE | kubectl apply -f -
```
"""

_TEMPLATES = {
    "pyproject.toml": _PYPROJECT,
    "README.md": _README,
    "Dockerfile": _DOCKERFILE,
    ".gitignore": "__pycache__/\n*.egg-info/\n.pytest_cache/\nbuild/\ndist/\n",
    "$package/__init__.py": '"""The $name operator."""\n',
    "$package/operator.py": _OPERATOR,
    "tests/test_operator.py": _TESTS,
}
