"""DP-FedAvg at user (client) level (McMahan et al. 2018, "Learning differentially private
recurrent language models"), with the client as the privacy unit.

Per round: every client is sampled independently with probability q; sampled clients train
`local_epochs` from the global model w and upload their model delta Δ_k = w_k − w, the others
upload zeros. The coins come from OS entropy unless `sampling_seed=N` asks for reproducible ones
(then anyone who reads the run record can replay them). The federation's message DP
(`--dp gaussian:...,on=update`) clips every upload to ||Δ_k||₂ ≤ C on the client, and adds
N(0, (σC)²) to the sum — once on the server (mode=central), as K client shares under a secure
protocol (mode=distributed), or on every upload (mode=local). The server applies
w ← w + η · (Σ_k Δ_k + noise) / (qK), a fixed denominator, so one client changes the update by at
most ηC/(qK). Every round is one Gaussian release composed by opacus' RDP (or PRV) accountant into
ε at the spec's δ.

Amplification by sampling (the release accounted at rate q) needs the sample to be secret. Under a
secure protocol (crypten, ckks, bfv: any protocol but plain) the server sees only the sum, inside
which the unsampled clients' zeros are hidden: rounds are accounted at q. Under `plain` the server
sees every upload and so who took part (attacks/protocols/participation.py recovers it): rounds are accounted
at q = 1, and the record's `amplification` says why. The truth of who took part is kept in
`setup.extras["sampled_clients"]` for the auditor (never in the server's view).

Dropout (`--protocol secagg` with `dropout`, or the runtime's participation mask): the sum holds the
deltas of the survivors S only, and the denominator is q·|S| (q·K without dropout): the unbiased mean
over S, a function of who answered (public to the server), not of the data, so the release (the noised
sum) and its accounting are unchanged. Under mode=distributed each dropped client's 1/(K − c) share of
the noise variance is missing from the sum: ε as accounted does not hold for those rounds, and the record's
`dp.dropout` lists them (never folded into ε). Dropout is not a secret sample: the server knows who
dropped, so it adds no amplification.

Server momentum (β = `server_momentum`, DP-FedAvgM, McMahan et al. 2018; Reddi et al. 2021): the
server keeps v ← β·v + (noised sum)/(q·|S|) and steps w ← w + η·v. It reads only the released noised
sums, so it is post-processing and costs no ε; β = 0 (the default) is the plain step above.

Method params: q (client sampling rate, default 1.0), server_lr (η, default 1.0), server_momentum (β in
[0, 1), default 0), sampling_seed ("os", the default, or an integer for reproducible coins).
"""
from __future__ import annotations

from privfgl.errors import ConfigError
from privfgl.methods.base import Setup
from privfgl.methods.fedavg import run_rounds
from privfgl.privacy.message_dp import MessageDP
from privfgl.privacy.noise import OS, NoiseSource
from privfgl.training import Params

PARAMS = {"q": 1.0, "server_lr": 1.0, "server_momentum": 0.0, "sampling_seed": OS}
NO_AMPLIFICATION = "none: under plain the server sees each upload, so which clients took part (non-zero) is not secret"


def dp_fedavg_params(params: dict) -> dict:
    """Method params with defaults; raises ConfigError on unknown keys or bad values."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise ConfigError(f"dp-fedavg: unknown method param(s) {', '.join(unknown)}; valid: {', '.join(PARAMS)}")
    out = {**PARAMS, **params}
    for key in ("q", "server_lr", "server_momentum"):
        try:
            out[key] = float(out[key])
        except (TypeError, ValueError):
            raise ConfigError(f"dp-fedavg: {key} must be a number, got {out[key]!r}") from None
    if not 0 < out["q"] <= 1:
        raise ConfigError(f"dp-fedavg: q must be in (0, 1], got {out['q']}")
    if not out["server_lr"] > 0:
        raise ConfigError(f"dp-fedavg: server_lr must be > 0, got {out['server_lr']}")
    if not 0 <= out["server_momentum"] < 1:
        raise ConfigError(f"dp-fedavg: server_momentum must be in [0, 1), got {out['server_momentum']}")
    seed = out["sampling_seed"]
    if seed != OS and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"dp-fedavg: sampling_seed must be 'os' (the default) or an integer, got {seed!r}")
    return out


def accounted_sample_rate(q: float, protocol: str) -> tuple[float, str]:
    """(the sampling rate a round is accounted at, why): q under a secure protocol, 1 under plain."""
    if q == 1.0:
        return 1.0, "none: q = 1 (every client takes part in every round)"
    if protocol == "plain":
        return 1.0, NO_AMPLIFICATION
    return q, (f"by sampling at q={q}: under {protocol} the server sees only the sum, in which the unsampled "
               "clients' zeros are hidden")


class ServerMomentum:
    """The server's step from each round's released noised sum of deltas (a dict of tensors):
    v ← β·v + sum/denominator, then w ← w + η·v. Post-processing: it reads nothing but the sums."""

    def __init__(self, lr: float, beta: float):
        self.lr, self.beta = lr, beta
        self.velocity: Params = {}

    def step(self, sums: Params, denominator: float, received: Params) -> Params:
        """The new global model (dtypes of `received`) from the noised sums divided by `denominator`."""
        for n in received:
            mean = sums[n].double() / denominator
            self.velocity[n] = self.beta * self.velocity[n] + mean if n in self.velocity else mean
        return {n: (received[n].double() + self.lr * self.velocity[n]).to(received[n].dtype) for n in received}


class DPFedAvgReport:
    """The run record's privacy fields: the message DP's, plus the client sampling and its accounting."""

    def __init__(self, dp: MessageDP, sampler: NoiseSource, q: float, accounted_q: float, amplification: str):
        self.dp, self.sampler = dp, sampler
        self.sampling = {"sample_rate": q, "accounted_sample_rate": accounted_q, "amplification": amplification}

    def report(self) -> dict:
        out = self.dp.report()
        out["dp"] = {**out["dp"], **self.sampling, **self.sampler.provenance("sampling")}
        return out


def draw_participation(sampler: NoiseSource, num_clients: int, q: float) -> list[bool]:
    """One round's Poisson sampling: each client takes part independently with probability q (the rate
    the accountant is told), from `sampler`'s coins."""
    return sampler.coins(num_clients, q).tolist()


def own_coin_upload(q: float):
    """Client k's upload where it flips its own coin (OS entropy) where it runs (a Ray actor): its model
    delta with probability q, else zeros. The coins stay there: no auditor's truth of who took part."""
    def upload(k: int, params: Params, received: Params, client) -> Params:
        coin = float(NoiseSource(None, secure=True).uniform(1)[0] < q)
        return {n: (params[n].double().cpu() - received[n].double()) * coin for n in received}
    return upload


def run_dp_fedavg(setup: Setup) -> None:
    m, fed = setup.method, setup.federation
    if fed.dp is None or not fed.dp.applies_to("model_update"):
        raise ConfigError("dp-fedavg needs --dp gaussian:sigma=S,clip=C,on=update,mode=central|distributed|local")
    p = dp_fedavg_params(m.params)
    q, K = p["q"], fed.num_clients
    sampler = NoiseSource.from_setting(p["sampling_seed"])  # the clients' own coins
    accounted_q, amplification = accounted_sample_rate(q, fed.protocol.name)
    setup.extras["dp"] = DPFedAvgReport(fed.dp, sampler, q, accounted_q, amplification)
    sampled: list[list[bool]] = setup.extras.setdefault("sampled_clients", [])  # auditor's truth, per round

    def upload(k: int, params: Params, received: Params, client) -> Params:
        """Client k: its model delta if its coin (flipped once per round) says it takes part, else zeros."""
        if k == 0:
            sampled.append(draw_participation(sampler, K, q))
        return {n: (params[n].double().cpu() - received[n].double()) * float(sampled[-1][k]) for n in received}

    server = ServerMomentum(p["server_lr"], p["server_momentum"])

    def update(sums: Params, received: Params) -> Params:
        """Server: w + η·v, v ← β·v + (noised sum of deltas) / (q·|S|), S the clients whose upload is in the
        sum (all K without dropout): a denominator fixed before the data, public (the server names the survivors)."""
        return server.step(sums, q * len(fed.survivors(None, "model_update")), received)

    if setup.remote is not None:  # each client flips its own coin on its actor; nobody else learns it
        if p["sampling_seed"] != OS:
            raise ConfigError("dp-fedavg --engine ray: sampling_seed must be 'os' (each client's actor flips its "
                              "own coin; a seed shared by the actors would give them the same coins)")
        run_rounds(setup, "dp-fedavg", own_coin_upload(q), update, sample_rate=accounted_q)
        return
    run_rounds(setup, "dp-fedavg", upload, update, sample_rate=accounted_q)
