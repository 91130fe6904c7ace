r"""The FedSpray authors' own main.py (github.com/xbfu/FedSpray, commit d3e591a), run on the CPU here on
a partition and split given from outside, for experiments/authors_side_by_side_fedspray.py.

FedSpray's code is not a dependency of privfgl: it runs from its own checkout in its own scratch venv
(torch 2.13 CPU, torch_geometric 2.8.1, numpy), e.g.

    python -m venv /tmp/peer-spray/venv && /tmp/peer-spray/venv/bin/pip install torch==2.13.0 torch_geometric==2.8.1
    FEDSPRAY_SRC=/tmp/peer-spray/src /tmp/peer-spray/venv/bin/python experiments/peers/fedspray_main.py \
        --work W --dataset Cora --seeds 0 1 2

W holds ``partition/`` (one file per client, ``{Dataset}_{NN}.txt``, one node id per line as
``np.savetxt`` writes: the format of the repository's ``partition/*.txt``) and ``data/{Dataset}`` (a
Planetoid root: ``data/Cora/Cora/raw/ind.cora.*``); the run's working directory is W, so main.py's
``./partition/`` and ``./data/`` are W's. Each seed calls main.py's ``run`` with the hyper-parameters
of its ``__main__`` block (``epochs=5, hidden=64, lr=0.003, lambda_1=1.0, proxy_dim=64``; ``run``
trains ``rounds=500``), exactly as ``python main.py`` does for its one seed.

Compatibility shim, none on the training path: data.py's ``load_data`` loads PubMed, Flickr, Physics
and WikiCS; its Planetoid branch also takes Cora and CiteSeer here (``if dataset_name == 'PubMed'``
reads ``if dataset_name in ('PubMed', 'Cora', 'CiteSeer')``: data.py is read and run with that
substitution; the checkout is not modified). The code picks CUDA when it sees one and the CPU
otherwise, so nothing else changes.

Split out: PEER_SPLIT_OUT=PATTERN (``{seed}`` in it) writes, per seed, the per-client train/val/test
node ids that load_data drew (global ids; privfgl's ``--split-file`` JSON, clients in the partition
files' sorted name order, which is how ``--partition file:W/partition/Cora_*.txt`` numbers them;
load_data itself shuffles the client order, so a client is matched to its file by its node set).
Rounds: PEER_ROUNDS=R trains R rounds instead of main.py's 500.

Output: main.py's own lines (``Round: ...`` per round and its final ``best_test_acc ... |
acc_minority ...`` line), each seed's start and end as ``PEER_RUN_START seed t`` and ``PEER_RUN_END t``
(perf_counter seconds).
"""
import argparse
import functools
import json
import os
import sys
import time
import types

SRC = os.environ.get("FEDSPRAY_SRC", "/tmp/peer-spray/src")
# main.py's __main__ block: run(dataset_name, epochs, hidden=64, lr=0.003, lambda_1=1.0, proxy_dim=64, seed=0)
AUTHORS_RUN = dict(epochs=5, hidden=64, lr=0.003, lambda_1=1.0, proxy_dim=64)
DATA_BRANCH = ("if dataset_name == 'PubMed':", "if dataset_name in ('PubMed', 'Cora', 'CiteSeer'):")


def _load_data_module() -> types.ModuleType:
    """data.py, read and run with the Cora/CiteSeer branch (the one shim)."""
    path = os.path.join(SRC, "data.py")
    with open(path) as f:
        source = f.read()
    if source.count(DATA_BRANCH[0]) != 1:
        sys.exit(f"{path}: expected one {DATA_BRANCH[0]!r}; is the checkout at d3e591a?")
    module = types.ModuleType("data")
    module.__file__ = path
    exec(compile(source.replace(*DATA_BRANCH), path, "exec"), module.__dict__)
    sys.modules["data"] = module
    return module


def _client_files(dataset: str) -> list[str]:
    return sorted(f for f in os.listdir("partition") if f.find(dataset) == 0)


def _file_nodes(dataset: str) -> dict[frozenset, int]:
    """Node set -> the client's index in sorted file-name order."""
    import numpy as np
    return {frozenset(np.loadtxt(os.path.join("partition", f)).astype(int).tolist()): k
            for k, f in enumerate(_client_files(dataset))}


def _wrap_load_data(load_data, seed: int):
    """load_data, then write the split it drew (PEER_SPLIT_OUT)."""

    @functools.wraps(load_data)
    def wrapped(dataset_name, data_path, file_names):
        dataset, num_clients, train, val, test = load_data(dataset_name, data_path, file_names)
        out = os.environ.get("PEER_SPLIT_OUT")
        if out:
            index = _file_nodes(dataset_name)
            order = [index[frozenset(int(v) for v in tr + va + te)] for tr, va, te in zip(train, val, test)]
            split = [None] * num_clients
            for k, tr, va, te in zip(order, train, val, test):
                split[k] = {"train": [int(v) for v in tr], "val": [int(v) for v in va], "test": [int(v) for v in te]}
            with open(out.format(seed=seed), "w") as f:
                json.dump(split, f)
        return dataset, num_clients, train, val, test

    return wrapped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="folder with partition/ and data/ (the run's working directory)")
    ap.add_argument("--dataset", required=True, help="Cora or CiteSeer (or the repository's PubMed, ...)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = ap.parse_args()
    os.chdir(args.work)
    sys.path.insert(0, SRC)
    _load_data_module()
    import server  # noqa: E402  (the authors' modules, from SRC)
    import main as authors_main  # noqa: E402
    rounds = os.environ.get("PEER_ROUNDS")
    if rounds:
        train = server.Server.train
        server.Server.train = lambda self, rounds=500: train(self, rounds=int(os.environ["PEER_ROUNDS"]))
    load_data = authors_main.load_data
    for seed in args.seeds:
        authors_main.load_data = _wrap_load_data(load_data, seed)
        print(f"PEER_RUN_START {seed} {time.perf_counter():.3f}", flush=True)
        authors_main.run(args.dataset, AUTHORS_RUN["epochs"], hidden=AUTHORS_RUN["hidden"], lr=AUTHORS_RUN["lr"],
                         lambda_1=AUTHORS_RUN["lambda_1"], proxy_dim=AUTHORS_RUN["proxy_dim"], seed=seed)
        print(f"PEER_RUN_END {time.perf_counter():.3f}", flush=True)


if __name__ == "__main__":
    main()
