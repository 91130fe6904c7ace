"""FedGPL's samples given from outside (`--method-param samples=file:PATH`): what a file holds is what the
clients train and are scored on, a bad file stops with one line naming the problem, and the run records
the file's SHA-256. selection=test is the authors' code's protocol: train on train-support + query, pick
the round on test."""
from __future__ import annotations

import hashlib

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privfgl.experiment import ConfigError, RunConfig, run
from privfgl.methods.fedgpl.run import build_clients
from privfgl.methods.fedgpl.samples_file import FORMAT, TASKS, pack_client, read_samples, write_samples

DIM, CLASSES = 8, 3


def random_client(task: str, gen: torch.Generator, sizes: list[int]) -> tuple[dict, list]:
    """A client of len(sizes) graphs with random features, edges, labels and parts (each part present)."""
    graphs = []
    for i, n in enumerate(sizes):
        e = int(torch.randint(0, 3 * n + 1, (1,), generator=gen))
        graphs.append((torch.randn(n, DIM, generator=gen), torch.randint(0, n, (2, e), generator=gen),
                       int(torch.randint(0, CLASSES, (1,), generator=gen)), i % 4))
    return pack_client(task, graphs), graphs


def write(path, clients, dataset="sbm", **extra) -> str:
    sha = write_samples(path, dataset, CLASSES, clients)
    if extra:
        blob = torch.load(path, weights_only=True)
        blob.update(extra)
        torch.save(blob, path)
    return sha


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), sizes=st.lists(st.integers(1, 6), min_size=4, max_size=9))
def test_random_samples_round_trip_through_the_file_into_the_clients(tmp_path, graph, seed, sizes):
    gen = torch.Generator().manual_seed(seed)
    made = [random_client(task, gen, sizes) for task in TASKS]
    path = tmp_path / f"s{seed}.pt"
    sha = write(path, [c for c, _ in made])
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    tracked, samples, _ = build_clients(graph, 3, {"dim": DIM, "samples": f"file:{path}"}, 0, "sbm")
    for (_, graphs), s, d in zip(made, samples, tracked):
        assert len(s.graphs) == len(graphs)
        for (x, e, y, part), g, label, split in zip(graphs, s.graphs, s.y.tolist(), s.split.tolist()):
            assert torch.equal(g.x, x) and torch.equal(g.edge_index, e) and label == y == int(g.y)
            assert split == min(part, 2)  # train-support 0, train-query 1 (val), test-support/query 2
        assert torch.equal(d.val_mask, s.split == 1) and torch.equal(d.test_mask, s.split == 2)


def test_selection_test_validates_on_the_test_samples(tmp_path, graph):
    gen = torch.Generator().manual_seed(0)
    path = tmp_path / "s.pt"
    write(path, [random_client(t, gen, [3] * 8)[0] for t in TASKS])
    tracked, samples, _ = build_clients(graph, 3, {"dim": DIM, "samples": f"file:{path}", "selection": "test"}, 0, "sbm")
    for d, s in zip(tracked, samples):
        assert torch.equal(d.val_mask, s.split == 2) and torch.equal(d.test_mask, s.split == 2)


def _mutate(clients: list[dict], k: int, key: str, value) -> list[dict]:
    out = [dict(c) for c in clients]
    out[k][key] = value
    return out


BAD = {  # problem -> (how the file is broken, words the one line must hold)
    "other dataset": (lambda cs, p: write(p, cs, dataset="cora"), "made for dataset 'cora'"),
    "class count": (lambda cs, p: write(p, cs, num_classes=5), "num_classes 5"),
    "client count": (lambda cs, p: write(p, cs[:2] + cs[:2]), "4 clients, the run has 3"),
    "task order": (lambda cs, p: write(p, [cs[1], cs[0], cs[2]]), "client 0 has task 'edge'"),
    "feature width": (lambda cs, p: write(p, _mutate(cs, 1, "x", cs[1]["x"][:, :4])), "client 1: x of shape"),
    "label range": (lambda cs, p: write(p, _mutate(cs, 2, "y", cs[2]["y"] + CLASSES)), "a label outside [0, 3)"),
    "part range": (lambda cs, p: write(p, _mutate(cs, 0, "part", cs[0]["part"] + 4)), "a part outside 0 .. 3"),
    "edge range": (lambda cs, p: write(p, _mutate(cs, 0, "edge_index", cs[0]["edge_index"] + 100)),
                   "an edge id outside its graph"),
    "offsets": (lambda cs, p: write(p, _mutate(cs, 1, "node_ptr", cs[1]["node_ptr"] + 1)), "node_ptr is not 0 .."),
    "no test part": (lambda cs, p: write(p, _mutate(cs, 1, "part", torch.zeros_like(cs[1]["part"]))),
                     "client 1 lacks training or test samples"),
    "not ours": (lambda cs, p: torch.save({"format": "other"}, p), "not a FedGPL samples file"),
    "not torch": (lambda cs, p: p.write_text("node 1 2 3\n"), "unreadable"),
    "features": (lambda cs, p: write(p, cs, features=torch.zeros(7, DIM)), "features of shape (7, 8)"),
}


@pytest.mark.parametrize("problem", list(BAD))
def test_a_bad_samples_file_stops_the_run_with_one_line_naming_it(tmp_path, graph, problem):
    gen = torch.Generator().manual_seed(1)
    clients = [random_client(t, gen, [2, 3, 4, 5])[0] for t in TASKS]
    path = tmp_path / "bad.pt"
    breaks, words = BAD[problem]
    breaks(clients, path)
    with pytest.raises(ValueError) as e:
        read_samples(path, "sbm", CLASSES, 3, DIM, int(graph.num_nodes))
    message = str(e.value)
    assert "\n" not in message and str(path) in message and words in message and "valid:" in message


def test_a_missing_samples_file_is_refused_before_the_run():
    with pytest.raises(ConfigError, match="samples file /nonexistent.pt: no such file"):
        RunConfig(method="fedgpl", dataset="sbm", partition="tasks", clients=3,
                  method_params={"samples": "file:/nonexistent.pt"}).validate()
    with pytest.raises(ValueError, match="invalid method param samples='elsewhere'"):
        RunConfig(method="fedgpl", dataset="sbm", partition="tasks", clients=3,
                  method_params={"samples": "elsewhere"}).validate()


def test_a_run_on_a_samples_file_trains_on_it_and_records_its_sha256(tmp_path, graph):
    gen = torch.Generator().manual_seed(2)
    path = tmp_path / "run.pt"
    sha = write(path, [random_client(t, gen, [6] * 12)[0] for t in TASKS])
    cfg = RunConfig(method="fedgpl", dataset="sbm", partition="tasks", clients=3, rounds=1, progress=False,
                    method_params={"dim": DIM, "hidden": 8, "pretrain_epochs": 1, "samples": f"file:{path}"})
    record, setup = run(cfg, data=graph)
    assert record["metrics"]["samples_file"] == {"path": str(path), "sha256": sha}
    assert [len(s.y) for s in setup.extras["fedgpl_samples"]] == [12, 12, 12]
    assert FORMAT == "privfgl-fedgpl-samples/1"


def test_selection_test_trains_on_train_support_and_query_and_val_on_train_support_alone(tmp_path, graph):
    from privfgl.methods.fedgpl.params import resolve_params
    from privfgl.methods.fedgpl.run import _start
    gen = torch.Generator().manual_seed(3)
    path = tmp_path / "s.pt"
    write(path, [random_client(t, gen, [3] * 8)[0] for t in TASKS])  # parts 0,1,2,3 twice: 2 support, 2 query
    for selection, trained in (("val", 2), ("test", 4)):
        params = {"dim": DIM, "samples": f"file:{path}", "selection": selection}
        tracked, _, _ = build_clients(graph, 3, params, 0, "sbm")
        state: dict = {}
        _start(0, state, tracked[0], resolve_params(params), CLASSES, 0)
        assert len(state["train"]) == trained


def test_the_pretrained_trunk_is_cached_per_samples_file(tmp_path, graph):
    gen = torch.Generator().manual_seed(4)
    paths = [tmp_path / "a.pt", tmp_path / "b.pt"]
    for path in paths:
        write(path, [random_client(t, gen, [5] * 8)[0] for t in TASKS])
    cache = []
    for path in paths:
        cfg = RunConfig(method="fedgpl", dataset="sbm", partition="tasks", clients=3, rounds=1, progress=False,
                        method_params={"dim": DIM, "hidden": 8, "pretrain_epochs": 1, "samples": f"file:{path}"})
        record, _ = run(cfg, data=graph)
        cache.append(record["time"]["caches"]["pretrain"])
    assert [c["cache"] for c in cache] == ["miss", "miss"] and cache[0]["path"] != cache[1]["path"]


def test_evaluate_at_local_scores_the_clients_models_before_the_federation(tmp_path, graph):
    """Under FedAvg every client holds the same model after the federation and its own before it: the
    authors' code logs the latter (evaluate_at=local), privfgl by default the former."""
    gen = torch.Generator().manual_seed(5)
    path = tmp_path / "e.pt"
    write(path, [random_client(t, gen, [6] * 12)[0] for t in TASKS])
    seen = {}
    for at in ("federated", "local"):
        cfg = RunConfig(method="fedgpl", dataset="sbm", partition="tasks", clients=3, rounds=1, progress=False,
                        method_params={"dim": DIM, "hidden": 8, "pretrain_epochs": 1, "samples": f"file:{path}",
                                       "fed": "fedavg", "evaluate_at": at})
        _, setup = run(cfg, data=graph)
        heads = [c.head.linear.weight.detach().clone() for c in setup.extras["fedgpl_clients"]]
        seen[at] = setup.tracker.history[0]["per_client"], heads
    assert seen["federated"][0] != seen["local"][0]  # other models scored, same final models
    assert all(torch.equal(a, b) for a, b in zip(seen["federated"][1], seen["local"][1]))
