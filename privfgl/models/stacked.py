"""All clients' models at once: stacked per-client parameters over a block-diagonal graph.

This is a simulation accelerator, not a different algorithm. K clients' graphs are laid side by
side as one block-diagonal graph (no edge crosses two clients), every parameter gets a leading
client dimension [K, ...], and each layer multiplies client k's rows only by client k's weights.
Weights are stored transposed, [K, in, out] (PyG's Linear keeps [out, in]), so that the layers
use them as views without copies; `to_stacked` / `from_stacked` convert one tensor.
The loss is the sum of the clients' own mean losses, so each client's gradient is exactly the
gradient of its own loss, and an element-wise optimizer (Adam, SGD) on the stacked tensors is K
independent optimizers. The parameter names are those of the PyG backbones in this package, so
`params[name][k]` loads into client k's PyG model (tests check both engines agree).

Supported backbones: gcn, sage, sgc, mlp (GAT runs in the per-client loop engine).
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch_geometric.utils import add_remaining_self_loops, degree

STACKABLE = ("gcn", "sage", "sgc", "mlp")
MAX_PADDING = 0.5  # dense inputs: padded batch at most 1.5x the input's rows, else a loop over clients
SWAPPED_GRAD_ROWS = 4096  # clients of this many rows: narrow layers' weight gradient as (gᵀ h)ᵀ (_BatchedLinear)
DENSE_INPUT = 0.25  # fraction of non-zero entries from which an input is handled as dense


class BlockGraph:
    """K client graphs as one block-diagonal graph; client k owns rows ptr[k]:ptr[k+1].

    xs: per-client features [n_k, F]; edge_indices: per-client local edge_index [2, E_k].
    """

    def __init__(self, xs: list[torch.Tensor], edge_indices: list[torch.Tensor], device: str | torch.device = "cpu"):
        sizes = torch.tensor([x.shape[0] for x in xs])
        self.num_clients = len(xs)
        self.device = torch.device(device)
        self.ptr = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
        self.num_nodes = int(self.ptr[-1])
        self.client_of = torch.repeat_interleave(torch.arange(self.num_clients), sizes).to(self.device)
        self.n_max = int(sizes.max())
        self.sizes = sizes.tolist()
        self.balanced = all(n == self.n_max for n in self.sizes)  # pad/unpad are then the identity
        self.x = torch.cat(xs).float().to(self.device)
        self.edge_index = torch.cat([ei + int(o) for ei, o in zip(edge_indices, self.ptr[:-1])], dim=1).to(self.device)
        self._cache: dict = {}
        self.generators: list[torch.Generator] | None = None  # per-client dropout streams (None: global RNG)

    # ---- propagation operators (sparse CSR [N, N]) ------------------------------------------
    def gcn_adj(self) -> "FixedSparse":
        """Â = D^-1/2 (A + I) D^-1/2, exactly PyG's gcn_norm (messages flow source -> target)."""
        if "gcn" not in self._cache:
            ei, _ = add_remaining_self_loops(self.edge_index, num_nodes=self.num_nodes)
            src, dst = ei
            deg = degree(dst, self.num_nodes)
            w = deg[src].rsqrt() * deg[dst].rsqrt()
            self._cache["gcn"] = FixedSparse(dst, src, w, self.num_nodes, self.num_nodes)
        return self._cache["gcn"]

    def mean_adj(self) -> "FixedSparse":
        """Row-normalised adjacency without self-loops: (M h)[i] = mean of h over i's in-neighbours."""
        if "mean" not in self._cache:
            src, dst = self.edge_index
            deg = degree(dst, self.num_nodes).clamp(min=1)
            self._cache["mean"] = FixedSparse(dst, src, 1.0 / deg[dst], self.num_nodes, self.num_nodes)
        return self._cache["mean"]

    def dense_input(self) -> bool:
        """Whether x is dense (>= a quarter of its entries non-zero; bag-of-words inputs are not): the
        first GCN/SAGE layer then propagates x once, (Â x) W instead of Â (x W) (`propagated_input`)."""
        if "dense" not in self._cache:
            self._cache["dense"] = bool(self.x.numel()) and float((self.x != 0).float().mean()) >= DENSE_INPUT
        return self._cache["dense"]

    def propagated_input(self, op: str) -> torch.Tensor:
        """Â x (op "gcn") or M x (op "mean") [N, F], computed once. For a dense x, (Â x) W equals Â (x W)
        up to float rounding and costs one dense product per step instead of a dense product and a
        sparse gather of [N, hidden] rows in random order, forward and backward: the gather that
        outgrows the CPU's cache on 100k-node clients (docs/scale.md)."""
        if op == "gcn":
            return self.propagated_features(1)
        if "prop:mean" not in self._cache:
            self._cache["prop:mean"] = self.mean_adj() @ self.x
        return self._cache["prop:mean"]

    def propagated_features(self, hops: int) -> torch.Tensor:
        """Â^hops x [N, F] (fixed, for SGC)."""
        key = f"sgc{hops}"
        if key not in self._cache:
            h = self.x
            for _ in range(hops):
                h = self.gcn_adj() @ h
            self._cache[key] = h
        return self._cache[key]

    # ---- per-client linear maps ----------------------------------------------------------------
    def input_linear(self, x: torch.Tensor, weight: torch.Tensor, key: str) -> torch.Tensor:
        """Rows of fixed input x [N, F] times their client's weight[c]: weight [K, F, out] -> [N, out].

        Sparse inputs (bag-of-words) use one sparse matrix S [N, K*F] whose row i holds x[i] in
        client c(i)'s column block, so the whole layer is a single sparse-dense product.
        Dense inputs use one batched product over the input padded to [K, n_max, F] (built once),
        unless the padding would add more than `MAX_PADDING` of x's size (unbalanced clients,
        e.g. Louvain with F = 8415): then client by client.
        """
        K, F_in, out = weight.shape
        if key not in self._cache:
            density = float((x != 0).float().mean()) if x.numel() else 0.0
            if density < DENSE_INPUT:
                rows, cols = x.nonzero(as_tuple=True)
                block_cols = self.client_of[rows] * F_in + cols
                self._cache[key] = FixedSparse(rows, block_cols, x[rows, cols], self.num_nodes, K * F_in)
            elif K * self.n_max <= (1 + MAX_PADDING) * self.num_nodes:
                self._cache[key] = self.pad(x).view(K, self.n_max, F_in)
            else:
                self._cache[key] = x
        s = self._cache[key]
        if isinstance(s, FixedSparse):
            return s @ weight.reshape(K * F_in, out)
        if s.dim() == 3:
            return self.unpad(torch.bmm(s, weight).view(K * self.n_max, out))
        return torch.cat([rows @ weight[k] for k, rows in enumerate(self.split(s))])

    def pad(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows [N, d] -> [K * n_max, d]: client k's rows at k * n_max, then zeros up to n_max.
        Contiguous block copies (one pass; an index_copy into zeros took two, row by row)."""
        if self.balanced:
            return rows
        pieces = []
        for block, n in zip(self.split(rows), self.sizes):
            pieces.append(block)
            if n < self.n_max:
                pieces.append(rows.new_zeros(self.n_max - n, rows.shape[1]))
        return torch.cat(pieces)

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """The inverse of `pad`: [K * n_max, d] -> [N, d]. Split before slicing, so that the backward
        pass pads each client's block, not the whole tensor once per client."""
        if self.balanced:
            return padded
        return torch.cat([block[:n] for block, n in zip(padded.split(self.n_max), self.sizes)])

    def split(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """Rows [N, ...] -> per-client [n_k, ...] (torch.split: its backward is one concatenation)."""
        return list(rows.split(self.sizes))

    def linear(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Rows of h [N, in] times their client's weight[c], weight [K, in, out] -> [N, out] (padded bmm)."""
        K, inn, out = weight.shape
        padded = self.pad(h).view(K, self.n_max, inn)
        if self.n_max >= SWAPPED_GRAD_ROWS and out < inn:
            result = _BatchedLinear.apply(padded, weight)
        else:
            result = torch.bmm(padded, weight)
        return self.unpad(result.view(K * self.n_max, out))

    def bias(self, b: torch.Tensor) -> torch.Tensor:
        """Per-client bias [K, out] expanded to rows [N, out]."""
        return b.index_select(0, self.client_of)


def to_stacked(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """A PyG parameter (one client's [out, in] weight, or a stack [K, out, in]) in stacked layout."""
    return tensor.transpose(-1, -2).contiguous() if name.endswith("weight") else tensor


def from_stacked(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """The inverse of `to_stacked`: back to PyG's [..., out, in] layout."""
    return tensor.transpose(-1, -2).contiguous() if name.endswith("weight") else tensor


class _BatchedLinear(torch.autograd.Function):
    """y = bmm(h, w) for h [K, n, in], w [K, in, out], out < in (e.g. the last layer: hidden -> classes).
    The gradient of h is autograd's own; w's is computed as (gᵀ h)ᵀ [K, in, out] instead of hᵀ g, the
    same sums in another order: MKL's hᵀ g with a narrow out runs 3-10x slower (one thread, out 10,
    in 64: 250 ns per row at n = 10k, 690 at 100k, against 70-80 for (gᵀ h)ᵀ; docs/scale.md). Used from
    SWAPPED_GRAD_ROWS rows per client, so that smaller federations keep their records bit for bit."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(h, w)
        return torch.bmm(h, w)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        h, w = ctx.saved_tensors
        grad_h = torch.bmm(grad, w.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        grad_w = torch.bmm(grad.transpose(1, 2), h).transpose(1, 2) if ctx.needs_input_grad[1] else None
        return grad_h, grad_w


class _FixedSparseMatmul(torch.autograd.Function):
    """y = A @ h for a constant sparse A, with A^T precomputed for the backward pass
    (torch's own CSR backward re-sorts A^T on every call)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, a_t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        ctx.a_t = a_t
        return a @ h

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, None, ctx.a_t @ grad


class FixedSparse:
    """A constant sparse matrix [n, m] (CSR) and its transpose, usable as `A @ h` with autograd on h."""

    def __init__(self, rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, n_rows: int, n_cols: int):
        self.a = _csr(rows, cols, vals, n_rows, n_cols)
        self.a_t = _csr(cols, rows, vals, n_cols, n_rows)

    def __matmul__(self, h: torch.Tensor) -> torch.Tensor:
        if not h.requires_grad:
            return self.a @ h
        return _FixedSparseMatmul.apply(self.a, self.a_t, h)


def dropout(h: torch.Tensor, p: float, training: bool, graph: "BlockGraph | None" = None) -> torch.Tensor:
    """Inverted dropout from a uniform mask (2-3x faster on CPU than bernoulli_, same distribution). With a
    graph whose ``generators`` are set, client k's rows draw from its own generator (so a client's masks do
    not depend on which other clients share its process); else from torch's global generator."""
    if not training or p == 0.0:
        return h
    # keep = 1/(1-p) where the uniform draw is >= p, else 0, built in place in the draw's own buffer:
    # h * keep equals (h * mask) * 1/(1-p) bit for bit, with one temporary of h's size instead of three.
    if graph is not None and graph.generators is not None:
        keep = torch.cat([torch.rand((n, *h.shape[1:]), generator=g, device=h.device, dtype=h.dtype)
                          for n, g in zip(graph.sizes, graph.generators)])
    else:
        keep = torch.rand_like(h)
    keep = keep.ge_(p).mul_(1.0 / (1.0 - p))
    return h * keep


def _csr(rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor, n_rows: int, n_cols: int | None = None) -> torch.Tensor:
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state", invariant checks
        warnings.simplefilter("ignore", UserWarning)
        coo = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals.float(), (n_rows, n_cols or n_rows))
        csr = coo.coalesce().to_sparse_csr()
        if max(csr.shape) < 2**31 and csr.values().numel() < 2**31:
            # int32 indices: the CPU kernels (MKL's sparse BLAS) take them as they are; int64 ones
            # are converted on every product. Same sums in the same order (tests/test_stacked.py).
            csr = torch.sparse_csr_tensor(csr.crow_indices().int(), csr.col_indices().int(), csr.values(), csr.shape)
        return csr


class BlockGraphs:
    """BlockGraphs of lists of client graphs (x [n_k, F], edge_index [2, E_k]), each built once, so
    its sparse operators are too: for graphs that do not change (the evaluation settings' graphs,
    given again every round). Keyed by the graphs' identities; the lists are held, so an identity
    cannot be reused meanwhile."""

    def __init__(self, device: str | torch.device = "cpu"):
        self.device = device
        self._built: dict[tuple[int, ...], tuple[list, BlockGraph]] = {}

    def of(self, graphs: list) -> BlockGraph:
        key = tuple(id(g) for g in graphs)
        if key not in self._built:
            self._built[key] = (list(graphs), BlockGraph([g.x for g in graphs], [g.edge_index for g in graphs],
                                                         self.device))
        return self._built[key][1]


@torch.no_grad()
def stacked_predict(arch: str, params: dict[str, torch.Tensor], graph: BlockGraph,
                    layers: int) -> list[torch.Tensor]:
    """Eval-mode logits of client k's model (params [K, ...]) on graph's block k: list of [n_k, C]
    on the CPU."""
    return graph.split(stacked_forward(arch, params, graph, layers, 0.0, False).cpu())


def stacked_forward(arch: str, params: dict[str, torch.Tensor], graph: BlockGraph, layers: int,
                    p_drop: float, training: bool) -> torch.Tensor:
    """Logits [N, C] of every client's model on its own rows. params: PyG names -> [K, ...]."""
    act = F.relu
    if arch == "sgc":
        xs = graph.propagated_features(layers)
        return graph.input_linear(xs, params["conv.lin.weight"], f"in:sgc{layers}") + graph.bias(params["conv.lin.bias"])
    h = graph.x
    for i in range(layers):
        first = i == 0
        lin = (lambda w, key: graph.input_linear(h, w, key)) if first else (lambda w, key: graph.linear(h, w))
        propagate_first = first and graph.dense_input()  # (Â x) W: no gather of hidden rows
        if arch == "gcn":
            weight = params[f"convs.{i}.lin.weight"]
            if propagate_first:
                out = graph.input_linear(graph.propagated_input("gcn"), weight, "in:gcn-x")
            else:
                out = graph.gcn_adj() @ lin(weight, "in:x")
            out = out + graph.bias(params[f"convs.{i}.bias"])
        elif arch == "sage":
            weight = params[f"convs.{i}.lin_l.weight"]
            if propagate_first:
                neighbours = graph.input_linear(graph.propagated_input("mean"), weight, "in:mean-x")
            else:
                neighbours = graph.mean_adj() @ lin(weight, "in:x")
            out = (neighbours + graph.bias(params[f"convs.{i}.lin_l.bias"])
                   + lin(params[f"convs.{i}.lin_r.weight"], "in:x"))
        elif arch == "mlp":
            out = lin(params[f"lins.{i}.weight"], "in:x") + graph.bias(params[f"lins.{i}.bias"])
        else:
            raise ValueError(f"model {arch!r} has no stacked form; stackable: {', '.join(STACKABLE)}")
        h = out if i == layers - 1 else dropout(act(out), p_drop, training, graph)
    return h
