r"""The FedLoG authors' own main.py (github.com/sung-won-kim/FedLoG, commit 80c9792), run on the CPU
here on clients given from outside, for experiments/authors_side_by_side_fedlog.py.

FedLoG's code is not a dependency of privfgl: it runs from its own checkout in its own scratch venv
(torch 2.13 CPU, torch_geometric 2.8.1, numpy, scipy), e.g.

    python -m venv /tmp/peer-log/venv
    /tmp/peer-log/venv/bin/pip install torch==2.13.0+cpu torch-geometric==2.8.1 numpy scipy
    FEDLOG_SRC=/tmp/peer-log/src PEER_CLIENTS=DIR PEER_PLANETOID=ROOT PEER_WORKDIR=W \
        /tmp/peer-log/venv/bin/python experiments/peers/fedlog_main.py --dataset cora --n_silos 3 \
        --unseen_setting closeset --seed 0 --num_seed 3

The clients. The repository has no partition code: main.py reads `data/{setting}/{Dataset}/{K+1}/
local_graphs.pkl` from a Google Drive archive that is not reachable here. This script builds that
file from the clients privfgl's closed regime made (written by the side-by-side script into
PEER_CLIENTS: `partition.txt`, one line of global node ids per training client, its missing classes
already removed; `split.json`, privfgl's `--split-file` format; `eval.json`, each client's
unseen-node / missing-class graph and the new client's nodes), cut out of Planetoid (loaded from
PEER_PLANETOID without a transform, as privfgl loads it): local_graphs[k] holds x, edge_index
(the induced subgraph), y, train/val/test masks, num_cls and its eval graph as unseen_x,
unseen_edge_index, unseen_y, unseen_node_mask, unseen_cls_mask (the attributes model/client.py
reads); local_graphs[K] is the new client. It is written under PEER_WORKDIR, where main.py runs.

Compatibility shims, none on the training path's arithmetic:
- torch_sparse has no wheel for torch 2.13 here. Its two uses are replaced by torch's own:
  `SparseTensor.eye(n, n).t()` (the synthetic nodes' self-loop adjacency given to GraphSAGE) is a
  torch sparse COO identity, which PyG's SAGEConv multiplies with the same mean reduction; and
  `SparseTensor(row=, col=, sparse_sizes=)` (the neighbour means) is a small wrapper around a torch
  sparse COO tensor with its `@`, `sum(dim)` (dense) and `to`.
- The GPU ids (`--device 0,1,2,3`) become the CPU: Client.fit / Client.eval / Server.update get
  "cpu" for their `gpu` argument.
- Processes: main.py starts one spawned process per client for every fit and every eval (2K per
  round). Each is run here in turn in this process, on what spawn would give it: the target's
  Client unpickled from a pickle of the parent's (on the authors' GPUs every tensor a child trains
  is a CUDA copy, so nothing it changes reaches the parent but through global_dict), torch's RNG
  at a fresh process's default seed (67280421310721), and the parent's RNG states restored after.
  A fresh process seeds numpy's global RNG (the minibatch draws) from OS entropy; here it is seeded
  from (training seed, round, client, fit|eval), so a run repeats. `mp.Manager().dict()` is a dict
  whose reads and writes copy (pickle round trip), as the manager's proxy does; the lock is a
  threading lock. So K clients cost K× one client's time at one thread, with no process start-ups.
- PyG's `k_hop_subgraph`, called by model/client.py without `num_nodes`, gets it sized to cover its
  centre (`k_hop_subgraph_sized`): otherwise a client whose highest node id has no edge crashes the
  generator's pretraining (CiteSeer K = 10). Calls that ran before return the same tensors.
- `torch.set_num_threads(10)` is ignored: the run keeps the thread count it was started with
  (OMP_NUM_THREADS=1 from the side-by-side script).

Each run's start is printed as `PEER_RUN_START seed t` and the end of the last as `PEER_RUN_END t`
(perf_counter seconds); the scores are main.py's own `[ROUND r] Test Acc at Best Val : A at R round.`
lines (the last before the next run's start).
"""
import json
import os
import pickle
import runpy
import sys
import threading
import time
import types

SRC = os.environ.get("FEDLOG_SRC", "/tmp/peer-log/src")
sys.path.insert(0, SRC)

import numpy as np  # noqa: E402
import torch  # noqa: E402

FRESH_PROCESS_TORCH_SEED = 67280421310721  # torch.initial_seed() in a new process


# ---- torch_sparse ---------------------------------------------------------------------------------
class _Sparse:
    """torch_sparse.SparseTensor(row=, col=, sparse_sizes=) (value None: ones) on a torch COO tensor."""

    def __init__(self, row=None, col=None, value=None, sparse_sizes=None, coo=None):
        if coo is None:
            value = torch.ones(row.numel(), device=row.device) if value is None else value
            coo = torch.sparse_coo_tensor(torch.stack([row, col]), value, tuple(sparse_sizes)).coalesce()
        self.coo = coo

    @staticmethod
    def eye(m, n=None):
        return _Eye(m, m if n is None else n)

    def __matmul__(self, dense):
        return torch.sparse.mm(self.coo, dense)

    def sum(self, dim):
        return torch.sparse.sum(self.coo, dim).to_dense()

    def to(self, *args, **kwargs):
        return _Sparse(coo=self.coo.to(*args, **kwargs))


class _Eye:
    """torch_sparse.SparseTensor.eye(m, n); its .t() is handed to GraphSAGE as an adjacency (and to
    PyG's to_edge_index), so it is a torch sparse COO identity, which PyG takes as it takes SparseTensor."""

    def __init__(self, m, n):
        self.m, self.n = m, n

    def t(self):
        idx = torch.arange(min(self.m, self.n))
        return torch.sparse_coo_tensor(torch.stack([idx, idx]), torch.ones(idx.numel()), (self.n, self.m)).coalesce()


torch_sparse = types.ModuleType("torch_sparse")
torch_sparse.SparseTensor = _Sparse
sys.modules.setdefault("torch_sparse", torch_sparse)


# ---- processes ------------------------------------------------------------------------------------
class _CopyDict(dict):
    """A multiprocessing manager's dict as its proxy behaves: every read and write is a copy."""

    def __getitem__(self, key):
        return pickle.loads(pickle.dumps(dict.__getitem__(self, key)))

    def __setitem__(self, key, value):
        dict.__setitem__(self, key, pickle.loads(pickle.dumps(value)))


_RUN = {"seed": None}


class _InlineProcess:
    """mp.Process(target=client.fit|eval, args=(cid, gpu, global_dict, round, lock)) run in this process
    at start(), on what a spawned child would get (module docstring)."""

    def __init__(self, target, args):
        self.target, self.args = target, args

    def start(self):
        child = pickle.loads(pickle.dumps(self.target.__self__))
        cid, _gpu, global_dict, cur_round, lock = self.args
        torch_state, np_state = torch.get_rng_state(), np.random.get_state()
        torch.manual_seed(FRESH_PROCESS_TORCH_SEED)
        phase = 0 if self.target.__name__ == "fit" else 1
        np.random.seed(np.random.SeedSequence([_RUN["seed"], cur_round, cid, phase]).generate_state(1)[0])
        try:
            getattr(child, self.target.__name__)(cid, "cpu", global_dict, cur_round, lock)
        finally:
            torch.set_rng_state(torch_state)
            np.random.set_state(np_state)

    def join(self):
        return None


import torch.multiprocessing as mp  # noqa: E402

mp.Process = _InlineProcess
mp.Manager = lambda: types.SimpleNamespace(dict=_CopyDict)
mp.Lock = threading.Lock
mp.set_start_method = lambda *a, **k: None
torch.set_num_threads = lambda n: None  # main.py asks for 10; the run keeps OMP_NUM_THREADS


# ---- torch_geometric's k_hop_subgraph, sized to its centre ---------------------------------------------
import torch_geometric.utils as pyg_utils  # noqa: E402
from torch_geometric.utils.num_nodes import maybe_num_nodes  # noqa: E402

_k_hop_subgraph = pyg_utils.k_hop_subgraph


def k_hop_subgraph_sized(node_idx, num_hops, edge_index, relabel_nodes=False, num_nodes=None, *args, **kwargs):
    """PyG's k_hop_subgraph with num_nodes, when not given, at least the largest centre id + 1.

    model/client.py's train_generator calls it per node without num_nodes, so PyG sizes its node mask by
    the largest id in the client's edges; a centre with no edge whose id is past every edge's (CiteSeer
    K = 10, client 0's node 280 of 281) then indexes out of range. Sized here, its subgraph is itself, as
    for an edgeless centre at any other id; every call that worked before returns the same tensors."""
    if num_nodes is None:
        centres = torch.as_tensor(node_idx)
        num_nodes = max(maybe_num_nodes(edge_index), int(centres.max()) + 1 if centres.numel() else 0)
    return _k_hop_subgraph(node_idx, num_hops, edge_index, relabel_nodes, num_nodes, *args, **kwargs)


pyg_utils.k_hop_subgraph = k_hop_subgraph_sized  # before model/client.py's `from ... import k_hop_subgraph`


# ---- the authors' modules, with the CPU for their GPU ids ------------------------------------------
import model.server as server_module  # noqa: E402
import utils  # noqa: E402

_update = server_module.Server.update
server_module.Server.update = lambda self, gpu, *a, **k: _update(self, "cpu", *a, **k)
_seed_everything = utils.seed_everything


def _seed_and_stamp(seed=0):
    print(f"PEER_RUN_START {seed} {time.perf_counter():.3f}", flush=True)
    _RUN["seed"] = int(seed)
    _seed_everything(seed)


utils.seed_everything = _seed_and_stamp


# ---- the clients, from privfgl's files --------------------------------------------------------------
DATASETS = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}


def _induced(data, nodes: torch.Tensor):
    from torch_geometric.utils import subgraph
    edge_index, _ = subgraph(nodes, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes)
    return data.x[nodes], edge_index, data.y[nodes]


def _mask(nodes: torch.Tensor, chosen) -> torch.Tensor:
    where = {int(v): i for i, v in enumerate(nodes.tolist())}
    mask = torch.zeros(nodes.numel(), dtype=torch.bool)
    mask[[where[int(v)] for v in chosen]] = True
    return mask


def build_local_graphs(folder: str, planetoid_root: str, dataset: str) -> list:
    """local_graphs as main.py reads them (module docstring), from PEER_CLIENTS' three files."""
    from torch_geometric.data import Data
    from torch_geometric.datasets import Planetoid
    data = Planetoid(planetoid_root, DATASETS[dataset])[0]
    with open(os.path.join(folder, "partition.txt")) as f:
        parts = [torch.tensor([int(v) for v in line.split()]) for line in f.read().splitlines() if line.strip()]
    with open(os.path.join(folder, "split.json")) as f:
        split = json.load(f)
    with open(os.path.join(folder, "eval.json")) as f:
        evals = json.load(f)
    num_cls = int(data.y.max()) + 1
    graphs = []
    for k, nodes in enumerate(parts):
        x, edge_index, y = _induced(data, nodes)
        g = Data(x=x, edge_index=edge_index, y=y, num_cls=num_cls)
        for name in ("train", "val", "test"):
            setattr(g, f"{name}_mask", _mask(nodes, split[k][name]))
        unseen = torch.tensor(evals["clients"][k]["nodes"])
        g.unseen_x, g.unseen_edge_index, g.unseen_y = _induced(data, unseen)
        g.unseen_node_mask = _mask(unseen, evals["clients"][k]["unseen_node"])
        g.unseen_cls_mask = _mask(unseen, evals["clients"][k]["missing_class"])
        graphs.append(g)
    new = torch.tensor(evals["new_client"])
    x, edge_index, y = _induced(data, new)
    graphs.append(Data(x=x, edge_index=edge_index, y=y, num_cls=num_cls))
    return graphs


def _arg(name: str, default: str) -> str:
    argv = sys.argv[1:]
    return argv[argv.index(name) + 1] if name in argv else default


def main() -> None:
    dataset, silos = _arg("--dataset", "cora"), int(_arg("--n_silos", "3"))
    setting = _arg("--unseen_setting", "closeset")
    work = os.environ["PEER_WORKDIR"]
    graphs = build_local_graphs(os.environ["PEER_CLIENTS"], os.environ["PEER_PLANETOID"], dataset)
    if len(graphs) != silos + 1:
        sys.exit(f"PEER_CLIENTS: {len(graphs) - 1} clients, --n_silos is {silos}")
    folder = os.path.join(work, "data", setting, DATASETS[dataset], str(silos + 1))
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "local_graphs.pkl"), "wb") as f:
        pickle.dump(graphs, f)
    os.chdir(work)
    main_py = os.path.join(SRC, "main.py")
    sys.argv = [main_py, *sys.argv[1:]]
    runpy.run_path(main_py, run_name="__main__")
    print(f"PEER_RUN_END {time.perf_counter():.3f}", flush=True)


if __name__ == "__main__":
    main()
