"""`split-decoder`: node features decoded from FedGPL's downlink, M2 (embeddings H) or M4 (∂ℓ/∂x̃),
by a decoder trained on declared public data run through the server's trunk.

`message=m2`: H [B, h], one row per sample graph (the trunk's mean-pooled output); the decoder maps
a row to the direction of the sample's mean features (the mean of its kept real nodes' reduced
features). `message=m4`: ∂ℓ/∂x̃ [ñ, d], one row per M1 row; the decoder maps a row to that node's
feature direction. The attack reads only these messages (the server sent them; an observer of the
downlink alone sees the same), never M1 or M3.

Declared aux (`declare_aux`): a copy of the server's trunk (its own model; in training mode, as in
the split steps: dropout on); the run's public settings: prompt kind and ratios, batch size, the run
seed (which fixes the clients' common initial prompt θ^(0)) and the `--dp` spec when it noises split
messages; the population mean and the public reduced feature table (as `split-features`); and public
sample graphs with labels, the other clients' samples (never one of the target client's), up to
`graphs` of them. `public=others` gives them with their real features, `public=prior` with features
drawn from a Gaussian fitted to the public table's mean and covariance (no real node's row). A
node-disjoint public set does not exist in this sample construction: each client's samples cover
≈ 99 % of the graph's nodes (Cora, 9 clients: 2,685-2,693 of 2,708), so `others` shares nodes, not
samples, with the target.

Training pairs. The public graphs, in batches of the run's size, `passes` times, go through a prompt
of the run's kind: the client's trained prompt is unknown to the downlink, so each batch draws
a stand-in: θ^(0) moved by relative noise of up to `jitter` (`prompt=initial`), a fresh random
initialisation (`prompt=random`), or either with probability 1/2 (`prompt=mixed`, the default: with
lr 0.1 the prompt leaves θ^(0) within a round or two). Then the public `--dp` noise on every split
message it names (M1 before the trunk, M2 on H, M3, M4), and the trunk. M2 pairs: (H row, the
sample's mean kept features). M4 rows need an upstream gradient ∂ℓ/∂H, set by the client's head and
labels, which the downlink never carries: the attack fits a linear head to the public (H, label)
pairs (the client's head is linear and has the same task) and backpropagates each public sample's
cross-entropy through the trunk; pairs (∂ℓ/∂x̃ row, the row's clean features). A head-free
regression from M4 rows to features would still need such pairs, and they need some head. The
decoder is an MLP (one hidden layer of 128, LeakyReLU) trained by cosine loss on standardised inputs
(M4: the unit row and its log-norm), `steps` Adam steps on minibatches of 512.

Scores (split-features' scoring code). m2, per sample of the attacked round: |cosine| to the
sample's mean true features (`sample_cosine`), and re-identification of the sample among the round's
samples by that cosine (`sample_reid_top1`, `sample_reid_auc`; baselines 1/S, 0.5). m4, per row (up
to `rows`, seeded): |cosine| to the node's true features (`cosine`) and re-identification against the
public table (`reid_top1`, `reid_auc`; baselines 1/N, 0.5). Cosine baselines: the population mean,
and `*_aux`, the best constant answer from the aux alone (the mean direction of the training
targets). The constant can score high (samples share a direction; the prompt's selection shifts
it), so the re-identification AUCs are what shows information specific to a sample or a node. A
constant's sample AUC is 0.5; its node AUC against the table need not be (`reid_auc_aux`: the
scored nodes may sit closer to or further from its direction than the table's average node).
`public_cosine`: the decoder's cosine on held-out public pairs.

M2 and M4 are computed by the server from M1 and M3: from the server's side they are
post-processing and cannot tell more than M1 and M3 do (with M1 noised, a decoder on M2 cannot beat
the best attack on the noised M1; it may beat a particular one, e.g. one that does not shrink towards
the prior). The threat they add is an observer of the downlink alone.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attacks.base import Attack, Knowledge, NoInput, client_index
from attacks.split.split_features import SplitFeatures, _unit, sample_reid, sample_rows, score_rows, score_samples
from attacks.view import AdversaryView
from privfgl.federation import SERVER, client_name
from privfgl.methods.fedgpl.params import resolve_params
from privfgl.methods.fedgpl.prompt import make_prompt
from privfgl.methods.fedgpl.split import M1, M2, M3, M4
from privfgl.privacy.split_dp import clip_rows

MESSAGES = {"m2": (M2, "H"), "m4": (M4, "grad")}
PUBLIC = ("others", "prior")
PROMPTS = ("mixed", "initial", "random")


@dataclass(frozen=True)
class Noise:
    """The public `--dp` spec's noise on one split message: per-row clip (L1 Laplace, L2 Gaussian)."""
    mechanism: str
    clip: float
    scale: float   # Laplace b = C/ε, Gaussian std σC


@dataclass(frozen=True)
class DecoderAux:
    client: int
    message: str                        # "m2" | "m4"
    round: int
    rows: int
    seed: int
    prior_mean: torch.Tensor            # [d]
    dictionary: torch.Tensor            # [N, d]
    trunk: nn.Module                    # a copy of the server's trunk
    prompt: dict                        # make_prompt's keyword arguments (the run's public settings)
    prompt_seed: int | None             # the run's public seed of the initial prompt θ^(0); None: random prompts
    random_share: float                 # the share of batches with a random prompt (the rest: θ^(0) jittered)
    jitter: float                       # around θ^(0): relative noise up to this size per batch
    batch_size: int
    num_classes: int
    graphs: tuple                       # public graphs: (x [n, d], edge_index [2, e], y int)
    noise: dict                         # split message name -> Noise (the public --dp spec)
    passes: int
    steps: int


class SplitDecoder(Attack):
    name = "split-decoder"

    def __init__(self, message: str = "m2", public: str = "others", prompt: str = "mixed", jitter: float = 0.5,
                 round: int = -1, rows: int = 2000, graphs: int = 512, passes: int = 4, steps: int = 600,
                 clients: list[int] | None = None, seed: int = 0):
        for key, value, valid in (("message", message, MESSAGES), ("public", public, PUBLIC),
                                  ("prompt", prompt, PROMPTS)):
            if value not in valid:
                raise ValueError(f"{key}={value!r}; valid: {', '.join(valid)}")
        self.message, self.public, self.prompt, self.jitter = message, public, prompt, float(jitter)
        self.round, self.rows = round, rows
        self.graphs, self.passes, self.steps, self.clients, self.seed = graphs, passes, steps, clients, seed

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        return [f"client{k}" for k in (self.clients if self.clients is not None else range(num_clients))]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> DecoderAux:
        k = client_index(target)
        if knowledge.method != "fedgpl":
            raise NoInput(f"split-decoder reads FedGPL's split messages, not {knowledge.method}'s")
        table = setup.extras["population_features"].double().clone()
        p = resolve_params(setup.method.params)
        prompt = {"kind": p.prompt, "dim": p.dim, "node_ratio": p.node_ratio, "edge_ratio": p.edge_ratio,
                  "candidates": p.candidates, "gamma": p.gamma, "tokens": p.tokens}
        trunk = copy.deepcopy(setup.extras["fedgpl_trunk"]).train()
        pool = [g for j, s in enumerate(setup.extras["fedgpl_samples"]) if j != k for g in zip(s.graphs, s.y.tolist())]
        gen = torch.Generator().manual_seed(self.seed)
        if len(pool) > self.graphs:
            pool = [pool[i] for i in torch.randperm(len(pool), generator=gen)[:self.graphs].tolist()]
        if self.public == "prior":
            mean, cov = table.mean(0), torch.cov(table.T)
            chol = torch.linalg.cholesky(cov + 1e-6 * cov.diagonal().mean() * torch.eye(len(mean), dtype=cov.dtype))
            draw = lambda n: (mean + torch.randn(n, len(mean), generator=gen, dtype=cov.dtype) @ chol.T).float()
            graphs = tuple((draw(g.x.shape[0]), g.edge_index.clone(), y) for g, y in pool)
        else:
            graphs = tuple((g.x.clone(), g.edge_index.clone(), y) for g, y in pool)
        spec = setup.extras.get("split_dp_spec")
        noise = {}
        if spec is not None:
            scale = spec.clip * spec.sigma if spec.mechanism == "gaussian" else spec.clip / spec.epsilon
            noise = {name: Noise(spec.mechanism, spec.clip, scale) for name in spec.messages}
        prompt_seed = setup.method.seed if self.prompt != "random" else None  # public: the run's seed
        random_share = {"mixed": 0.5, "initial": 0.0, "random": 1.0}[self.prompt]
        return DecoderAux(k, self.message, self.round, self.rows, self.seed, table.mean(0), table, trunk, prompt,
                          prompt_seed, random_share, self.jitter, p.batch_size, knowledge.num_classes, graphs, noise,
                          self.passes, self.steps)

    def attack(self, view: AdversaryView, aux: DecoderAux) -> dict:
        name, key = MESSAGES[aux.message]
        r, rows = downlink_rows(view, aux.client, name, key, aux.round)
        with torch.random.fork_rng():
            torch.manual_seed(aux.seed)
            gen = torch.Generator().manual_seed(aux.seed)
            inputs, targets = simulate(aux, gen)
            decoder, public_cos = train_decoder(inputs, targets, aux.steps, gen)
        guess = _unit(_unit(targets.double()).mean(0))  # the best constant answer: the aux alone, no message
        if aux.message == "m2":
            with torch.no_grad():
                decoded = _unit(decoder(features_of(rows, "m2")).double())
            return {"round": r, "message": "m2", "sample_features": decoded, "public_cosine": public_cos,
                    "aux_guess": guess}
        chosen = sample_rows(len(rows), aux.rows, aux.seed)
        with torch.no_grad():
            decoded = _unit(decoder(features_of(rows[chosen], "m4")).double())
        return {"round": r, "message": "m4", "rows": chosen, "features": decoded, "public_cosine": public_cos,
                "similarity": (decoded @ _unit(aux.dictionary).T).abs(), "aux_guess": guess}

    def truth(self, setup, target: str) -> dict:
        k = client_index(target)
        out = SplitFeatures().truth(setup, target)
        if self.message == "m2":  # auditor side: each M1 row's sample (M1's batch vector, from the transcript)
            for r, entry in out.items():
                sent = [m for m in setup.federation.transcript.view(SERVER, name=M1, round=r)
                        if m.sender == client_name(k) and m.tensors is not None]
                offsets = torch.tensor([0] + [int(m.tensors["batch"].max()) + 1 for m in sent[:-1]]).cumsum(0)
                entry["samples"] = torch.cat([m.tensors["batch"] + o for m, o in zip(sent, offsets)]) if sent else None
        return out

    def score(self, rec: dict, truth: dict, aux: DecoderAux) -> tuple[dict, dict]:
        true = truth[rec["round"]]
        head = {"round": rec["round"], "message": rec["message"], "public_cosine": rec["public_cosine"]}
        if rec["message"] == "m2":
            if true.get("samples") is None:
                raise ValueError(f"split-decoder: no M1 batch vector for client{aux.client} in round {rec['round']}")
            cos, base = score_samples(rec["sample_features"], true["features"], true["samples"], aux.prior_mean)
            guess = rec["aux_guess"].expand_as(rec["sample_features"])
            aux_cos, _ = score_samples(guess, true["features"], true["samples"], aux.prior_mean)
            top1, auc, n = sample_reid(rec["sample_features"], true["features"], true["samples"])
            return ({**head, "samples_scored": n, "sample_cosine": cos, "sample_reid_top1": top1,
                     "sample_reid_auc": auc},
                    {"sample_cosine": base, "kind": "the population mean feature vector", "sample_cosine_aux": aux_cos,
                     "sample_reid_top1": 1.0 / n, "sample_reid_auc": 0.5})
        ids = true["node_ids"][rec["rows"]] if true["node_ids"] is not None else None
        rows = true["features"][rec["rows"]]
        metrics, baseline = score_rows(rec["features"], rows, aux.prior_mean, rec["similarity"], ids)
        guess = rec["aux_guess"].expand_as(rec["features"])
        constant, _ = score_rows(guess, rows, aux.prior_mean, (guess @ _unit(aux.dictionary).T).abs(), ids)
        return {**head, **metrics}, {**baseline, **{f"{k}_aux": constant[k] for k in ("cosine", "reid_auc")
                                                   if k in constant}}


def downlink_rows(view: AdversaryView, k: int, name: str, key: str, round: int) -> tuple[int, torch.Tensor]:
    """(the round attacked, every row of `name` the server sent client k in it, in order); round -1: the last."""
    sent = [m for m in view.messages if m.name == name and m.receiver == client_name(k) and m.tensors is not None]
    if not sent:
        raise NoInput(f"no plaintext {name} to client{k} in the {view.party}'s view")
    r = max(m.round for m in sent) if round < 0 else round
    this = [m for m in sent if m.round == r]
    if not this:
        raise NoInput(f"no {name} to client{k} in round {r}")
    return r, torch.cat([m.tensors[key] for m in this]).float()


def features_of(rows: torch.Tensor, message: str) -> torch.Tensor:
    """A message's rows as the decoder's input: M2 as is, M4 as the unit row and its log-norm (the
    gradient's scale follows the sample's loss, its direction the node)."""
    if message == "m2":
        return rows.float()
    norm = rows.norm(dim=1, keepdim=True)
    return torch.cat([rows / norm.clamp_min(1e-12), norm.clamp_min(1e-12).log()], dim=1).float()


def _noised(rows: torch.Tensor, noise: Noise | None, gen: torch.Generator) -> torch.Tensor:
    """What the sender of a DP-protected message sends, simulated on public rows (else the rows)."""
    if noise is None:
        return rows
    norm = 1 if noise.mechanism == "laplace" else 2
    clipped = clip_rows(rows.detach(), noise.clip, norm).to(rows.dtype)
    if noise.mechanism == "laplace":
        e = torch.empty(2, *rows.shape, dtype=rows.dtype).exponential_(generator=gen)
        return clipped + noise.scale * (e[0] - e[1])
    return clipped + noise.scale * torch.randn(rows.shape, generator=gen, dtype=rows.dtype)


def _batches(aux: DecoderAux, gen: torch.Generator):
    """The public graphs in shuffled batches of the run's size, `passes` times: (x, edge_index, batch, y, B)."""
    for _ in range(aux.passes):
        order = torch.randperm(len(aux.graphs), generator=gen).tolist()
        for start in range(0, len(order), aux.batch_size):
            chosen = [aux.graphs[i] for i in order[start:start + aux.batch_size]]
            sizes = [x.shape[0] for x, _, _ in chosen]
            offsets = torch.tensor([0] + sizes[:-1]).cumsum(0)
            yield (torch.cat([x for x, _, _ in chosen]),
                   torch.cat([e + o for (_, e, _), o in zip(chosen, offsets)], dim=1),
                   torch.arange(len(chosen)).repeat_interleave(torch.tensor(sizes)),
                   torch.tensor([y for _, _, y in chosen]), len(chosen))


def _prompt(aux: DecoderAux, kind: str, dim: int, settings: dict, x_std: float, gen: torch.Generator) -> nn.Module:
    """A stand-in for the client's prompt: the initial θ^(0) with every parameter moved by relative noise of a
    size drawn from [0, jitter] (prompt=initial), a fresh random initialisation (prompt=random), or either
    with probability 1/2 (prompt=mixed)."""
    random = aux.prompt_seed is None or float(torch.rand(1, generator=gen)) < aux.random_share
    seed = int(torch.randint(2 ** 31 - 1, (1,), generator=gen)) if random else aux.prompt_seed
    prompt = make_prompt(kind, dim, seed, **settings)
    size = 1.0 if random else aux.jitter * float(torch.rand(1, generator=gen))
    with torch.no_grad():
        for q in prompt.parameters():
            rms = float(q.pow(2).mean().sqrt()) if q.numel() else 0.0
            scale = rms if rms > 0 else x_std / 4  # GPF starts at p = 0: a shift of a quarter feature std
            if random and rms > 0:
                continue  # a fresh initialisation is already random
            q.add_(size * scale * torch.randn(q.shape, generator=gen))
    return prompt


def simulate(aux: DecoderAux, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Training pairs (decoder input, target features) from the public graphs through a stand-in prompt,
    the public noise and the trunk (training mode, as the server runs it)."""
    kind = aux.prompt["kind"]
    settings = {k: v for k, v in aux.prompt.items() if k != "kind"}
    dim = settings.pop("dim")
    noise = aux.noise.get
    records = []  # (x̃ [ñ, d] as sent in M1, its edges, batch vector, labels [B], B, its rows' clean features)
    for x, edges, batch, y, B in _batches(aux, gen):
        prompt = _prompt(aux, kind, dim, settings, float(x.std()), gen)
        with torch.no_grad():
            x_p, e_p, b_p = prompt(x, edges, batch, B)
        rows = prompt.last_rows
        clean = torch.where((rows >= 0).unsqueeze(1), x[rows.clamp_min(0)], 0.0)
        sent = _noised(x_p, noise(M1), gen)
        records.append((sent, e_p, b_p, y, B, clean))
    if aux.message == "m2":
        inputs, targets = [], []
        with torch.no_grad():
            for sent, e_p, b_p, y, B, clean in records:
                h = _noised(aux.trunk(sent, e_p, b_p, B), noise(M2), gen)
                real = clean.norm(dim=1) > 0
                sums = torch.zeros(B, clean.shape[1]).index_add_(0, b_p[real], clean[real])
                inputs.append(features_of(h, "m2"))
                targets.append(sums)
        inputs, targets = torch.cat(inputs), torch.cat(targets)
        keep = targets.norm(dim=1) > 0
        return inputs[keep], targets[keep]
    head = _fit_head(aux, records, gen)
    inputs, targets = [], []
    for sent, e_p, b_p, y, B, clean in records:
        x_s = sent.detach().requires_grad_(True)
        h = aux.trunk(x_s, e_p, b_p, B)
        h_c = _noised(h.detach(), noise(M2), gen).requires_grad_(True)
        g_h, = torch.autograd.grad(F.cross_entropy(head(h_c), y, reduction="sum"), h_c)
        g_x, = torch.autograd.grad(h, x_s, _noised(g_h, noise(M3), gen))
        g_x = _noised(g_x, noise(M4), gen)
        real = clean.norm(dim=1) > 0
        inputs.append(features_of(g_x[real], "m4"))
        targets.append(clean[real])
    return torch.cat(inputs), torch.cat(targets)


def _fit_head(aux: DecoderAux, records: list, gen: torch.Generator, steps: int = 200) -> nn.Module:
    """A linear head fitted to the public (H, label) pairs: the stand-in for the client's head."""
    with torch.no_grad():
        h = torch.cat([_noised(aux.trunk(s, e, b, B), aux.noise.get(M2), gen) for s, e, b, _, B, _ in records])
    y = torch.cat([r[3] for r in records])
    head = nn.Linear(h.shape[1], aux.num_classes)
    opt = torch.optim.Adam(head.parameters(), lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(head(h), y).backward()
        opt.step()
    return head.requires_grad_(False)


class Decoder(nn.Module):
    """Standardise, then an MLP with one hidden layer."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, out: int, hidden: int = 128):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.net = nn.Sequential(nn.Linear(len(mean), hidden), nn.LeakyReLU(), nn.Linear(hidden, out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.std)


def train_decoder(inputs: torch.Tensor, targets: torch.Tensor, steps: int, gen: torch.Generator,
                  batch: int = 512, every: int = 25) -> tuple[Decoder, float]:
    """The decoder, trained by cosine loss on 90 % of the pairs, stopped at the step (of every `every`)
    with the best mean cosine on the other 10 % (noised pairs overfit); that cosine."""
    if len(inputs) < 10:
        raise NoInput(f"split-decoder: only {len(inputs)} public training pairs")
    order = torch.randperm(len(inputs), generator=gen)
    held = order[:max(1, len(order) // 10)]
    train = order[len(held):]
    x, t = inputs[train], targets[train]
    decoder = Decoder(x.mean(0), x.std(0).clamp_min(1e-6), targets.shape[1])
    opt = torch.optim.Adam(decoder.parameters(), lr=3e-3, weight_decay=1e-5)

    def held_out() -> float:
        with torch.no_grad():
            return float(F.cosine_similarity(decoder(inputs[held]), targets[held], dim=1).mean())

    best, best_state = -2.0, None
    for step in range(1, steps + 1):
        idx = torch.randint(len(x), (min(batch, len(x)),), generator=gen)
        opt.zero_grad()
        (1 - F.cosine_similarity(decoder(x[idx]), t[idx], dim=1)).mean().backward()
        opt.step()
        if step % every == 0 or step == steps:
            score = held_out()
            if score > best:
                best, best_state = score, copy.deepcopy(decoder.state_dict())
    decoder.load_state_dict(best_state)
    with torch.no_grad():
        public = F.cosine_similarity(decoder(inputs[held]), targets[held], dim=1).abs().mean()
    return decoder.requires_grad_(False), float(public)
