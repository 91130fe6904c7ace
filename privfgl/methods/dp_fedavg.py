"""DP-FedAvg at user (client) level (McMahan et al. 2018, "Learning differentially private
recurrent language models"), with the client as the privacy unit.

Per round: every client is sampled independently with probability q (secret from the server);
sampled clients train `local_epochs` from the global model w and upload their model delta
Δ_k = w_k − w, the others upload zeros. The federation's message DP (`--dp gaussian:...,on=update`)
clips every upload to ||Δ_k||₂ ≤ C on the client, and adds N(0, (σC)²) to the sum — once on the
server (mode=central), as K client shares under a secure protocol (mode=distributed), or on every
upload (mode=local). The server applies w ← w + η · (Σ_k Δ_k + noise) / (qK), a fixed
denominator, so one client changes the update by at most ηC/(qK). Every round is one sampled
Gaussian release (σ, q), composed by opacus' RDP (or PRV) accountant into ε at the spec's δ.

Method params: q (client sampling rate, default 1.0), server_lr (η, default 1.0).
"""
from __future__ import annotations

import torch

from privfgl.errors import ConfigError
from privfgl.methods.base import Setup
from privfgl.methods.fedavg import run_rounds
from privfgl.training import Params

PARAMS = {"q": 1.0, "server_lr": 1.0}


def dp_fedavg_params(params: dict) -> dict:
    """Method params with defaults; raises ConfigError on unknown keys or bad values."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        raise ConfigError(f"dp-fedavg: unknown method param(s) {', '.join(unknown)}; valid: {', '.join(PARAMS)}")
    out = {k: float(params.get(k, v)) for k, v in PARAMS.items()}
    if not 0 < out["q"] <= 1:
        raise ConfigError(f"dp-fedavg: q must be in (0, 1], got {out['q']}")
    if not out["server_lr"] > 0:
        raise ConfigError(f"dp-fedavg: server_lr must be > 0, got {out['server_lr']}")
    return out


def run_dp_fedavg(setup: Setup) -> None:
    m, fed = setup.method, setup.federation
    if fed.dp is None or not fed.dp.applies_to("model_update"):
        raise ConfigError("dp-fedavg needs --dp gaussian:sigma=S,clip=C,on=update,mode=central|distributed|local")
    p = dp_fedavg_params(m.params)
    q, K = p["q"], len(setup.clients)
    sampler = torch.Generator().manual_seed(m.seed * 7919 + 17)  # clients' own coins, secret from the server
    sampled: list[bool] = []

    def upload(k: int, params: Params, received: Params) -> Params:
        """Client k: its model delta if its coin (flipped once per round) says it takes part, else zeros."""
        if k == 0:
            sampled[:] = (torch.rand(K, generator=sampler) < q).tolist()
        return {n: (params[n].double().cpu() - received[n].double()) * float(sampled[k]) for n in received}

    def update(sums: Params, received: Params) -> Params:
        """Server: w + η · (noised sum of deltas) / (qK), a fixed denominator."""
        return {n: (received[n].double() + p["server_lr"] * sums[n] / (q * K)).to(received[n].dtype)
                for n in received}

    run_rounds(setup, "dp-fedavg", upload, update, sample_rate=q)
