r"""The O-pFGL authors' own main.py (github.com/Youth-49/O-pFGL, commit b44e24d), run on the CPU here,
optionally on a partition given from outside, for experiments/authors_side_by_side_opfgl.py.

O-pFGL's code is not a dependency of privfgl: it runs from its own checkout in its own scratch venv
(torch 2.13 CPU, torch_geometric 2.8.1, scikit-learn, networkx, scipy, deeprobust --no-deps), e.g.

    python -m venv /tmp/peer-opfgl/venv && /tmp/peer-opfgl/venv/bin/pip install torch==2.13.0
    /tmp/peer-opfgl/venv/bin/pip install torch_geometric==2.8.1 scikit-learn networkx scipy pymetis==2025.2.2
    /tmp/peer-opfgl/venv/bin/pip install --no-deps deeprobust
    OPFGL_SRC=/tmp/peer-opfgl/src PEER_PARTITION=cora-louvain+-10.txt \
        /tmp/peer-opfgl/venv/bin/python experiments/peers/opfgl_main.py --dataset Cora ...  # run_main.sh's flags

Compatibility shims, none on the training path's arithmetic:
- torch_sparse and torch_scatter have no wheels for torch 2.13 here. Their two uses on the path are
  replaced by torch's own: `SparseTensor(row, col, value, sparse_sizes)` builds a torch sparse COO
  tensor (PyG's GCNConv.propagate takes it and multiplies by it, as it would the SparseTensor), and
  `scatter_add` is `Tensor.scatter_add_`. The SparseTensor branch of the authors' gcn_norm is never
  taken (they call it with an edge index), so fill_diag/mul/sum raise if ever reached.
- `torch.device(f"cuda:{args.gpu_id}")` becomes the CPU, and the two `propagate(adj, x=tmp)` calls
  pass `edge_weight=None`, which PyG >= 2.5 requires and older PyG defaulted (main.py is read and run
  with these substitutions; the checkout is not modified).
- torch.load gets weights_only=False (torch 2.6 changed the default; the code loads only the client
  files it wrote itself).
- scikit-learn >= 1.4 runs KMeans once (n_init="auto"); the authors' 1.2.2 ran it 10 times, so
  KMeans gets n_init=10, as the authors' environment had.

Split from outside: PEER_SPLIT=PATH (privfgl's `--split-file` format, e.g. a privfgl run's own split
written by privfgl.data.split_file.write_split) replaces the masks the authors' code drew.

Split out: PEER_SPLIT_OUT=PATH writes the per-client train/val/test node ids the authors' code drew
(global ids; the JSON format of privfgl's `--split-file`, privfgl.data.split_file). The split is
drawn only when the processed client files do not exist yet under --root (the authors' FGLDataset
caches them), so export into a fresh --root. PEER_EXPORT_ONLY=1 stops right after the partition
and split are written (no training).

Intermediates: PEER_DUMP=DIR saves, for each training run r (seed r), DIR/run{r}.pt holding what
the ablation (experiments/opfgl_ablation.py) compares against privfgl: each client's revealed
statistics as its get_distribution returned them (per-class count, mean, std, labelled count), the
global model's initial state_dict, the condensation's starting point (X' as drawn, the link
predictor's initial state_dict) and the condensed pseudo-graph (feat, edge_index, edge_weight,
labels) as the server broadcasts it. The functions are wrapped, not changed: main.py's module part
is run first, the two client methods are wrapped, then its `__main__` part runs.

More training seeds: main.py runs seeds 0, 1, 2 (`for runs in range(3)`); PEER_SEED_OFFSET=s makes
them s, s+1, s+2 (the value handed to its seed_everything; the data seed 42 is left alone).

Partition from outside: with PEER_PARTITION=PATH (one line of node ids per client, the format
`privfgl partition` writes), the authors' data_partition still runs (so the random streams that
their split then draws from are as in their pipeline) and its node -> client assignment is replaced
by the file's before the split. PEER_PARTITION_OUT=PATH writes the assignment that was used (the
authors' own, or the file's) in that format. Each run's start is printed as `PEER_RUN_START seed t`
and its end as `PEER_RUN_END t` (perf_counter seconds), for the runs' wall times; the scores are the
authors' own log lines.
"""
import functools
import json
import os
import sys
import time
import types

SRC = os.environ.get("OPFGL_SRC", "/tmp/peer-opfgl/src")
sys.path.insert(0, SRC)

import torch  # noqa: E402

torch.load = functools.partial(torch.load, weights_only=False)  # torch >= 2.6; it loads only files it wrote

def _coo(row=None, col=None, value=None, sparse_sizes=None, **_):
    return torch.sparse_coo_tensor(torch.stack([row, col]), value, tuple(sparse_sizes)).coalesce()


class _SparseTensor:
    """torch_sparse.SparseTensor(row=, col=, value=, sparse_sizes=) as a torch sparse COO tensor."""

    def __new__(cls, *args, **kwargs):
        return _coo(*args, **kwargs)


def _unused(*args, **kwargs):
    raise NotImplementedError("torch_sparse shim: only SparseTensor(row, col, value, sparse_sizes) is provided")


def _scatter_add(src, index, dim=0, dim_size=None):
    size = list(src.shape)
    size[dim] = int(index.max()) + 1 if dim_size is None else dim_size
    return torch.zeros(size, dtype=src.dtype, device=src.device).scatter_add_(dim, index, src)


torch_sparse = types.ModuleType("torch_sparse")
torch_sparse.SparseTensor, torch_sparse.fill_diag, torch_sparse.mul, torch_sparse.sum = (
    _SparseTensor, _unused, _unused, _unused)
torch_scatter = types.ModuleType("torch_scatter")
torch_scatter.scatter_add = _scatter_add
sys.modules.setdefault("torch_sparse", torch_sparse)
sys.modules.setdefault("torch_scatter", torch_scatter)

import util.base_data_util as base_data_util  # noqa: E402
import util.base_util as base_util  # noqa: E402

base_data_util.KMeans = functools.partial(base_data_util.KMeans, n_init=10)

_construct = base_data_util.construct_subgraph_dict_from_node_dict


def _construct_from_file(num_clients, node_dict, G, graph_nx, train, val, test):
    given = os.environ.get("PEER_PARTITION")
    if given:
        with open(given) as f:
            lines = [line.split() for line in f.read().splitlines() if line.strip()]
        if len(lines) != num_clients:
            sys.exit(f"PEER_PARTITION {given}: {len(lines)} clients, --num_clients is {num_clients}")
        node_dict = {k: [int(v) for v in ids] for k, ids in enumerate(lines)}
    out = os.environ.get("PEER_PARTITION_OUT")
    if out:
        with open(out, "w") as f:
            f.write("".join(" ".join(str(int(v)) for v in node_dict[k]) + "\n" for k in range(num_clients)))
    subgraphs = _construct(num_clients=num_clients, node_dict=node_dict, G=G, graph_nx=graph_nx, train=train,
                           val=val, test=test)
    given_split = os.environ.get("PEER_SPLIT")
    if given_split:  # the file's masks replace the drawn ones (after the draw, so the streams are as before)
        with open(given_split) as f:
            split = json.load(f)
        if len(split) != num_clients:
            sys.exit(f"PEER_SPLIT {given_split}: {len(split)} clients, --num_clients is {num_clients}")
        for k, sub in enumerate(subgraphs):
            local = {int(v): i for i, v in enumerate(node_dict[k])}
            for name in ("train", "val", "test"):
                mask = torch.zeros(len(local), dtype=torch.bool)
                mask[[local[int(v)] for v in split[k][name]]] = True
                setattr(sub, f"{name}_idx", mask)
    split_out = os.environ.get("PEER_SPLIT_OUT")
    if split_out:  # local node i of client k is global node node_dict[k][i]
        split = [{name: [int(node_dict[k][i]) for i in torch.nonzero(getattr(sub, f"{name}_idx")).view(-1).tolist()]
                  for name in ("train", "val", "test")} for k, sub in enumerate(subgraphs)]
        with open(split_out, "w") as f:
            json.dump(split, f)
            f.write("\n")
    if os.environ.get("PEER_EXPORT_ONLY"):
        print("PEER_EXPORT_ONLY: partition and split written, no training", flush=True)
        sys.exit(0)
    return subgraphs


base_data_util.construct_subgraph_dict_from_node_dict = _construct_from_file
_seed_everything = base_util.seed_everything


_RUN = {"seed": None}


SEED_OFFSET = int(os.environ.get("PEER_SEED_OFFSET", "0"))


def _seed_and_stamp(seed):
    if seed != 42:  # main.py's runs 0, 1, 2 (42 is its data seed): with PEER_SEED_OFFSET=s, seeds s, s+1, s+2
        seed += SEED_OFFSET
    print(f"PEER_RUN_START {seed} {time.perf_counter():.3f}", flush=True)
    _RUN["seed"] = seed
    _seed_everything(seed=seed)


base_util.seed_everything = _seed_and_stamp

main_py = os.path.join(SRC, "main.py")
with open(main_py) as f:
    source = f.read()
CUDA = 'torch.device(f"cuda:{args.gpu_id}")'
if CUDA not in source:
    sys.exit(f"{main_py}: expected {CUDA} (another commit of the authors' code?)")
source = source.replace(CUDA, 'torch.device("cpu")')
# PyG >= 2.5 generates GCNConv.propagate with edge_weight as a required argument; the authors' PyG
# took it as optional (None: the adjacency's own values), which is what passing None does now.
source = source.replace(".to(self.device), x=tmp)", ".to(self.device), x=tmp, edge_weight=None)")
sys.argv = [main_py, *sys.argv[1:]]
os.chdir(SRC if not os.environ.get("PEER_WORKDIR") else os.environ["PEER_WORKDIR"])
MAIN = '\nif __name__ == "__main__":'
if MAIN not in source:
    sys.exit(f"{main_py}: expected a `if __name__ == \"__main__\":` block (another commit of the authors' code?)")
module_part, _, main_part = source.partition(MAIN)
namespace = {"__name__": "__main__", "__file__": main_py}
exec(compile(module_part, main_py, "exec"), namespace)


def _dump_wrappers(namespace, folder):
    """Wrap Client.get_distribution / receive_model / receive_graph to save their values, and the link
    predictor's class and the optimizer to save the condensation's starting point (all unchanged)."""
    client_cls = namespace["Client"]
    os.makedirs(folder, exist_ok=True)
    state = {}
    get_distribution, receive_model, receive_graph = (client_cls.get_distribution, client_cls.receive_model,
                                                      client_cls.receive_graph)

    def cpu(d):
        return {int(c): v.detach().cpu().clone() if torch.is_tensor(v) else v for c, v in d.items()}

    def wrapped_distribution(self):
        coeff, mean, std, origin = get_distribution(self)
        state.setdefault("stats", {})[self.client_id] = {"coeff": dict(coeff), "mean": cpu(mean), "std": cpu(std),
                                                         "origin_coeff": dict(origin)}
        return coeff, mean, std, origin

    def wrapped_model(self, model):
        if self.client_id == 0:  # every client receives the same copy; client 0's is this run's
            state["init"] = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        return receive_model(self, model)

    def wrapped_graph(self, feat, edge_index, edge_weight, labels):
        if self.client_id == 0:
            state["pseudo"] = {"x": feat.detach().cpu().clone(), "edge_index": edge_index.cpu().clone(),
                               "edge_weight": edge_weight.detach().cpu().clone(), "y": labels.cpu().clone()}
            torch.save(dict(state), os.path.join(folder, f"run{_RUN['seed']}.pt"))
            state.clear()
        return receive_graph(self, feat, edge_index, edge_weight, labels)

    client_cls.get_distribution, client_cls.receive_model, client_cls.receive_graph = (
        wrapped_distribution, wrapped_model, wrapped_graph)

    class RecordedPGE(namespace["PGE"]):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            state["link_init"] = {k: v.detach().cpu().clone() for k, v in self.state_dict().items()}

    adam = namespace["Adam"]

    def recorded_adam(params, *args, **kwargs):
        if isinstance(params, list) and len(params) == 1 and params[0].dim() == 2:  # Adam([feat_syn], lr_feat)
            state["x_init"] = params[0].detach().cpu().clone()
        return adam(params, *args, **kwargs)

    namespace["PGE"], namespace["Adam"] = RecordedPGE, recorded_adam


if os.environ.get("PEER_DUMP"):
    _dump_wrappers(namespace, os.environ["PEER_DUMP"])
exec(compile(MAIN.lstrip("\n") + main_part, main_py, "exec"), namespace)
print(f"PEER_RUN_END {time.perf_counter():.3f}", flush=True)
