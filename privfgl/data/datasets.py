"""Dataset registry and offline-first loading of real (PyG) and synthetic graphs.

Every loader returns the same canonical form: ``Data`` with x float32 [N, F], y int64 [N],
edge_index int64 [2, E] (undirected, coalesced, no self loops), ``name`` and ``num_classes``.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.datasets import Amazon, Coauthor, Planetoid, WikiCS
from torch_geometric.utils import remove_self_loops, to_undirected

from privfgl.data.errors import DataError, DatasetUnavailable
from privfgl.data.synthetic import (CLIENT_PRESETS, SBM_DEFAULTS, SCALE_PRESETS, SYNTHETIC_PRESETS, client_csbm,
                                    contextual_sbm)


@dataclass(frozen=True)
class DatasetSpec:
    """Where a PyG dataset lives under a data root, and how to open it.

    ``folder`` is relative to the data root; the raw files are in ``<root>/<folder>/raw/``.
    ``open`` builds the PyG dataset given the data root (it downloads missing raw files).
    """

    folder: str
    raw_files: tuple[str, ...]
    open: Callable[[Path], InMemoryDataset]


def _planetoid(name: str) -> DatasetSpec:
    parts = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
    return DatasetSpec(name, tuple(f"ind.{name.lower()}.{p}" for p in parts),
                       lambda root: Planetoid(str(root), name))


DATASETS: dict[str, DatasetSpec] = {
    "cora": _planetoid("Cora"),
    "citeseer": _planetoid("CiteSeer"),
    "pubmed": _planetoid("PubMed"),
    "computers": DatasetSpec("Computers", ("amazon_electronics_computers.npz",),
                             lambda root: Amazon(str(root), "Computers")),
    "photo": DatasetSpec("Photo", ("amazon_electronics_photo.npz",),
                         lambda root: Amazon(str(root), "Photo")),
    "cs": DatasetSpec("CS", ("ms_academic_cs.npz",), lambda root: Coauthor(str(root), "CS")),
    "physics": DatasetSpec("Physics", ("ms_academic_phy.npz",),
                           lambda root: Coauthor(str(root), "Physics")),
    "wikics": DatasetSpec("WikiCS", ("data.json",),
                          lambda root: WikiCS(str(root / "WikiCS"), is_undirected=True)),
}


# Synthetic datasets: name -> (generator, its preset arguments).
_SYNTHETIC: dict[str, tuple] = {"sbm": (contextual_sbm, SBM_DEFAULTS),
                                **{name: (contextual_sbm, preset) for name, preset in SYNTHETIC_PRESETS.items()},
                                **{name: (client_csbm, preset) for name, preset in CLIENT_PRESETS.items()},
                                **{name: (contextual_sbm, preset) for name, preset in SCALE_PRESETS.items()}}


def _user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "privfgl"


def resolve_data_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: ``root`` if given, else ``$PRIVFGL_DATA``, else ``<user cache>/privfgl/datasets``.

    The user cache is ``$XDG_CACHE_HOME`` or ``~/.cache``. The folder need not exist.
    """
    if root is None or str(root) == "":
        root = os.environ.get("PRIVFGL_DATA") or _user_cache_dir() / "datasets"
    return Path(root).expanduser().absolute()


def canonical_name(name: str) -> str:
    """The registry's key of dataset `name` (case and spaces ignored); DataError naming the valid ones."""
    key = str(name).strip().lower()
    if key not in DATASETS and key not in _SYNTHETIC:
        valid = ", ".join([*DATASETS, *_SYNTHETIC])
        raise DataError(f"unknown dataset {name!r}; valid datasets: {valid}")
    return key


def _raw_dir(spec: DatasetSpec, root: Path) -> Path:
    return root / spec.folder / "raw"


def _has_raw_files(spec: DatasetSpec, root: Path) -> bool:
    return all((_raw_dir(spec, root) / f).is_file() for f in spec.raw_files)


def dataset_status(root: str | os.PathLike | None = None) -> list[dict]:
    """One row per real dataset: ``{"name", "available", "path"}``; available = raw files present."""
    data_root = resolve_data_root(root)
    return [{"name": key, "available": _has_raw_files(spec, data_root),
             "path": str(data_root / spec.folder)}
            for key, spec in DATASETS.items()]


def _is_read_only(path: Path) -> bool:
    """True if ``path`` has no write permission bits or is not writable by this process.

    The mode bits are checked too because root passes ``os.access`` on read-only folders.
    """
    write_bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    return not os.access(path, os.W_OK) or not path.stat().st_mode & write_bits


def _writable_root(spec: DatasetSpec, root: Path) -> Path:
    """A data root where PyG may write ``processed/`` beside ``raw/``.

    If the dataset folder is read-only and not yet processed, its raw files are copied once
    to ``<user cache>/privfgl/mirrors/<hash of root>/`` and that mirror is used instead.
    """
    folder = root / spec.folder
    if (folder / "processed").is_dir() or not _is_read_only(folder):
        return root
    mirror = _user_cache_dir() / "mirrors" / hashlib.sha256(str(root).encode()).hexdigest()[:16]
    if not _has_raw_files(spec, mirror):
        shutil.copytree(_raw_dir(spec, root), _raw_dir(spec, mirror), dirs_exist_ok=True)
        for f in _raw_dir(spec, mirror).iterdir():
            f.chmod(0o644)
    return mirror


def _unavailable(key: str, spec: DatasetSpec, root: Path, reason: str) -> DatasetUnavailable:
    files = ", ".join(spec.raw_files)
    stand_in = f" or use the synthetic stand-in 'sbm-{key}'" if f"sbm-{key}" in SYNTHETIC_PRESETS else ""
    return DatasetUnavailable(
        f"dataset {key!r} is not available under data root {root} ({reason}): expected the raw "
        f"files {files} in {_raw_dir(spec, root)}, so put them there, point --data-root or "
        f"PRIVFGL_DATA at a folder holding {spec.folder}/raw/{stand_in}.")


def _canonical(data: Data, name: str, num_classes: int) -> Data:
    """Data(x float32, y int64 [N], edge_index undirected/coalesced/no self loops, name, num_classes)."""
    num_nodes = data.num_nodes
    edge_index, _ = remove_self_loops(data.edge_index.long())
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    return Data(x=data.x.float(), y=data.y.long().view(-1), edge_index=edge_index,
                name=name, num_classes=num_classes)


def load_dataset(
    name: str,
    root: str | os.PathLike | None = None,
    download: bool = True,
    *,
    seed: int = 0,
    **sbm_params,
) -> Data:
    """Load a dataset by (case-insensitive) name, offline first.

    Real datasets (``DATASETS``) are read from ``<root>/<Folder>/raw/``; missing files are
    downloaded through PyG only if ``download`` is true. Synthetic names ("sbm" and the
    ``SYNTHETIC_PRESETS``) are generated by :func:`contextual_sbm`, the ``CLIENT_PRESETS`` (planted
    clients) by :func:`client_csbm`, with ``seed``; ``sbm_params``
    override the preset.

    Raises DataError for an unknown name or bad parameters, DatasetUnavailable when a real
    dataset is missing and cannot be downloaded.
    """
    key = canonical_name(name)
    if key in _SYNTHETIC:
        generate, preset = _SYNTHETIC[key]
        valid = [p for p in inspect.signature(generate).parameters if p not in ("seed", "name")]
        unknown = sorted(set(sbm_params) - set(valid))
        if unknown:
            raise DataError(f"unknown parameter(s) {unknown} for synthetic dataset {key!r}; "
                            f"valid: {', '.join(valid)}")
        return generate(**{**preset, **sbm_params}, seed=seed, name=key)
    if sbm_params:
        raise DataError(f"dataset {key!r} takes no parameters, got {sorted(sbm_params)}; "
                        f"only synthetic datasets ({', '.join(_SYNTHETIC)}) do")
    spec = DATASETS[key]
    data_root = resolve_data_root(root)
    if not _has_raw_files(spec, data_root):
        if not download:
            raise _unavailable(key, spec, data_root, "raw files missing and download=False")
        try:
            dataset = spec.open(data_root)
        except Exception as e:  # any network/IO failure while fetching the raw files
            if _has_raw_files(spec, data_root):
                raise
            raise _unavailable(key, spec, data_root, f"download failed: {e}") from e
    else:
        dataset = spec.open(_writable_root(spec, data_root))
    return _canonical(dataset[0], key, int(dataset.num_classes))
