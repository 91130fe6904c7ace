"""FedOMD's local model: an "orthogonal graph network" (spec fedspray_fedomd.md B1.1, B5 #1-#3).

    Z^1 = ReLU(GCNConv(X))                                   GCNConv d_in -> d_h (bias)
    Z^k = ReLU((Â Z^{k-1}) · ONI_T(β·W_k + (1−β)·I)),  k = 2..L−1   OrthoConv d_h -> d_h (no bias)
    logits = GCNConv(Z^{L-1})                                GCNConv d_h -> C (bias)

Â = D^-1/2 (A + I) D^-1/2 (PyG's gcn_norm, as GCNConv). ONI (orthogonalisation by Newton's
iteration, Huang et al. 2020) maps any square V to an approximately orthogonal T; the loss adds
α·Σ_k ||T_k T_kᵀ − I||_F (`ortho_penalty`). Dropout (rate p) is applied to the input of every layer,
with a caller-supplied torch.Generator so that the masks do not depend on what else draws random
numbers (e.g. a protocol), which keeps runs under different protocols comparable on one seed.
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn
from torch_geometric.nn import GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.nn.inits import glorot

ONI_EPS = 1e-5


def oni(v: Tensor, iters: int, eps: float = ONI_EPS) -> Tensor:
    """ONI_T(V) for V [r, c] (r <= c): rows centred, Σ = Zc Zcᵀ + εI, B_0 = I,
    B_{t+1} = 1.5 B_t − 0.5 B_t³ Σ/||Σ||_F (t < iters); returns B_T Zc / sqrt(||Σ||_F), [r, c],
    whose rows are approximately orthonormal (exactly so as iters -> ∞)."""
    if v.dim() != 2 or v.shape[0] > v.shape[1]:
        raise ValueError(f"oni: expected a [r, c] matrix with r <= c, got {tuple(v.shape)}")
    zc = v - v.mean(dim=1, keepdim=True)
    eye = torch.eye(v.shape[0], dtype=v.dtype, device=v.device)
    sigma = zc @ zc.T + eps * eye
    norm = torch.linalg.matrix_norm(sigma)  # Frobenius
    s = sigma / norm
    b = eye
    for _ in range(iters):
        b = 1.5 * b - 0.5 * (b @ b @ b) @ s
    return (b @ zc) / norm.sqrt()


def normalized_adjacency(edge_index: Tensor, num_nodes: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Â = D^-1/2 (A + I) D^-1/2 as a sparse CSR [N, N] (row = target), exactly PyG's gcn_norm, so
    Â @ H equals GCNConv's propagation of H."""
    ei, w = gcn_norm(edge_index, None, num_nodes, add_self_loops=True, dtype=dtype)
    with warnings.catch_warnings():  # sparse CSR support is flagged beta by torch
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_coo_tensor(ei.flip(0), w, (num_nodes, num_nodes)).coalesce().to_sparse_csr()


class OrthoConv(nn.Module):
    """H' = (Â H) · T with T = ONI_T(β·W + (1−β)·I), no bias (the activation is the caller's).
    forward(x [N, d], adj: Â sparse [N, N]) -> [N, d]."""

    def __init__(self, channels: int, iters: int = 4, beta: float = 0.5):
        super().__init__()
        self.channels, self.iters, self.beta = channels, iters, beta
        self.weight = nn.Parameter(torch.empty(channels, channels))
        self.last_transformed: Tensor | None = None  # T of the latest training-mode forward (for L_ortho)
        glorot(self.weight)

    def transformed_weight(self) -> Tensor:
        """T [d, d], the matrix the layer multiplies by."""
        eye = torch.eye(self.channels, dtype=self.weight.dtype, device=self.weight.device)
        return oni(self.beta * self.weight + (1.0 - self.beta) * eye, self.iters)

    def forward(self, x: Tensor, adj: Tensor) -> Tensor:
        t = self.transformed_weight()
        self.last_transformed = t if self.training else None
        return (adj @ x) @ t


class SparseFeatures:
    """Bag-of-words features kept sparse: x [N, F] as CSR plus its transpose as CSR and the
    permutation between their stored entries, so that x·Wᵀ and its gradient w.r.t. W are two
    CSR products without a format conversion per step, with dropout on the stored entries."""

    def __init__(self, x: Tensor):
        coo = x.to_sparse().coalesce()
        self.shape = tuple(coo.shape)
        n = coo.values().numel()
        order = torch.arange(n, device=x.device, dtype=torch.float64)
        with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state", invariant checks
            warnings.simplefilter("ignore", UserWarning)
            csr = torch.sparse_coo_tensor(coo.indices(), order, coo.shape).to_sparse_csr()
            self.crow, self.col = csr.crow_indices(), csr.col_indices()
            self.values = coo.values()[csr.values().long()].float()
            # the same entries in the transpose's CSR order: position in x's CSR values of each entry of xᵀ
            pos = torch.arange(n, device=x.device, dtype=torch.float64)
            rows = torch.repeat_interleave(torch.arange(self.shape[0], device=x.device), self.crow.diff())
            t = torch.sparse_coo_tensor(torch.stack([self.col, rows]), pos, (self.shape[1], self.shape[0])).coalesce()
            t = t.to_sparse_csr()
        self.t_crow, self.t_col, self.t_perm = t.crow_indices(), t.col_indices(), t.values().long()

    def matmul_t(self, weight: Tensor, values: Tensor | None = None) -> Tensor:
        """x·weightᵀ [N, out] for weight [out, F], x's stored entries replaced by `values`."""
        return _SparseLinear.apply(self, self.values if values is None else values, weight)

    def to(self, device) -> "SparseFeatures":
        for name in ("crow", "col", "values", "t_crow", "t_col", "t_perm"):
            setattr(self, name, getattr(self, name).to(device))
        return self


class _SparseLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, feats: SparseFeatures, values: Tensor, weight: Tensor) -> Tensor:
        ctx.feats = feats
        ctx.save_for_backward(values)
        x = torch.sparse_csr_tensor(feats.crow, feats.col, values, feats.shape)
        return x @ weight.T

    @staticmethod
    def backward(ctx, grad: Tensor):
        (values,) = ctx.saved_tensors
        f = ctx.feats
        xt = torch.sparse_csr_tensor(f.t_crow, f.t_col, values[f.t_perm], (f.shape[1], f.shape[0]))
        return None, None, (xt @ grad).T


def dropout(x: Tensor, p: float, training: bool, generator: torch.Generator | None) -> Tensor:
    """Inverted dropout drawing its mask from `generator` (F.dropout draws from the global RNG)."""
    if not training or p == 0.0:
        return x
    keep = torch.rand(x.shape, generator=generator, device=x.device) >= p
    return x * keep / (1.0 - p)


class OrthoGCN(nn.Module):
    """GCNConv(in -> hidden) -> `ortho_layers` × OrthoConv(hidden) -> GCNConv(hidden -> out).

    forward(x [N, in], adj [N, N], generator) -> (logits [N, out], hidden: list of the ReLU outputs
    Z^1..Z^{L-1}, each [N, hidden], taken before the next layer's dropout). The GCNConv layers are
    PyG's modules (their parameters and initialisation); their computation Â x Wᵀ + b is done here
    with a precomputed sparse Â (`normalized_adjacency`, equal to GCNConv's own normalisation). `x`
    may be `SparseFeatures` (bag-of-words features): the first layer then multiplies sparsely and
    drops out only the stored entries (dropping a zero is a no-op, so the distribution is the same).
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, ortho_layers: int = 2, dropout: float = 0.6,
                 iters: int = 4, beta: float = 0.5, oni_init_first: bool = True):
        super().__init__()
        self.first = GCNConv(in_dim, hidden)
        self.ortho = nn.ModuleList(OrthoConv(hidden, iters, beta) for _ in range(ortho_layers))
        self.last = GCNConv(hidden, out_dim)
        self.dropout = dropout
        if oni_init_first and hidden <= in_dim:  # [11]'s code: the first weight starts orthogonal
            with torch.no_grad():
                self.first.lin.weight.copy_(oni(self.first.lin.weight, iters))

    def forward(self, x: Tensor, adj: Tensor,
                generator: torch.Generator | None = None) -> tuple[Tensor, list[Tensor]]:
        """x [N, in] (dense, or SparseFeatures), adj = normalized_adjacency(...) [N, N]."""
        hidden = [torch.relu(self._first_layer(x, adj, generator))]
        for conv in self.ortho:
            hidden.append(torch.relu(conv(dropout(hidden[-1], self.dropout, self.training, generator), adj)))
        return self._gcn(self.last, dropout(hidden[-1], self.dropout, self.training, generator), adj), hidden

    @staticmethod
    def _gcn(conv: GCNConv, x: Tensor, adj: Tensor) -> Tensor:
        """GCNConv's computation Â (x Wᵀ) + b with its parameters (x dense)."""
        return adj @ (x @ conv.lin.weight.T) + conv.bias

    def _first_layer(self, x: "Tensor | SparseFeatures", adj: Tensor, generator: torch.Generator | None) -> Tensor:
        """GCNConv(dropout(x)); sparse features drop out their stored entries only."""
        if not isinstance(x, SparseFeatures):
            return self._gcn(self.first, dropout(x, self.dropout, self.training, generator), adj)
        xw = x.matmul_t(self.first.lin.weight, dropout(x.values, self.dropout, self.training, generator))
        return adj @ xw + self.first.bias


def ortho_penalty(model: OrthoGCN) -> Tensor:
    """L_ortho = Σ_k ||T_k T_kᵀ − I||_F over the OrthoConv layers (paper Eq. 6, unsquared); reuses
    the T of the latest training-mode forward pass when there is one."""
    total = model.last.lin.weight.new_zeros(())
    for conv in model.ortho:
        t = conv.last_transformed if conv.last_transformed is not None else conv.transformed_weight()
        total = total + torch.linalg.matrix_norm(t @ t.T - torch.eye(t.shape[0], dtype=t.dtype, device=t.device))
    return total
