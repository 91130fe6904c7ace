"""`--partition file:PATH`: a node -> client assignment given from outside round-trips exactly into
the run's clients, every bad file is one line naming the problem, the record carries the file's path
and SHA-256, sweeps and config files take it, and `privfgl partition` writes privfgl's own."""
from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from privfgl.cli import main
from privfgl.data import DataError, load_dataset, partition_nodes, read_partition, write_partition
from privfgl.errors import ConfigError
from privfgl.experiment import RunConfig, build_setup
from privfgl.sweep import load_sweep, run_sweep
from privfgl.sweep.runner import record_path


def write_assignment(folder: Path, parts: list[list[int]], fmt: str) -> str:
    """Write `parts` in one of the accepted formats; returns the file:... partition."""
    if fmt == "lines":
        (folder / "p.txt").write_text("".join(" ".join(map(str, ids)) + "\n" for ids in parts))
        return f"file:{folder / 'p.txt'}"
    if fmt == "commas":
        (folder / "p.txt").write_text("\n".join(", ".join(map(str, ids)) for ids in parts))
        return f"file:{folder / 'p.txt'}"
    if fmt == "json":
        (folder / "p.json").write_text(json.dumps(parts, indent=1))
        return f"file:{folder / 'p.json'}"
    for k, ids in enumerate(parts):  # one file per client, as FedSpray's np.savetxt writes them
        np.savetxt(folder / f"Graph_{k:02d}.txt", np.asarray(ids, dtype=np.float64))
    return f"file:{folder / 'Graph_*.txt'}"


@st.composite
def assignments(draw, max_nodes: int = 60):
    """(num_nodes, parts): each node in one of K clients or in none, every client non-empty, ids in
    any order within a client."""
    num_nodes = draw(st.integers(1, max_nodes))
    k = draw(st.integers(1, min(8, num_nodes)))
    owner = draw(st.lists(st.integers(-1, k - 1), min_size=num_nodes, max_size=num_nodes))
    owner[:k] = range(k)  # every client holds a node
    order = draw(st.permutations(range(num_nodes)))
    parts = [[n for n in order if owner[n] == c] for c in range(k)]
    return num_nodes, parts


@settings(max_examples=60, deadline=None)
@given(assignments(), st.sampled_from(["lines", "commas", "json", "glob"]))
@example((2, [[0, 1]]), "glob")  # a glob matching one file is one client (it was read as a file of lines)
def test_a_random_assignment_round_trips_exactly_in_every_format(case, fmt):
    num_nodes, parts = case
    with tempfile.TemporaryDirectory() as tmp:
        partition = write_assignment(Path(tmp), parts, fmt)
        read, block = read_partition(partition, num_nodes, len(parts))
        assert [p.tolist() for p in read] == [sorted(ids) for ids in parts]
        assert all(p.dtype == torch.int64 for p in read)
        assigned = sum(map(len, parts))
        assert (block["assigned_nodes"], block["unassigned_nodes"]) == (assigned, num_nodes - assigned)
        files = sorted(Path(tmp).iterdir())
        assert block["sha256"] == hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.integers(1, 12), drop=st.floats(0, 0.5), seed=st.integers(0, 2**16))
def test_the_runs_clients_are_exactly_the_files_clients(cora, k, drop, seed):
    """Cora, a random assignment with some nodes in no client: each client's graph holds exactly its
    listed nodes, and its edges are the graph's edges between them."""
    rng = np.random.default_rng(seed)
    owner = rng.integers(0, k, cora.num_nodes)
    owner[rng.random(cora.num_nodes) < drop] = -1
    owner[:k] = np.arange(k)
    parts = [rng.permutation(np.flatnonzero(owner == c)).tolist() for c in range(k)]
    with tempfile.TemporaryDirectory() as tmp:
        partition = write_assignment(Path(tmp), parts, "lines")
        setup = build_setup(RunConfig(method="fedavg", partition=partition, clients=k, rounds=1), data=cora)
    assert [set(c.global_id.tolist()) for c in setup.clients] == [set(p) for p in parts]
    src, dst = cora.edge_index
    for c in setup.clients:
        inside = torch.zeros(cora.num_nodes, dtype=torch.bool)
        inside[c.global_id] = True
        assert c.edge_index.size(1) == int((inside[src] & inside[dst]).sum())
        assert torch.equal(c.y, cora.y[c.global_id])
    assert setup.extras["partition_file"]["unassigned_nodes"] == int((owner < 0).sum())


BAD_FILES = [  # (file name, contents, clients, the one line's expected text)
    ("p.txt", "0 1\n2 2708\n", 2, "client 1 (line 2) holds node id 2708, outside the graph's range 0..2707"),
    ("p.txt", "0 -3\n2\n", 2, "client 0 (line 1) holds node id -3, outside the graph's range 0..2707"),
    ("p.txt", "0 1 5\n2 5\n", 2, "node 5 is in client 0 and client 1 (line 2)"),
    ("p.txt", "0 1 1\n2\n", 2, "client 0 (line 1) lists node 1 twice"),
    ("p.txt", "0 1\n\n2\n", 3, "client 1 (line 2) is empty"),
    ("p.json", "[[0, 1], [], [2]]", 3, "client 1 (JSON list 1) is empty"),
    ("p.txt", "0 1\n2\n3\n", 2, "holds 3 clients, --clients is 2; valid: --clients 3"),
    ("p.txt", "0 1\n2 x7\n", 2, "line 2: 'x7' is not a node id"),
    ("p.txt", "0 1.5\n2\n", 2, "line 1: '1.5' is not a node id"),
    ("p.json", "[[0, 1],\n [2,]]", 2, "not valid JSON at line 2"),
    ("p.json", "[[0, 1], 2]", 2, "JSON must be a list of lists of node ids"),
    ("p.json", "[[0, 1], [2, \"3\"]]", 2, "client 1 (JSON list 1) holds '3', not a node id"),
    ("p.txt", b"0 1\n\xff\n", 2, "not UTF-8 text"),
]


@pytest.mark.parametrize("name, contents, clients, message", BAD_FILES)
def test_a_bad_file_is_one_line_naming_the_problem(cora, tmp_path, name, contents, clients, message):
    path = tmp_path / name
    path.write_bytes(contents if isinstance(contents, bytes) else contents.encode())
    with pytest.raises(DataError, match="partition file .*" + re.escape(message)):
        read_partition(f"file:{path}", cora.num_nodes, clients)


@pytest.mark.parametrize("partition, message", [
    ("file:{tmp}/missing.txt", "partition file {tmp}/missing.txt: no such file"),
    ("file:{tmp}", "partition file {tmp}: a folder, not a file"),
    ("file:{tmp}/none_*.txt", "partition file pattern {tmp}/none_*.txt: matches no file"),
    ("file:", "no path; valid: file:PATH"),
])
def test_a_missing_file_is_refused_before_the_data_is_read(tmp_path, partition, message):
    cfg = RunConfig(partition=partition.format(tmp=tmp_path))
    with pytest.raises(ConfigError, match=re.escape(message.format(tmp=tmp_path))):
        cfg.validate()


def test_the_cli_gives_exit_2_and_one_line_for_a_bad_file(tmp_path, planetoid_root, capsys):
    (tmp_path / "p.txt").write_text("0 1 5\n2 5\n")
    code = main(["run", "--partition", f"file:{tmp_path / 'p.txt'}", "--clients", "2", "--rounds", "1",
                 "--data-root", str(planetoid_root), "--offline", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "node 5 is in client 0 and client 1 (line 2)" in err


@pytest.mark.parametrize("extra, message", [
    ({"partition_params": {"resolution": 2.0}}, "takes no partition params (got resolution)"),
    ({"evaluate": ("seen", "unseen-node")}, "valid: --evaluate seen, or a built-in --partition"),
])
def test_settings_a_file_partition_cannot_honour_are_refused(tmp_path, extra, message):
    (tmp_path / "p.txt").write_text("0\n1\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        RunConfig(partition=f"file:{tmp_path / 'p.txt'}", clients=2, **extra).validate()


@pytest.mark.parametrize("fmt", ["lines", "json"])
def test_privfgl_partition_writes_the_partition_a_run_builds(tmp_path, planetoid_root, monkeypatch, fmt, capsys):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / f"cora-louvain.{fmt}"
    assert main(["partition", "--dataset", "cora", "--partition", "louvain", "--clients", "5", "--seed", "3",
                 "--format", fmt, "--out", str(out), "--data-root", str(planetoid_root), "--offline"]) == 0
    sha = hashlib.sha256(out.read_bytes()).hexdigest()
    assert f"sha256 {sha}" in capsys.readouterr().out
    cora = load_dataset("cora", root=planetoid_root, download=False)
    own = partition_nodes(cora, "louvain", 5, seed=3)
    read, block = read_partition(f"file:{out}", cora.num_nodes, 5)
    assert [p.tolist() for p in read] == [p.tolist() for p in own] and block["sha256"] == sha
    assert write_partition(own, tmp_path / "again", fmt) == sha  # deterministic bytes


SWEEP = """
[sweep]
name = "from-file"
seeds = [0]
[base]
method = "fedavg"
dataset = "cora"
partition = "file:parts/cora-3.txt"
clients = 3
rounds = 1
transcript = "none"
"""


def test_a_sweep_cell_runs_on_a_file_relative_to_the_sweep_and_records_path_and_sha256(tmp_path, planetoid_root,
                                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)  # the sweep file's folder is not the working directory
    config_dir = tmp_path / "experiments"
    (config_dir / "parts").mkdir(parents=True)
    part_file = config_dir / "parts" / "cora-3.txt"
    sizes = [300, 200, 400]  # nodes 0..899, the rest in no client
    starts = np.cumsum([0, *sizes])
    part_file.write_text("".join(" ".join(map(str, range(a, b))) + "\n" for a, b in zip(starts, starts[1:])))
    (config_dir / "sweep.toml").write_text(SWEEP)
    sweep = load_sweep(Path("experiments/sweep.toml"), results=tmp_path / "results",
                       overrides={"data_root": str(planetoid_root), "download": False})
    assert sweep.cells[0].options["partition"] == "file:experiments/parts/cora-3.txt"
    assert run_sweep(sweep, progress=False) == []
    record = json.loads(record_path(sweep.results, sweep.cells[0], 0).read_text())
    assert record["config"]["partition"] == "file:experiments/parts/cora-3.txt"
    assert record["partition_file"]["path"] == "experiments/parts/cora-3.txt"
    assert record["partition_file"]["sha256"] == hashlib.sha256(part_file.read_bytes()).hexdigest()
    assert record["partition_file"]["unassigned_nodes"] == 2708 - 900
    assert [c["n_nodes"] for c in record["metrics"]["per_client"]] == sizes
    key = sweep.cells[0].key
    part_file.write_text(part_file.read_text().replace(" 899\n", "\n"))  # an edited file is a new cell
    assert load_sweep(Path("experiments/sweep.toml")).cells[0].key != key


def test_a_config_file_resolves_a_relative_partition_against_its_own_folder(tmp_path, monkeypatch):
    from privfgl.cli import build_parser, config_from_args
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "p.txt").write_text("0\n1\n")
    (tmp_path / "cfg" / "run.json").write_text(json.dumps({"partition": "file:p.txt", "clients": 2}))
    args = build_parser().parse_args(["run", "--config", "cfg/run.json"])
    assert config_from_args(args).partition == "file:cfg/p.txt"
    args = build_parser().parse_args(["run", "--config", "cfg/run.json", "--partition", "file:cfg/p.txt"])
    assert config_from_args(args).partition == "file:cfg/p.txt"  # a flag is taken from the working directory


@pytest.mark.parametrize("argv, message", [
    (["--partition", "file:x.txt"], "--partition file:x.txt: already a file; valid: a built-in partition"),
    (["--partition", "lovain"], "unknown partition method 'lovain'; valid methods: louvain"),
    (["--partition", "louvain", "--clients", "0"], "num_clients=0: must be an integer in [1, 2708]"),
    (["--partition", "louvain", "--format", "csv"], "argument --format: invalid choice: 'csv'"),
])
def test_privfgl_partition_refuses_bad_input_in_one_line(tmp_path, planetoid_root, capsys, argv, message):
    try:
        code = main(["partition", "--out", str(tmp_path / "p.txt"), "--data-root", str(planetoid_root), "--offline",
                     *argv])
    except SystemExit as e:  # argparse's own errors exit from parse_args
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.txt").exists()
