"""One FedLoG client (spec A.2-A.5): its private graph, model φ_k, synthetic features X_head and
X_tail, the class curriculum γ_k and the frozen class generators {NG^c} once received. Only
`uploads` and `generator_upload` leave it (pre-weighted sums for the protocol)."""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from privfgl.federation.client_steps import client_seed
from privfgl.methods.fedlog.generator import NeighbourGenerator, load_flat, new_generator
from privfgl.methods.fedlog.model import FedLoGModel, gate, in_degree, mix, neighbour_mean
from privfgl.methods.fedlog.params import FedLoGParams

EVAL_CHUNK = 1024  # queries per classifier call at evaluation (bounds the [B, P, D] message tensor)
TORCH_STREAM = 0xF1D  # client_seed purpose of a client's torch stream (dropout, its warm-up head's initialisation)


class GlobalSynthetic:
    """D_g as a client holds it: x [m, d] (raw feature space), y [m], generators {c: NG^c}."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, generators: dict[int, NeighbourGenerator]):
        self.x, self.y, self.generators = x, y, generators


class FedLoGClient:
    """Its random draws come from its own streams, seeded by the run seed and k: `rng` (minibatch order,
    within-class permutations) and a torch stream for dropout and the warm-up head (``own_rng``), so a client
    draws the same wherever it runs (in process or on a Ray actor; privfgl.federation.client_steps)."""

    def __init__(self, k: int, data: Data, num_classes: int, p: FedLoGParams, init_model: dict,
                 init_synthetic: tuple[torch.Tensor, torch.Tensor], seed: int):
        self.k, self.p, self.C = k, p, num_classes
        self.data = data
        self.n = int(data.num_nodes)
        self.train_idx = data.train_mask.nonzero().view(-1)
        self.degree = in_degree(data.edge_index, self.n)
        self.torch_state = torch.Generator().manual_seed(client_seed(seed, k, TORCH_STREAM)).get_state()
        with self.own_rng():
            self.model = FedLoGModel(data.num_features, p)
        self.model.load_state_dict(init_model)
        self.x_head = init_synthetic[0].clone().requires_grad_(True)
        self.x_tail = init_synthetic[1].clone().requires_grad_(True)
        self.gamma = torch.zeros(num_classes)
        self._new_optimizers()
        self.rng = torch.Generator().manual_seed(seed * 1000 + k)   # minibatch order, within-class permutations
        counts = torch.bincount(data.y[self.train_idx], minlength=num_classes).double()
        self.n_train = int(self.train_idx.numel())
        self.class_rate = counts / max(self.n_train, 1)               # r_k^c on training nodes [P App B]

    def _new_optimizers(self) -> None:
        """Adam on φ_k (with weight decay) and a separate Adam on X_head, X_tail."""
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.p.lr, weight_decay=self.p.weight_decay)
        self.opt_syn = torch.optim.Adam([self.x_head, self.x_tail], lr=self.p.lr_synthetic)

    @contextlib.contextmanager
    def own_rng(self):
        """torch's global CPU generator set to this client's stream for the block, then restored."""
        saved = torch.get_rng_state()
        torch.set_rng_state(self.torch_state)
        try:
            yield
        finally:
            self.torch_state = torch.get_rng_state()
            torch.set_rng_state(saved)

    # --- forward ---------------------------------------------------------------------------------
    def _embed(self, x: torch.Tensor, edge_index: torch.Tensor, extra: list[torch.Tensor],
               pair_edges: torch.Tensor | None = None):
        """One GraphSAGE pass over the real graph, the synthetic sets (self-loops: G_I, A.12.11) and
        optional extra rows; returns h of the real nodes, the prototypes of each branch and h of extras."""
        n, m = x.shape[0], self.x_head.shape[0]
        rows = [x, self.x_head, self.x_tail, *extra]
        loops = torch.arange(n, n + 2 * m)
        edges = [edge_index, torch.stack([loops, loops])]
        if pair_edges is not None:
            edges.append(pair_edges + n + 2 * m)
        h = self.model.embedder(torch.cat(rows), torch.cat(edges, 1))
        return h[:n], h[n:n + m], h[n + m:n + 2 * m], h[n + 2 * m:]

    def _classify(self, h: torch.Tensor, nbr: torch.Tensor, alpha: torch.Tensor, p_head, p_tail,
                  form: str = "prob") -> torch.Tensor:
        lp_head = self.model.head(h, nbr, p_head, self.p.s)
        lp_tail = self.model.tail(h, nbr, p_tail, self.p.s)
        return mix(lp_head, lp_tail, alpha, form)

    def _global_inputs(self, dg: GlobalSynthetic, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Customised D_g rows (Eq. 8: x̂ = x + γ[c](x̄ − x), x̄ over all of D_g) and each one's generated
        neighbour NG^c(x̂): [x̂ ; N_g] [2m, d] and the pair edges (i <-> m + i) [2, 2m]."""
        rows = torch.arange(dg.y.numel()) if rows is None else rows
        y = dg.y[rows]
        x = dg.x[rows] + self.gamma[y][:, None] * (dg.x.mean(0, keepdim=True) - dg.x[rows])
        with torch.no_grad():
            nbr = torch.empty_like(x)
            for c, gen in dg.generators.items():
                sel = y == c
                if bool(sel.any()):
                    nbr[sel] = gen(x[sel])
        m = x.shape[0]
        i = torch.arange(m)
        return torch.cat([x, nbr]), torch.stack([torch.cat([i, i + m]), torch.cat([i + m, i])])

    # --- local training ----------------------------------------------------------------------------
    def train_round(self, dg: GlobalSynthetic | None) -> None:
        """`local_epochs` epochs of minibatches: L_cls + β L_norm (+ L_g on D_g when received; the
        code's joint loss, A.12.9), Adam on φ_k and on X_head, X_tail; γ_k's curriculum. L_g reads all
        of D_g at every step (global_per_step=all, [C]) or each D_g node once per epoch, spread over the
        steps (share). `batches=ceil`: ⌈n/b⌉ minibatches per epoch (every training node); `floor`: the
        code's ⌊n/b⌋ (the last n mod b of the epoch's order unused). `optimizer_state=round`: fresh Adam
        states each round (the code builds its optimizers in each round's process). Dropout (and, with
        `generators=code`, the generators' dropout) draws from the client's own stream."""
        with self.own_rng():
            self._train_round(dg)

    def _train_round(self, dg: GlobalSynthetic | None) -> None:
        p, d = self.p, self.data
        if p.optimizer_state == "round":
            self._new_optimizers()
        self.model.train()
        alpha_all = gate(self.degree, p.tail_degree)
        for _ in range(p.local_epochs):
            order = self.train_idx[torch.randperm(self.n_train, generator=self.rng)]
            whole = self.n_train // p.batch_size if p.batches == "floor" else -(-self.n_train // p.batch_size)
            steps = max(1, whole)
            g_order = None if dg is None else torch.randperm(dg.y.numel(), generator=self.rng)
            for step in range(steps):
                batch = order[step * p.batch_size:(step + 1) * p.batch_size]
                if dg is None:
                    h, p_head, p_tail, _ = self._embed(d.x, d.edge_index, [])
                else:
                    g_rows = g_order if p.global_per_step == "all" else g_order[step::steps]
                    rows, pairs = self._global_inputs(dg, g_rows)
                    h, p_head, p_tail, h_g = self._embed(d.x, d.edge_index, [rows], pairs)
                nbr = neighbour_mean(h, d.edge_index, self.n)
                lp = self._classify(h[batch], nbr[batch], alpha_all[batch], p_head, p_tail, p.mixture)
                loss = F.nll_loss(lp, d.y[batch])
                loss = loss + p.beta * 0.5 * (self.x_head.norm() + self.x_tail.norm())
                if dg is not None and g_rows.numel():
                    m = g_rows.numel()
                    half = torch.full((m,), 0.5)
                    lp_g = self._classify(h_g[:m], h_g[m:], half, p_head, p_tail, p.mixture)
                    loss = loss + p.generalization_weight * F.nll_loss(lp_g, dg.y[g_rows])
                    if p.gamma_update == "batch":
                        self._step_gamma(lp_g.detach(), dg.y[g_rows], both_ways=True)
                self.opt.zero_grad()
                self.opt_syn.zero_grad()
                loss.backward()
                self.opt.step()
                self.opt_syn.step()
        if dg is not None and p.gamma_update == "round":
            self.model.eval()
            with torch.no_grad():
                rows, pairs = self._global_inputs(dg)
                _, p_head, p_tail, h_g = self._embed(d.x, d.edge_index, [rows], pairs)
                m = dg.y.numel()
                self._step_gamma(self._classify(h_g[:m], h_g[m:], torch.full((m,), 0.5), p_head, p_tail), dg.y,
                                 both_ways=False)

    def _step_gamma(self, lp: torch.Tensor, y: torch.Tensor, both_ways: bool) -> None:
        """γ[c] += step where the accuracy on D_g's class-c nodes exceeds the threshold; else −step
        (code, per minibatch) or unchanged (paper, per round); clipped to [0, 1]. Absent classes keep γ."""
        correct = (lp.argmax(1) == y).double()
        n = torch.bincount(y, minlength=self.C).double()
        acc = torch.bincount(y, weights=correct, minlength=self.C) / n.clamp(min=1)
        present = n > 0
        up = acc > self.p.gamma_threshold
        delta = torch.where(up, self.p.gamma_step, -self.p.gamma_step if both_ways else 0.0)
        self.gamma = torch.where(present, (self.gamma + delta).clamp(0, 1), self.gamma).float()

    def warmup(self) -> int:
        """[C]'s round-0 pretraining: φ_E + a local Linear head, cross-entropy, up to `warmup_epochs`,
        early-stopped on the validation nodes (never test; A.12.12). `warmup_form=full`: one full-batch
        step per epoch, the best epoch's φ_E kept; `code`: the code's ⌊n/batch_size⌋ minibatch steps per
        epoch (each re-embeds the graph), a tie counts as an improvement, the last epoch's φ_E kept (its
        best checkpoint is overwritten by round 0's upload). Returns epochs run. The head's
        initialisation, dropout and (code) minibatches draw from the client's own streams.
        `warmup_monitor=test`: the early stopping reads the test nodes instead, as the code does (its
        test labels then shape training: for comparison with the code only)."""
        with self.own_rng():
            return self._warmup()

    def _warmup_head(self) -> torch.nn.Linear:
        """The warm-up's Linear head D -> C: torch's initialisation (U(±1/√D)), or with warmup_head=code
        the code's own Linear, U(±1/√C) for weight and bias (embedder/Linear.py: 1/√out_features)."""
        head = torch.nn.Linear(self.p.embed_dim, self.C)
        if self.p.warmup_head == "code":
            bound = 1.0 / math.sqrt(self.C)
            for q in head.parameters():
                torch.nn.init.uniform_(q, -bound, bound)
        return head

    def _warmup(self) -> int:
        p, d = self.p, self.data
        code = p.warmup_form == "code"
        head = self._warmup_head()
        opt = torch.optim.Adam([*self.model.embedder.parameters(), *head.parameters()], lr=p.lr,
                               weight_decay=p.weight_decay)
        best, best_state, wait, epochs = -1.0, None, 0, 0
        for epochs in range(1, p.warmup_epochs + 1):
            self.model.train()
            if code:
                order = self.train_idx[torch.randperm(self.n_train, generator=self.rng)]
                batches = [order[i * p.batch_size:(i + 1) * p.batch_size]
                           for i in range(max(1, self.n_train // p.batch_size))]
            else:
                batches = [self.train_idx]
            for batch in batches:
                opt.zero_grad()
                out = head(self.model.embedder(d.x, d.edge_index))
                F.cross_entropy(out[batch], d.y[batch]).backward()
                opt.step()
            self.model.eval()
            with torch.no_grad():
                pred = head(self.model.embedder(d.x, d.edge_index)).argmax(1)
            watch = d.test_mask if p.warmup_monitor == "test" else d.val_mask
            acc = float((pred[watch] == d.y[watch]).double().mean()) if bool(watch.any()) else 0.0
            if acc > best or (code and acc == best):
                best, wait = acc, 0
                best_state = {k: v.clone() for k, v in self.model.embedder.state_dict().items()}
            else:
                wait += 1
                if wait >= p.warmup_patience:
                    break
        if best_state is not None and not code:
            self.model.embedder.load_state_dict(best_state)
        return epochs

    # --- evaluation --------------------------------------------------------------------------------
    @torch.no_grad()
    def predict(self, graph: Data | None = None, scored: torch.Tensor | None = None) -> torch.Tensor:
        """log p(c | v) of the nodes of `graph` (default: the client's own), eval mode, with the
        client's current φ_k and prototypes; degrees and neighbours from that graph. `scored` (bool
        [n]) limits the classifier to those rows; the others get the uniform log(1/C). [n, C]."""
        g = graph if graph is not None else self.data
        self.model.eval()
        n = int(g.num_nodes)
        h, p_head, p_tail, _ = self._embed(g.x, g.edge_index, [])
        nbr = neighbour_mean(h, g.edge_index, n)
        alpha = gate(in_degree(g.edge_index, n), self.p.tail_degree)
        out = torch.full((n, self.C), -math.log(self.C))
        idx = torch.arange(n) if scored is None else scored.nonzero().view(-1)
        for i in range(0, idx.numel(), EVAL_CHUNK):
            rows = idx[i:i + EVAL_CHUNK]
            out[rows] = self._classify(h[rows], nbr[rows], alpha[rows], p_head, p_tail)
        return out

    # --- uploads ------------------------------------------------------------------------------------
    def model_upload(self) -> dict:
        """{w·φ_k per tensor (float64), n: w}, w = |V_k^train| (weighting=train_nodes) or 1 (uniform)."""
        w = float(self.n_train) if self.p.weighting == "train_nodes" else 1.0
        out = {name: v.detach().double() * w for name, v in self.model.state_dict().items()}
        out["n"] = torch.tensor(w, dtype=torch.float64)
        return out

    def support_upload(self) -> dict:
        """{r: r_k [C] (float64), holders: 1[r_k^c > 0] [C] (int64)}: the class rates' sum (Eq. 7's
        denominator) and how many clients hold each class."""
        return {"r": self.class_rate.clone(), "holders": (self.class_rate > 0).long()}

    def synthetic_upload(self, shared: torch.Tensor) -> dict:
        """Eq. 7's numerator term: r_k^c · x_{k,head}^{(c,π(i))} for the shared classes (zeros for
        withheld ones), with an independent permutation π of the s rows within each class drawn
        here, on the client (A.4(b) 1: the code's server-side shuffle, moved client-side). [s·C, d]."""
        s = self.p.s
        perm = torch.cat([c * s + torch.randperm(s, generator=self.rng) for c in range(self.C)])
        rates = self.class_rate * shared.double()
        weights = rates.repeat_interleave(s)
        # r: Eq. 7's denominator term in the same sum, so that the server divides by the survivors' Σ r
        return {"x_head": self.x_head.detach().double()[perm] * weights[:, None], "r": rates.clone()}

    def set_model(self, state: dict) -> None:
        self.model.load_state_dict({k: v.to(torch.float32) for k, v in state.items()})


def initial_synthetic(num_classes: int, dim: int, p: FedLoGParams, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """X_head, X_tail [s·C, d], Xavier-uniform ([C]), the same on every client (a broadcast seed, A.12.6)."""
    g = torch.Generator().manual_seed(seed)
    bound = (6.0 / (p.s * num_classes + dim)) ** 0.5
    return tuple((torch.rand(p.s * num_classes, dim, generator=g) * 2 - 1) * bound for _ in range(2))


def generator_module(dim: int, p: FedLoGParams, flat: torch.Tensor) -> NeighbourGenerator:
    gen = new_generator(dim, p, 0)
    load_flat(gen, flat)
    gen.eval()
    for q in gen.parameters():
        q.requires_grad_(False)
    return gen
