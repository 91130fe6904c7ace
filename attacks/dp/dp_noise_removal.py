"""DP noise removal: regenerate seeded message-DP noise from the run record and subtract it.

A seeded NoiseSource is a torch.Generator: whoever knows the seed and the order of the draws gets
the very same noise. Both are public: the run record holds the `--dp` spec (with its `seed=N`),
the run seed and the number of clients, and the method's message format fixes the fields, shapes
and order of every noised message. The attack replays MessageDP's draws (release by release; per
client and per field in local/distributed mode, once on the sum's fields in central mode) up to
the targeted release and subtracts that noise from what the adversary observed:
- local mode, "clientK": client K's noised upload (plaintext under plain);
- local or distributed mode, "aggregate": the revealed sum of the K noised uploads;
- central mode, "aggregate": the server is trusted with the exact sum, so the noised sum is what
  it releases, the new global model: DP-FedAvg's w' = w + η·(Σ + noise)/(qK) is inverted from two
  consecutive broadcasts (float32: exact up to the broadcast's rounding). Other methods divide by
  a noised denominator of unknown true value (FedAvg's Σ c_k n_k): no input.
When the spec draws from OS entropy (seed=os, the default) nothing can be regenerated; the attack
then tries the run seed (the seed such noise was drawn from before it defaulted to os).

Scored against the clients' clipped uploads before any noise (the runtime's MessageDP.audit_clipped,
auditor side only) as max abs error and RMSE, also relative to the noise std of the attacked value;
the baseline is the same error of the noised value itself (relative RMSE ≈ 1).

DP O-pFGL (`--method-param dp_epsilon=...`, its own node-level release of the class statistics):
the record holds the method params (with `dp_seed`) and the noise calibration; in distributed mode
each client draws its 1/(K − c) share, client by client, blocks n, S1, S2 in order, and the attack
subtracts their sum from the revealed `class_stats:sum` ("aggregate" only; every value in units of
its block's calibrated noise std, so noise_std is √(K/(K − c))). Scored against the sum of the clients' clipped
statistics (recomputed on the auditor's side). Central mode: the server draws the noise itself.
FedGPL's split messages (`--dp ...,on=m1|m3|split,mode=local,seed=N`, noised by their sender,
privfgl/privacy/split_dp.py): one seeded source draws the noise of every noised message in the
order the split steps send them (per round, client by client, per minibatch M1, M2, M3, M4), and
the server's view holds every message's shape (`--transcript all`, the audit's default). The attack
replays those draws and subtracts them from client K's M1 rows or M3 gradients of the targeted
round (all its minibatches, concatenated). Scored against the clipped rows before noise
(SplitDP.audit_clipped, auditor side). No "aggregate" (split messages are not
summed) and no M2/M4 (the server noises those itself).
Not covered: DP-SGD (its noise is inside each client's local training, never a message).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attacks.base import Attack, Knowledge, NoInput, NoTruth, client_index
from attacks.view import AdversaryView, observed_messages
from privfgl.federation import SERVER, client_name
from privfgl.federation.messages import Message
from privfgl.methods.opfgl import dp as opfgl_dp
from privfgl.methods.dp_fedavg import dp_fedavg_params
from privfgl.methods.opfgl.params import resolve_params as opfgl_params
from privfgl.privacy.message_dp import Layout
from privfgl.privacy.noise import NoiseSource
from privfgl.privacy.spec import SPLIT_MESSAGES, DPSpec, check_dp_for_run

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class NoiseAux:
    """The public run config the attack needs: the --dp text (with its seed setting), the run seed,
    method, protocol, clients and method params, the message format: per release, the fields and
    shapes each party noised (`noise_draws`), and the variance fraction each noised upload carries
    (`noise_share`: 1, or distributed DP's 1/(K - c), in the record's dp.distributed). No client data."""
    target: str
    message: str | None
    round: int
    dp_text: str | None
    run_seed: int
    method: str
    protocol: str
    num_clients: int
    method_params: dict
    noise_draws: tuple[tuple[Layout, ...], ...]
    noise_share: float = 1.0


@dataclass(frozen=True)
class Denoised:
    """The observed (noised) value, the value with the regenerated noise removed, the noise std per
    coordinate of the observed value, and where the seed came from."""
    observed: Tensors
    denoised: Tensors
    noise_std: float
    seed: int
    seed_from: str
    release: int


def release_order(messages: list[Message] | tuple[Message, ...], protected: tuple[str, ...]) -> list[tuple[int, str]]:
    """(round, message) of every aggregation of a protected message, in the order they ran (each
    message is aggregated at most once a round): MessageDP's release indices."""
    first: dict[tuple[int, str], int] = {}
    for m in messages:
        base = m.name.split(":")[0]
        if base in protected:
            first.setdefault((m.round, base), len(first))
    return sorted(first, key=lambda key: (key[0], first[key]))


def regenerate(spec: DPSpec, share: float, draws: tuple[tuple[Layout, ...], ...], release: int,
               seed: int) -> list[Tensors]:
    """The noise of release `release` as a `seed`ed source draws it: one dict per party that drew
    (the K clients in local/distributed mode, each `share` of the variance; the server in central mode)."""
    source, mechanism = NoiseSource(seed), spec.build()
    noise: list[Tensors] = []
    for parties in draws[:release + 1]:
        noise = [{name: mechanism.noise(shape, source, share) for name, shape in party} for party in parties]
    return noise


# FedGPL's split messages M1-M4 (privfgl/methods/fedgpl/split.py): the noised field of each, and who sends it
M1, M2, M3, M4 = SPLIT_MESSAGES
SPLIT_FIELDS = {M1: "x", M2: "H", M3: "grad", M4: "grad"}
_FROM_CLIENT = (M1, M3)


def split_draws(messages: list[Message] | tuple[Message, ...], num_clients: int,
                noised: tuple[str, ...]) -> list[Message]:
    """The `noised` split messages in the order SplitDP drew their noise (privfgl/methods/fedgpl: per
    round, client by client, per minibatch M1, M2, M3, M4), from the server's view: the i-th M1 and M3
    it received from client k in round r and the i-th M2 and M4 it sent to k are minibatch i's."""
    by_key: dict[tuple[int, int, str], list[Message]] = {}
    for m in messages:
        if m.name in SPLIT_FIELDS:
            k = client_index(m.sender if m.name in _FROM_CLIENT else m.receiver)
            by_key.setdefault((m.round, k, m.name), []).append(m)
    order = []
    for r in sorted({r for r, _, _ in by_key}):
        for k in range(num_clients):
            batches = zip(*(by_key.get((r, k, name), []) for name in (M1, M2, M3, M4)))
            order += [m for batch in batches for m in batch if m.name in noised]
    return order


def _broadcasts(view: AdversaryView) -> list[Message]:
    """The global models the server sent, in order (to the view's party, or to client0)."""
    receiver = view.party if view.party != SERVER else client_name(0)
    return [m for m in view.messages if m.name == "global_model" and m.sender == SERVER and m.receiver == receiver]


def _released_dp_fedavg_sum(view: AdversaryView, aux: NoiseAux, round: int) -> Tensors:
    """DP-FedAvg's noised sum of round `round` from the broadcasts before and after it: (w' − w)·qK/η."""
    sent = _broadcasts(view)
    if round + 1 >= len(sent) or sent[round].tensors is None or sent[round + 1].tensors is None:
        raise NoInput(f"no plaintext global models before and after round {round} in the {view.party}'s view")
    p = dp_fedavg_params(aux.method_params)
    scale = p["q"] * aux.num_clients / p["server_lr"]
    before, after = sent[round].tensors, sent[round + 1].tensors
    return {n: (after[n].double() - before[n].double()) * scale for n in before}


class DPNoiseRemoval(Attack):
    """`dp-noise-removal`: the clipped value behind a message-DP release, for seeded noise."""

    name = "dp-noise-removal"

    def __init__(self, message: str | None = None, round: int = -1, clients: list[int] | None = None):
        self.message, self.round, self.clients = message, round, clients

    def targets(self, view: AdversaryView, knowledge: Knowledge, num_clients: int) -> list[str]:
        clients = self.clients if self.clients is not None else range(num_clients)
        return ["aggregate"] + [f"client{k}" for k in clients]

    def declare_aux(self, setup, knowledge: Knowledge, target: str) -> NoiseAux:
        dp, fed = setup.federation.dp, setup.federation
        draws = tuple(dp.noise_draws) if dp is not None else ()
        split = setup.extras.get("split_dp_spec")  # FedGPL: the method noises its split messages
        text = dp.spec.text if dp is not None else split.text if split is not None else None
        share = dp.share if dp is not None else self._opfgl_share(setup, knowledge)
        return NoiseAux(target, self.message, self.round, text,
                        setup.method.seed, knowledge.method, fed.protocol.name, len(setup.clients),
                        dict(setup.method.params), draws, share)

    @staticmethod
    def _opfgl_share(setup, knowledge: Knowledge) -> float:
        """DP O-pFGL's distributed share, 1/(K - c), from its public params and protocol (else 1)."""
        if knowledge.method != "opfgl" or setup.method.params.get("dp_epsilon") is None:
            return 1.0
        p, K = opfgl_params(dict(setup.method.params)), len(setup.clients)
        if opfgl_dp.dp_mode(p, setup.federation.protocol.name) != "distributed":
            return 1.0
        return 1.0 / (K - opfgl_dp.colluders(p, setup.federation.protocol, K)[0])

    def attack(self, view: AdversaryView, aux: NoiseAux) -> Denoised:
        if aux.dp_text is None and aux.method == "opfgl" and aux.method_params.get("dp_epsilon") is not None:
            return self._opfgl(view, aux)
        if aux.dp_text is None:
            raise NoInput("the run has no message DP (--dp)")
        spec = check_dp_for_run(aux.dp_text, aux.method, aux.protocol)
        if set(spec.messages) <= set(SPLIT_FIELDS):
            return self._split(view, aux, spec)
        message = aux.message or spec.messages[0]
        if message not in spec.messages:
            raise NoInput(f"--dp protects {', '.join(spec.messages)}, not {message}")
        order = release_order(view.messages, spec.messages)
        rounds = [r for r, name in order if name == message]
        if not rounds:
            raise NoInput(f"no aggregation of {message} in the {view.party}'s view")
        round = rounds[-1] if aux.round < 0 else aux.round
        if (round, message) not in order:
            raise NoInput(f"no aggregation of {message} in round {round} in the {view.party}'s view")
        release = order.index((round, message))
        if release >= len(aux.noise_draws):
            raise NoInput(f"release {release} of the view has no published message format")
        seed, seed_from = (aux.run_seed, "run seed (a guess: the spec draws from os)") if spec.secure \
            else (spec.seed, "the --dp spec's seed")
        noise = regenerate(spec, aux.noise_share, aux.noise_draws, release, seed)
        mech = spec.build()
        std = mech.std if spec.mechanism == "gaussian" else math.sqrt(2) * mech.scale
        if aux.target == "aggregate":
            observed, noise = self._aggregate(view, aux, spec, message, round), _sum(noise)
            std *= math.sqrt(aux.num_clients * aux.noise_share) if spec.mode != "central" else 1.0
        else:
            k = client_index(aux.target)
            if spec.mode != "local":
                raise NoInput(f"mode={spec.mode}: {aux.target}'s upload does not carry the release's noise")
            observed = view.payload(message, round, client_name(k))
            if observed is None:
                raise NoInput(f"no plaintext {message} from {aux.target} in round {round} in the {view.party}'s view")
            noise = noise[k]
        observed = {n: t.double() for n, t in observed.items() if n in noise}
        return Denoised(observed, {n: t - noise[n] for n, t in observed.items()}, std, seed, seed_from, release)

    @staticmethod
    def _split(view: AdversaryView, aux: NoiseAux, spec: DPSpec) -> Denoised:
        """FedGPL: client K's noised M1 rows (or M3 gradients) of a round minus the replayed draws."""
        message = aux.message or spec.messages[0]
        if message not in spec.messages:
            raise NoInput(f"--dp protects {', '.join(spec.messages)}, not {message}")
        if message not in _FROM_CLIENT:
            raise NoInput(f"{message} is noised by the server, which sends it; the attack removes a client's noise "
                          f"({', '.join(m for m in _FROM_CLIENT if m in spec.messages)})")
        if aux.target == "aggregate":
            raise NoInput("split messages are not summed; the attack targets one client's (clientK)")
        if view.party != SERVER:
            raise NoInput("the draw order is fixed by every client's split messages: it needs the server's view")
        k = client_index(aux.target)
        draws = split_draws(view.messages, aux.num_clients, spec.messages)
        rounds = sorted({m.round for m in draws if m.name == message and m.sender == client_name(k)})
        if not rounds:
            raise NoInput(f"no {message} from {aux.target} in the {view.party}'s view")
        round = rounds[-1] if aux.round < 0 else aux.round
        if round not in rounds:
            raise NoInput(f"no {message} from {aux.target} in round {round} in the {view.party}'s view")
        seed, seed_from = (aux.run_seed, "run seed (a guess: the spec draws from os)") if spec.secure \
            else (spec.seed, "the --dp spec's seed")
        source, mech = NoiseSource(seed), spec.build()
        observed, noise = [], []
        for m in draws:
            if m.round > round:
                break
            if m.tensors is None:
                raise NoInput(f"the {m.name} payload of round {m.round} is not in the view: the noise's draw order "
                              "needs every round's split messages (--transcript all)")
            rows = m.tensors[SPLIT_FIELDS[m.name]]
            drawn = mech.noise(rows.shape, source)
            if m.round == round and m.name == message and m.sender == client_name(k):
                observed.append(rows.double())
                noise.append(drawn)
        observed_rows, noise_rows = torch.cat(observed), torch.cat(noise)
        std = mech.std if spec.mechanism == "gaussian" else math.sqrt(2) * mech.scale
        return Denoised({"rows": observed_rows}, {"rows": observed_rows - noise_rows}, std, seed, seed_from, round)

    @staticmethod
    def _opfgl(view: AdversaryView, aux: NoiseAux) -> Denoised:
        """DP O-pFGL's distributed release: the revealed class_stats sum minus the replayed client shares."""
        if aux.target != "aggregate":
            raise NoInput("DP O-pFGL: a client's upload carries only its own share of the noise (and hides in the "
                          "secure sum); the attack targets the revealed aggregate")
        p = opfgl_params(aux.method_params)
        if opfgl_dp.dp_mode(p, aux.protocol) != "distributed":
            raise NoInput("DP O-pFGL dp_mode=central: the server draws the noise itself")
        found = [m for m in view.find("class_stats:sum", 0) if m.tensors is not None]
        if not found:
            raise NoInput(f"no revealed class_stats sum in the {view.party}'s view")
        seed, seed_from = (aux.run_seed, "run seed (a guess: dp_seed=os)") if p.dp_seed == "os" \
            else (int(p.dp_seed), "the method's dp_seed")
        mech, source = opfgl_dp.calibrate(p), NoiseSource(seed)
        observed = {b: found[0].tensors[b].double() for b in opfgl_dp.BLOCKS}
        shapes = {b: t.shape for b, t in observed.items()}
        # each client draws its share from its own stream of the seed (NoiseSource.for_client, opfgl/dp.py)
        noise = _sum([mech.noise(shapes, source.for_client(k), aux.noise_share) for k in range(aux.num_clients)])
        std = mech.noise_std
        in_std = lambda d: {b: d[b] / std[b] for b in opfgl_dp.BLOCKS}
        sum_std = math.sqrt(aux.num_clients * aux.noise_share)  # K shares, in units of the calibrated std
        return Denoised(in_std(observed), in_std({b: observed[b] - noise[b] for b in observed}), sum_std, seed,
                        seed_from, 0)

    @staticmethod
    def _aggregate(view: AdversaryView, aux: NoiseAux, spec: DPSpec, message: str, round: int) -> Tensors:
        """The released sum of `message` in `round` as the view holds it."""
        if spec.mode == "central":
            if aux.method != "dp-fedavg":
                raise NoInput(f"mode=central: the noised sum reaches the view only through {aux.method}'s update; "
                              "this attack inverts dp-fedavg's (w + η·sum/(qK))")
            return _released_dp_fedavg_sum(view, aux, round)
        found = [m for m in view.find(f"{message}:sum", round) if m.tensors is not None]
        if not found:
            raise NoInput(f"no revealed {message} sum of round {round} in the {view.party}'s view")
        return found[0].tensors

    def truth(self, setup, target: str) -> Tensors:
        """The clipped upload (clientK) or the sum of the clipped uploads, before any noise."""
        dp = setup.federation.dp
        if dp is None and setup.method.params.get("dp_epsilon") is not None:  # DP O-pFGL: clipped statistics
            p = opfgl_params(dict(setup.method.params))
            sums = _sum([opfgl_dp.client_sums(c, setup.num_classes, p, setup.method.seed) for c in setup.clients])
            std = opfgl_dp.calibrate(p).noise_std
            return {b: sums[b] / std[b] for b in opfgl_dp.BLOCKS}
        if dp is None and "split_dp_spec" in setup.extras:
            return self._split_truth(setup, target)
        message = self.message or dp.spec.messages[0]
        order = release_order(setup.federation.transcript.view(SERVER), dp.spec.messages)
        rounds = [r for r, name in order if name == message]
        release = order.index((rounds[-1] if self.round < 0 else self.round, message))
        if release not in dp.audit_clipped:
            raise NoTruth(f"the runtime keeps the clipped uploads of the latest round only (the auditor's truth); "
                          f"round={self.round} is older: the noise was removed but cannot be scored (round=-1 can)")
        clipped = dp.audit_clipped[release]
        return _sum(clipped) if target == "aggregate" else clipped[client_index(target)]

    def _split_truth(self, setup, target: str) -> Tensors:
        """FedGPL: client K's clipped rows of the targeted message and round, before noise."""
        split = setup.extras["dp"]  # the run's SplitDP
        message = self.message or split.spec.messages[0]
        round = split.rounds - 1 if self.round < 0 else self.round
        if round not in split.audit_clipped:
            raise NoTruth(f"the run kept the clipped split rows of round(s) {', '.join(map(str, split.audit_clipped))} "
                          "only (--transcript all keeps every round's)")
        clipped = split.audit_clipped[round]
        draws = [m for m in split_draws(observed_messages(setup.federation.transcript), len(setup.clients),
                                        split.spec.messages) if m.round == round]  # order only: no payload copies
        if [m.name for m in draws] != [name for name, _ in clipped]:
            raise RuntimeError("dp-noise-removal: the split messages' order in the transcript is not the order their "
                               "noise was drawn in")
        rows = [rows for m, (_, rows) in zip(draws, clipped)
                if m.name == message and m.sender == client_name(client_index(target))]
        return {"rows": torch.cat(rows)}

    def score(self, rec: Denoised, truth: Tensors, aux: NoiseAux) -> tuple[dict, dict]:
        names = sorted(rec.observed)
        flat = lambda d: torch.cat([d[n].double().reshape(-1) for n in names])
        true = flat(truth)

        def errors(x: Tensors) -> dict:
            err = flat(x) - true
            rmse = float(err.pow(2).mean().sqrt())
            return {"max_abs_error": float(err.abs().max()), "rmse": rmse, "relative_rmse": rmse / rec.noise_std}
        metrics = {**errors(rec.denoised), "noise_std": rec.noise_std, "seed": rec.seed, "seed_from": rec.seed_from,
                   "release": rec.release}
        return metrics, {**errors(rec.observed), "kind": "the noised value itself (no noise removed)"}


def _sum(parts: list[Tensors]) -> Tensors:
    """Field-wise float64 sum of a list of dicts, in list order."""
    return {n: sum(p[n].double() for p in parts) for n in parts[0]}
