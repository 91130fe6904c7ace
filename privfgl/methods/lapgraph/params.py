"""LapGraph's settings (`--method-param KEY=VALUE`), defaults and validation.

    epsilon      the whole run's ε (default 8): pure ε-DP, δ = 0, for one undirected edge of a client's graph
    count_share  the share of ε spent on the edge count (default 0.01, the authors' `eps_1 = 0.01·ε` in
                 LinkTeller's worker.py); the entries get the rest: ε = ε_entries + ε_count
    rank         k > 0: rank-k SVD truncation of the noisy matrix before the selection (the Eclipse-style
                 low-rank variant, post-processing; docs/eclipse.md); 0 (default): off
    select       which noisy entries become edges (post-processing): top (default, the authors'): the T̃
                 largest; map: each entry whose posterior probability of being an edge is >= 1/2, under the
                 Laplace likelihood and the prior T̃/m (release.py `map_keep`; not with rank > 0)
    seed         os (default: OS entropy) or an integer (reproducible noise; the record warns)
    max_nodes    the largest client (nodes) whose dense n×n float64 matrix is built (default 10000: 800 MB)
The run's --model, --hidden, --layers, --dropout, --lr, --weight-decay, --optimizer, --local-epochs and
--rounds apply to the FedAvg training on the released graphs.
"""
from __future__ import annotations

from dataclasses import dataclass

from privfgl.methods.params import bad_param, resolve
from privfgl.privacy.noise import OS

SELECTIONS = ("top", "map")


@dataclass(frozen=True)
class LapGraphParams:
    epsilon: float = 8.0
    count_share: float = 0.01
    rank: int = 0
    select: str = "top"
    seed: str = OS
    max_nodes: int = 10000

    @property
    def epsilon_count(self) -> float:
        """ε of the Laplace edge count (L1 sensitivity 1)."""
        return self.epsilon * self.count_share

    @property
    def epsilon_entries(self) -> float:
        """ε of the Laplace upper triangle (L1 sensitivity 1): the rest of ε."""
        return self.epsilon - self.epsilon_count

    @property
    def noise_seed(self) -> int | str:
        """The NoiseSource setting: "os" or the integer seed."""
        return OS if self.seed == OS else int(self.seed)


def _check(p: LapGraphParams) -> None:
    if not p.epsilon > 0:
        raise bad_param("lapgraph", "epsilon", p.epsilon, "a number > 0")
    if not 0 < p.count_share < 1:
        raise bad_param("lapgraph", "count_share", p.count_share, "a number in (0, 1)")
    if p.rank < 0:
        raise bad_param("lapgraph", "rank", p.rank, "an integer >= 0 (0: no truncation)")
    if p.select not in SELECTIONS:
        raise bad_param("lapgraph", "select", p.select, " or ".join(SELECTIONS))
    if p.select == "map" and p.rank > 0:
        raise bad_param("lapgraph", "select", p.select, "top with rank > 0 (the posterior needs the Laplace "
                        "likelihood of the untruncated entries)")
    if p.max_nodes < 2:
        raise bad_param("lapgraph", "max_nodes", p.max_nodes, "an integer >= 2")
    if p.seed != OS:
        try:
            int(p.seed)
        except ValueError:
            raise bad_param("lapgraph", "seed", p.seed, f"{OS} or an integer") from None


def resolve_params(method_params: dict) -> LapGraphParams:
    """LapGraphParams from `--method-param` settings; ValueError names a bad or unknown key."""
    given = dict(method_params)
    if "seed" in given and not isinstance(given["seed"], str):
        if isinstance(given["seed"], bool) or not isinstance(given["seed"], int):
            raise bad_param("lapgraph", "seed", given["seed"], f"{OS} or an integer")
        given["seed"] = str(given["seed"])
    return resolve("lapgraph", LapGraphParams, given, {}, _check)
