"""Gradient inversion of the default training from the exact zeros of Adam's first-layer update
(`gradient-inversion:variant=support`).

The training privfgl runs by default (FedAvg, Adam from a fresh state, `local_epochs` full-batch
steps, dropout on the hidden units, weight decay) leaves no gradient magnitude in the upload: Adam's
steps are ratios of gradients. What it leaves exactly is where the first layer did *not* move. Word
j's column of the first-layer weight (W [hidden, f], PyG's layout) gets at step t the gradient

    g_t[:, j] = Σ_i X_ij · M_i^t + wd · w_t[:, j],   M_i^t = (Âᵀ ∂L/∂Z₁)_i   [hidden],

and M_i^t[h] = 0 whenever unit h is switched off (ReLU, or dropout at every step) at every node
near node i. Where every holder of word j has M_i^t[h] = 0 at every step, the column follows the
weight-decay-only path exactly, which the server computes from the global model it broadcast
(attacks.uploads.multistep_inversion.decay_only_path). So per word the set of units it moved on,

    moved_j = ∪_{i holds j} support_i,     support_i = {h : M_i^t[h] ≠ 0 for some t},

is read exactly off the upload (up to float32), and:
- words held by one node only move on exactly that node's support (equal moved sets: binary
  features, Adam's per-unit path depends on M_i alone up to the decay term); groups of ≥ 2 words with
  one moved set are *atoms*, one node each; a word whose moved set is not covered by the atoms whose
  supports it contains becomes an atom too (a node with a single own word), smallest first;
- node i can hold word j only if support_i ⊆ moved_j: atom a scores word j by its conflicts
  c = |support_a \\ moved_j| (0.5·[c = 0] + 0.5·e^{−c}), times e^{−μ·d} with d the mean distance, in
  units of 6·lr, between word j's off-decay movement and the atom's on the atom's support: on the
  units only node a drives, a word of node a moves like the atom (`value_weight` μ).
- Labels: M_i ∝ W₂ᵀ(p − y) on the active units, and the first step moves by −lr·sign(g), so the
  atom's signs on its support agree with sign(W₂ᵀ(e_c − p)) for its class c (p taken uniform: the
  round-0 model predicts about 1/C).

Graph-free and unordered (one row per atom, scored after matching the rows to the client's nodes,
attacks.uploads.metrics.unordered_scores). Applies where the decay-only path is known and the zeros are
exact: FedAvg's n-weighted models and DP-FedAvg's clipped deltas (one unknown scale, read off the
columns that followed the decay-only path: `unclip_delta`; so central DP, which noises only the
sum, leaves every client's upload open to this attack), Adam or SGD in any round, no DP noise on
the upload. On the
revealed aggregate the moved sets are unions over every client's holders (scored per client).
Later rounds under Adam: privfgl keeps each client's Adam and every client trains every round from
the broadcast model, so a coordinate with a zero gradient at every step so far followed the
decay-only path through all those rounds, which the server computes from its own broadcasts; a
word's moved set is then the union of its holders' supports over the rounds so far.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch

from attacks.base import Knowledge, NoInput
from attacks.uploads.multistep_inversion import decay_only_path, receptive_vocabulary

METHODS = ("fedavg", "dp-fedavg")  # local training = privfgl.training's, no term that moves every column
MOVED_TOL = 1e-5     # |off-decay movement| / lr above which a unit moved (float32 rounding: ~1e-6)
SCALE_TOL = 1e-6     # relative: columns on the decay-only path agree on one clip scale to float rounding
VALUE_WEIGHT = 3.0   # μ; chosen on Cora K = 20 clients 0-7 (seed 0), checked on clients 8-19 and K = 10
VALUE_SCALE = 6.0    # the off-decay movement of one unit spans at most 2·local_epochs (3 steps) lr


def check_applicable(k: Knowledge) -> None:
    """NoInput unless the first layer's exact zeros can be read: a GCN under FedAvg or DP-FedAvg (its
    clipped delta, unclipped by unclip_delta), no DP noise on the upload. Any round: under Adam the
    decay-only path runs through the client's earlier rounds (decay_only_path's `earlier`)."""
    if k.model != "gcn" or k.method not in METHODS:
        raise NoInput(f"support reads a GCN's {' or '.join(METHODS)} upload (got {k.model}, {k.method}; "
                      "FedProx's proximal term moves every column off the decay-only path)")
    if "model_update" in k.noised_messages:
        raise NoInput("the upload carries DP noise: no exact zeros to read")


def off_decay_movement(before: dict[str, torch.Tensor], delta: dict[str, torch.Tensor], k: Knowledge,
                       earlier: Sequence[torch.Tensor] = ()) -> np.ndarray:
    """[f, hidden]: the first layer's change minus its weight-decay-only path, in units of lr.
    `earlier`: the first-layer weight at the start of each earlier round (Adam's state carries over)."""
    w0 = before["convs.0.lin.weight"].double()
    return ((delta["convs.0.lin.weight"].double() - decay_only_path(w0, k, earlier)) / k.lr).T.numpy()


def unclip_delta(before: dict[str, torch.Tensor], delta: dict[str, torch.Tensor], k: Knowledge,
                 earlier: Sequence[torch.Tensor] = ()) -> dict[str, torch.Tensor]:
    """DP-FedAvg's upload c·Δ (one factor c ≤ 1 for the whole message, ‖Δ‖ clipped to C) back to Δ: the
    first-layer columns no node near a training node holds moved by the decay-only path D_j, so
    c·D_j; c is the ratio most columns share (to SCALE_TOL). NoInput for an all-zero upload (a client
    not sampled) or when no columns share a ratio (noise)."""
    d = delta["convs.0.lin.weight"].double()
    path = decay_only_path(before["convs.0.lin.weight"].double(), k, earlier)
    ratio = ((d * path).sum(0) / (path * path).sum(0).clamp(min=1e-300)).numpy()
    order = np.sort(ratio)
    ends = np.searchsorted(order, order + SCALE_TOL * np.abs(order), side="right")
    low = order[int(np.argmax(ends - np.arange(order.size)))]  # the start of the most crowded window
    shared = (ratio >= low) & (ratio <= low * (1 + SCALE_TOL))
    if low <= 0 or shared.mean() < 0.1:
        raise NoInput("the upload is zero (a client not sampled) or no columns share one clip scale (noise)")
    keep = torch.from_numpy(shared)
    c = float((d[:, keep] * path[:, keep]).sum() / (path[:, keep] ** 2).sum())
    return {name: v / c for name, v in delta.items()}


def support_atoms(moved: np.ndarray, words: np.ndarray) -> list[tuple[np.ndarray, list[int]]]:
    """Atoms (support [hidden] bool, their words) from moved [f, hidden] over the candidate `words`:
    groups of ≥ 2 words with one moved set, then single words whose moved set the atoms contained
    in it do not cover, by ascending size."""
    groups: dict[bytes, list[int]] = defaultdict(list)
    for j in words:
        if moved[j].any():
            groups[moved[j].tobytes()].append(int(j))
    atoms = [(moved[js[0]].copy(), js) for js in groups.values() if len(js) >= 2]
    singles = sorted((js for js in groups.values() if len(js) == 1), key=lambda js: int(moved[js[0]].sum()))
    for js in singles:
        m = moved[js[0]]
        covered = np.zeros_like(m)
        for support, _ in atoms:
            if not (support & ~m).any():
                covered |= support
        if (m & ~covered).any():
            atoms.append((m.copy(), js))
    return atoms


def atom_rows(movement: np.ndarray, moved: np.ndarray, words: np.ndarray,
              atoms: list[tuple[np.ndarray, list[int]]], value_weight: float = VALUE_WEIGHT) -> np.ndarray:
    """Feature scores [r, f] in [0, 1], one row per atom: its own words 1, every other candidate word
    by support conflicts and movement distance (module docstring), words outside `words` 0."""
    rows = np.zeros((len(atoms), movement.shape[0]))
    mv, cand = moved[words], movement[words]
    for a, (support, own) in enumerate(atoms):
        conflicts = (~mv & support[None]).sum(1)
        score = 0.5 * (conflicts == 0) + 0.5 * np.exp(-conflicts)
        if value_weight:
            centre = movement[own].mean(0)
            distance = np.abs(cand[:, support] - centre[support][None]).mean(1) / VALUE_SCALE
            score = score * np.exp(-value_weight * distance)
        rows[a, words] = score
        rows[a, own] = 1.0
    return rows


def atom_labels(movement: np.ndarray, atoms: list[tuple[np.ndarray, list[int]]], w2: torch.Tensor) -> torch.Tensor:
    """Labels [r]: the class c whose direction sign(W₂ᵀ(e_c − 1/C)) [hidden] agrees best with the atom's
    movement signs on its support. w2: the last layer's weight [C, hidden]."""
    if not atoms:
        return torch.zeros(0, dtype=torch.long)
    c = w2.shape[0]
    directions = np.sign((np.eye(c) - 1.0 / c) @ w2.double().numpy())  # [C, hidden]
    signs = np.stack([np.sign(movement[own].mean(0)) * support for support, own in atoms])  # [r, hidden]
    return torch.from_numpy(np.argmax(signs @ directions.T, axis=1))


def _unclipped_movement(before: dict[str, torch.Tensor], delta: dict[str, torch.Tensor], k: Knowledge,
                        earlier: Sequence[torch.Tensor]) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """The update as trained (DP-FedAvg's clipped delta unclipped) and its off_decay_movement [f, hidden]."""
    if k.method == "dp-fedavg":
        delta = unclip_delta(before, delta, k, earlier)
    return delta, off_decay_movement(before, delta, k, earlier)


def moved_units(before: dict[str, torch.Tensor], delta: dict[str, torch.Tensor], k: Knowledge,
                earlier: Sequence[torch.Tensor] = ()) -> np.ndarray:
    """[f, hidden] bool: the units each word's first-layer column moved on off the decay-only path
    (DP-FedAvg's clipped delta unclipped first)."""
    return np.abs(_unclipped_movement(before, delta, k, earlier)[1]) > MOVED_TOL


def node_supports(moved: np.ndarray, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """With the features x [n, f] known (binary): every node's support bounded from above by the
    units all its words moved on (support_i ⊆ moved_j for each word j it holds; equal for a node
    holding a word no other node holds). Returns (supports [n, hidden] bool, covered [n] bool: the
    node holds a word that moved at all)."""
    words = moved.any(1)
    holds = (x > 0).numpy() & words[None]
    supports = np.ones((x.shape[0], moved.shape[1]), dtype=bool)
    for i in np.nonzero(holds.any(1))[0]:
        supports[i] = np.logical_and.reduce(moved[holds[i]], axis=0)
    return supports, holds.any(1)


def support_jaccard(supports: np.ndarray) -> np.ndarray:
    """[n, n] Jaccard similarity of the nodes' supports: adjacent nodes share the units their common
    neighbourhood switches on (Cora K = 20: edge AUC 0.83 alone, docs/attacks-graph.md)."""
    s = supports.astype(float)
    inter = s @ s.T
    union = s.sum(1)[:, None] + s.sum(1)[None] - inter
    return inter / np.maximum(union, 1.0)


def support_dictionary(before: dict[str, torch.Tensor], delta: dict[str, torch.Tensor], k: Knowledge,
                       earlier: Sequence[torch.Tensor] = (), value_weight: float = VALUE_WEIGHT
                       ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The `support` variant: unordered feature rows [r, f] in [0, 1] and labels [r] (2-layer GCN,
    else None), one per atom. Candidate words: the receptive field's vocabulary."""
    delta, movement = _unclipped_movement(before, delta, k, earlier)
    moved = np.abs(movement) > MOVED_TOL
    words = receptive_vocabulary(before, delta, k, earlier=earlier).nonzero().view(-1).numpy()
    atoms = support_atoms(moved, words)
    rows = atom_rows(movement, moved, words, atoms, value_weight)
    labels = atom_labels(movement, atoms, before["convs.1.lin.weight"]) if k.layers == 2 else None
    return torch.from_numpy(rows).float(), labels
