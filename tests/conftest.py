"""Shared fixtures: writable copies of the offline Planetoid raw files, and Cora/CiteSeer."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

SHARED_PLANETOID = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "planetoid"


def _planetoid_source() -> Path | None:
    """$PRIVFGL_DATA if it holds Cora/raw, else the shared datasets folder, else None."""
    env = os.environ.get("PRIVFGL_DATA")
    for candidate in ([Path(env)] if env else []) + [SHARED_PLANETOID]:
        if (candidate / "Cora" / "raw").is_dir():
            return candidate
    return None


@pytest.fixture(scope="session")
def planetoid_root(tmp_path_factory) -> Path:
    """A writable data root holding Cora/raw and CiteSeer/raw (copied once per session)."""
    src = _planetoid_source()
    if src is None:
        msg = f"Planetoid raw files not found: set PRIVFGL_DATA or provide {SHARED_PLANETOID}"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    root = tmp_path_factory.mktemp("planetoid")
    for name in ("Cora", "CiteSeer"):
        if (src / name / "raw").is_dir():
            shutil.copytree(src / name / "raw", root / name / "raw", copy_function=shutil.copyfile)
            (root / name / "raw").chmod(0o755)
    return root


@pytest.fixture(scope="session")
def cora(planetoid_root):
    from privfgl.data import load_dataset

    return load_dataset("cora", root=planetoid_root, download=False)


@pytest.fixture(scope="session")
def citeseer(planetoid_root):
    from privfgl.data import load_dataset

    return load_dataset("citeseer", root=planetoid_root, download=False)
