"""Dataset registry, data-root resolution, offline loading and the canonical Data form."""

from __future__ import annotations

import dataclasses
import shutil
import urllib.error

import pytest
import torch
from torch_geometric.utils import coalesce, is_undirected

from privfgl.data import (
    DATASETS, SYNTHETIC_PRESETS, DataError, DatasetUnavailable, dataset_status, load_dataset,
    resolve_data_root,
)
from privfgl.data.synthetic import SBM_DEFAULTS


def assert_canonical(data, num_nodes, num_features, num_classes, name):
    assert data.x.shape == (num_nodes, num_features) and data.x.dtype == torch.float32
    assert data.y.shape == (num_nodes,) and data.y.dtype == torch.int64
    assert data.edge_index.dtype == torch.int64 and data.edge_index.size(0) == 2
    assert is_undirected(data.edge_index, num_nodes=num_nodes)
    assert not (data.edge_index[0] == data.edge_index[1]).any()
    assert torch.equal(coalesce(data.edge_index, num_nodes=num_nodes), data.edge_index)
    assert data.num_classes == num_classes and data.name == name
    assert int(data.y.max()) + 1 == num_classes


def test_cora_facts(cora):
    assert_canonical(cora, 2708, 1433, 7, "cora")
    assert cora.edge_index.size(1) == 10556


def test_citeseer_facts_keeps_isolated_nodes(citeseer):
    assert_canonical(citeseer, 3327, 3703, 6, "citeseer")
    assert citeseer.edge_index.size(1) == 9104
    degree = torch.bincount(citeseer.edge_index[0], minlength=3327)
    assert (degree == 0).sum() > 0


def test_names_are_case_insensitive(planetoid_root, cora):
    again = load_dataset("  CoRa ", root=planetoid_root, download=False)
    assert torch.equal(again.edge_index, cora.edge_index) and torch.equal(again.x, cora.x)


def test_read_only_root_is_mirrored_to_the_cache(planetoid_root, tmp_path, monkeypatch):
    ro_root = tmp_path / "ro"
    shutil.copytree(planetoid_root / "Cora" / "raw", ro_root / "Cora" / "raw")
    (ro_root / "Cora").chmod(0o555)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    try:
        data = load_dataset("cora", root=ro_root, download=False)
    finally:
        (ro_root / "Cora").chmod(0o755)
    assert data.num_nodes == 2708
    assert not (ro_root / "Cora" / "processed").exists()
    assert list((tmp_path / "cache" / "privfgl" / "mirrors").glob("*/Cora/processed"))


def test_resolve_data_root_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("PRIVFGL_DATA", raising=False)
    assert resolve_data_root() == tmp_path / "xdg" / "privfgl" / "datasets"
    monkeypatch.setenv("PRIVFGL_DATA", str(tmp_path / "env"))
    assert resolve_data_root() == tmp_path / "env"
    assert resolve_data_root(tmp_path / "arg") == tmp_path / "arg"


def test_dataset_status(planetoid_root):
    rows = {r["name"]: r for r in dataset_status(planetoid_root)}
    assert set(rows) == set(DATASETS) == {"cora", "citeseer", "pubmed", "computers", "photo", "cs",
                                          "physics", "wikics"}
    assert rows["cora"]["available"] and rows["citeseer"]["available"]
    assert not rows["pubmed"]["available"]
    assert rows["cora"]["path"] == str(planetoid_root / "Cora")


def test_unknown_dataset_lists_valid_names():
    with pytest.raises(DataError, match="unknown dataset 'corra'.*cora.*citeseer.*sbm-pubmed"):
        load_dataset("corra")


def test_missing_dataset_offline_names_root_and_files(tmp_path):
    with pytest.raises(DatasetUnavailable) as err:
        load_dataset("pubmed", root=tmp_path, download=False)
    msg = str(err.value)
    assert str(tmp_path) in msg and "ind.pubmed.x" in msg and "ind.pubmed.graph" in msg
    assert "sbm-pubmed" in msg
    assert isinstance(err.value, DataError)


def test_failed_download_is_dataset_unavailable(tmp_path, monkeypatch):
    def offline(root):
        raise urllib.error.URLError("no network")

    monkeypatch.setitem(DATASETS, "photo", dataclasses.replace(DATASETS["photo"], open=offline))
    with pytest.raises(DatasetUnavailable, match="download failed.*amazon_electronics_photo.npz"):
        load_dataset("photo", root=tmp_path)


def test_real_dataset_rejects_sbm_parameters(planetoid_root):
    with pytest.raises(DataError, match="takes no parameters"):
        load_dataset("cora", root=planetoid_root, homophily=0.5)


@pytest.mark.parametrize("name", ["sbm", "sbm-photo"])
def test_synthetic_names_load_presets(name):
    preset = SBM_DEFAULTS if name == "sbm" else SYNTHETIC_PRESETS[name]
    data = load_dataset(name.upper(), seed=3)
    assert_canonical(data, preset["num_nodes"], preset["num_features"], preset["num_classes"], name)


def test_synthetic_overrides_and_bad_parameters():
    data = load_dataset("sbm", num_nodes=300, num_classes=3, seed=1)
    assert data.num_nodes == 300 and data.num_classes == 3
    with pytest.raises(DataError, match=r"unknown parameter\(s\) \['homofily'\] for synthetic dataset 'sbm'; "
                                        "valid: num_nodes, .*homophily"):
        load_dataset("sbm", homofily=0.5)
