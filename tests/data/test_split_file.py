"""`--split-file PATH`: a per-client train/val/test split given from outside replaces the drawn one
exactly (global node ids round-trip into each client's masks), every bad file is one line naming
the problem, the record carries the file's path and SHA-256, and configs and sweeps take it."""
from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from privfgl.cli import main
from privfgl.data import DataError
from privfgl.data.split_file import read_split, write_split
from privfgl.errors import ConfigError
from privfgl.experiment import RunConfig, build_setup
from privfgl.sweep import load_sweep


def client(global_ids: list[int]) -> Data:
    n = len(global_ids)
    return Data(x=torch.zeros(n, 1), y=torch.zeros(n, dtype=torch.long), global_id=torch.tensor(global_ids))


@st.composite
def splits(draw):
    """(clients' global ids, {train, val, test} per client): disjoint clients over a shuffled id range,
    each node of a client in one part or in none; some training, validation and test node overall."""
    num_nodes = draw(st.integers(3, 80))
    k = draw(st.integers(1, min(6, num_nodes)))
    order = draw(st.permutations(range(num_nodes)))
    owner = draw(st.lists(st.integers(-1, k - 1), min_size=num_nodes, max_size=num_nodes))
    owner[:k] = range(k)
    ids = [[v for i, v in enumerate(order) if owner[i] == c] for c in range(k)]
    part = {v: draw(st.sampled_from(["train", "val", "test", None])) for c in ids for v in c}
    first = [v for c in ids for v in c][:3]
    if len(first) == 3:
        part.update(zip(first, ("train", "val", "test")))
    else:
        return draw(splits())
    split = [{name: draw(st.permutations([v for v in c if part[v] == name])) for name in ("train", "val", "test")}
             for c in ids]
    return ids, split


@settings(max_examples=60, deadline=None)
@given(splits())
def test_a_random_split_round_trips_exactly(case):
    ids, split = case
    clients = [client(c) for c in ids]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "split.json"
        path.write_text(json.dumps(split))
        block = read_split(str(path), clients)
        for sub, parts in zip(clients, split):
            for name in ("train", "val", "test"):
                mask = getattr(sub, f"{name}_mask")
                assert mask.dtype == torch.bool and mask.shape == (len(sub.global_id),)
                assert sorted(sub.global_id[mask].tolist()) == sorted(parts[name])
        assert block["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert [block[n] for n in ("train", "val", "test")] == [sum(len(p[n]) for p in split)
                                                                 for n in ("train", "val", "test")]
        again = Path(tmp) / "again.json"
        write_split(clients, again)  # the clients' masks written back are the same split
        assert json.loads(again.read_text()) == [{n: sorted(p[n]) for n in p} for p in split]


@pytest.mark.parametrize("seed", [0, 12345])
def test_a_run_on_a_split_file_has_exactly_the_files_masks(cora, tmp_path, seed):
    """A run's own split, written out, read by a run whose partition seed would draw another split:
    that run's masks are the file's, client by client, and the record names the file."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, 4, cora.num_nodes)
    (tmp_path / "p.txt").write_text("".join(" ".join(map(str, np.flatnonzero(owner == c))) + "\n" for c in range(4)))
    run = dict(method="fedavg", partition=f"file:{tmp_path / 'p.txt'}", clients=4, rounds=1)
    first = build_setup(RunConfig(**run, partition_seed=seed), data=cora)
    path = tmp_path / f"split-{seed}.json"
    sha = write_split(first.clients, path)
    drawn = build_setup(RunConfig(**run, partition_seed=seed + 1), data=cora)
    given_ = build_setup(RunConfig(**run, partition_seed=seed + 1, split_file=str(path)), data=cora)
    def same_masks(a, b) -> bool:  # a bool, not two 2708-long lists for pytest to diff on failure
        return all(torch.equal(getattr(x, f"{n}_mask"), getattr(y, f"{n}_mask"))
                   for x, y in zip(a.clients, b.clients) for n in ("train", "val", "test"))
    assert not same_masks(drawn, first)  # the other seed draws another split ...
    assert same_masks(given_, first)  # ... which the file replaces
    assert given_.extras["split_file"]["sha256"] == sha and given_.extras["split_file"]["path"] == str(path)


def split_text(parts: list[dict]) -> str:
    return json.dumps(parts)


TWO = [[0, 1, 2, 3], [4, 5, 6]]  # the clients' global ids in the bad-file cases
BAD_FILES = [  # (contents, the one line's expected text)
    (split_text([{"train": [0], "val": [1], "test": [2]}]), "holds 1 clients, the partition has 2"),
    (split_text([{"train": [0], "val": [1], "test": [4]}, {"train": [5], "val": [], "test": []}]),
     "client 0 test lists node 4, which is not one of client 0's nodes"),
    (split_text([{"train": [0], "val": [1], "test": [9999]}, {"train": [5], "val": [], "test": []}]),
     "client 0 test lists node 9999, which is not one of client 0's nodes"),
    (split_text([{"train": [0, 1], "val": [1], "test": [2]}, {"train": [], "val": [], "test": []}]),
     "client 0 lists node 1 twice"),
    (split_text([{"train": [0, 0], "val": [1], "test": [2]}, {"train": [], "val": [], "test": []}]),
     "client 0 lists node 0 twice"),
    (split_text([{"train": [0], "val": [], "test": [2]}, {"train": [5], "val": [], "test": []}]),
     "no client has a validation node"),
    (split_text([{"train": [0], "val": [1]}, {"train": [5], "val": [], "test": []}]),
     "client 0 is ['train', 'val'], not an object with exactly the keys train, val, test"),
    (split_text([[0, 1], {"train": [5], "val": [], "test": []}]), "client 0 is list, not an object"),
    (split_text([{"train": [0], "val": [1.5], "test": [2]}, {"train": [], "val": [], "test": []}]),
     "client 0 val holds 1.5, not a node id"),
    (split_text([{"train": [0], "val": 1, "test": [2]}, {"train": [], "val": [], "test": []}]),
     "client 0 val is a int, not a list of node ids"),
    (split_text({"train": [0]}), "holds a JSON dict"),
    ('[{"train": [0],', "not valid JSON at line 1"),
    (b"\xff[]", "not UTF-8 text"),
]


@pytest.mark.parametrize("contents, message", BAD_FILES)
def test_a_bad_file_is_one_line_naming_the_problem(tmp_path, contents, message):
    path = tmp_path / "split.json"
    path.write_bytes(contents if isinstance(contents, bytes) else contents.encode())
    with pytest.raises(DataError, match="split file .*" + re.escape(message)) as err:
        read_split(str(path), [client(ids) for ids in TWO])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name, message", [("missing.json", "no such file"), ("", "a folder, not a file")])
def test_a_missing_file_is_refused_before_the_data_is_read(tmp_path, name, message):
    cfg = RunConfig(split_file=str(tmp_path / name) if name else str(tmp_path))
    with pytest.raises(ConfigError, match=re.escape(message)):
        cfg.validate()


def test_the_cli_gives_exit_2_and_one_line_for_a_bad_file(tmp_path, planetoid_root, capsys):
    (tmp_path / "split.json").write_text(split_text([{"train": [0], "val": [1], "test": [2]}]))
    code = main(["run", "--partition", "louvain", "--clients", "2", "--rounds", "1", "--split-file",
                 str(tmp_path / "split.json"), "--data-root", str(planetoid_root), "--offline", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "holds 1 clients, the partition has 2" in err


def test_a_config_and_a_sweep_resolve_a_relative_split_file_against_their_folder(tmp_path, monkeypatch):
    from privfgl.cli import build_parser, config_from_args
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "s.json").write_text(split_text([{"train": [0], "val": [1], "test": [2]}]))
    (tmp_path / "cfg" / "run.json").write_text(json.dumps({"split_file": "s.json"}))
    args = build_parser().parse_args(["run", "--config", "cfg/run.json"])
    assert config_from_args(args).split_file == "cfg/s.json"
    (tmp_path / "cfg" / "sweep.toml").write_text('[sweep]\nname = "s"\nseeds = [0]\n[base]\nmethod = "fedavg"\n'
                                                 'rounds = 1\nclients = 1\nsplit_file = "s.json"\n')
    cell = load_sweep(Path("cfg/sweep.toml")).cells[0]
    assert cell.options["split_file"] == "cfg/s.json"
    key = cell.key
    (tmp_path / "cfg" / "s.json").write_text(split_text([{"train": [0], "val": [2], "test": [1]}]))
    assert load_sweep(Path("cfg/sweep.toml")).cells[0].key != key  # an edited split file is a new cell


def test_the_authors_style_split_gives_the_same_masks_on_a_file_partition(cora, tmp_path):
    """The side-by-side use: a partition file and a split file of the same clients."""
    rng = np.random.default_rng(0)
    owner = rng.integers(0, 3, cora.num_nodes)
    parts = [np.flatnonzero(owner == c).tolist() for c in range(3)]
    (tmp_path / "p.txt").write_text("".join(" ".join(map(str, p)) + "\n" for p in parts))
    split = [{"train": p[:20], "val": p[20:60], "test": p[60:]} for p in parts]
    (tmp_path / "s.json").write_text(json.dumps(split))
    setup = build_setup(RunConfig(method="fedavg", partition=f"file:{tmp_path / 'p.txt'}", clients=3, rounds=1,
                                  split_file=str(tmp_path / "s.json")), data=cora)
    for c, s in zip(setup.clients, split):
        assert sorted(c.global_id[c.train_mask].tolist()) == sorted(s["train"])
        assert sorted(c.global_id[c.test_mask].tolist()) == sorted(s["test"])
    assert setup.extras["split_file"]["in_no_part"] == 0
