r"""The O-pFGL authors' own main.py (github.com/Youth-49/O-pFGL, commit b44e24d), run on the CPU here,
optionally on a partition given from outside, for experiments/authors_side_by_side_opfgl.py.

O-pFGL's code is not a dependency of privfgl: it runs from its own checkout in its own scratch venv
(torch 2.13 CPU, torch_geometric 2.8.1, scikit-learn, networkx, scipy, deeprobust --no-deps), e.g.

    python -m venv /tmp/peer-opfgl/venv && /tmp/peer-opfgl/venv/bin/pip install torch==2.13.0
    /tmp/peer-opfgl/venv/bin/pip install torch_geometric==2.8.1 scikit-learn networkx scipy
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

Partition from outside: with PEER_PARTITION=PATH (one line of node ids per client, the format
`privfgl partition` writes), the authors' data_partition still runs (so the random streams that
their split then draws from are as in their pipeline) and its node -> client assignment is replaced
by the file's before the split. PEER_PARTITION_OUT=PATH writes the assignment that was used (the
authors' own, or the file's) in that format. Each run's start is printed as `PEER_RUN_START seed t`
and its end as `PEER_RUN_END t` (perf_counter seconds), for the runs' wall times; the scores are the
authors' own log lines.
"""
import functools
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
    return _construct(num_clients=num_clients, node_dict=node_dict, G=G, graph_nx=graph_nx, train=train,
                      val=val, test=test)


base_data_util.construct_subgraph_dict_from_node_dict = _construct_from_file
_seed_everything = base_util.seed_everything


def _seed_and_stamp(seed):
    print(f"PEER_RUN_START {seed} {time.perf_counter():.3f}", flush=True)
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
exec(compile(source, main_py, "exec"), {"__name__": "__main__", "__file__": main_py})
print(f"PEER_RUN_END {time.perf_counter():.3f}", flush=True)
