"""fastctl's version, written in one place: the ``version`` of ``[package]`` in Cargo.toml.

maturin copies it into the wheel's and the sdist's metadata (``dynamic = ["version"]`` in
pyproject.toml), and the Rust extension is compiled with it (``env!("CARGO_PKG_VERSION")``,
exposed as ``fastctl._core.__version__``). A release is that version with a ``v`` in front as
its git tag (docs/install.md); the release workflow refuses a tag that disagrees.

The installed metadata is read first, because that is what pip, ``pip show`` and bug
reports see. When fastctl runs from a source tree that is not installed (``PYTHONPATH`` at
``python/``), there is no metadata, and the version compiled into the extension is the
one that describes the code that runs.
"""

from __future__ import annotations

from fastctl._core import __version__ as _core_version

__all__ = ["DISTRIBUTION", "version"]

DISTRIBUTION = "fastctl"
"""The name of the distribution on the package index (``pip install fastctl``)."""


def version() -> str:
    """The installed distribution's version, else the one compiled into ``fastctl._core``."""
    # Imported here: ``importlib.metadata`` brings zipfile, csv, email and tempfile, a good
    # share of ``import fastctl``'s time, for a string most processes never ask for.
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return _core_version
