"""The `--dp` spec: which mechanism protects which message, where, with which bounds.

Grammar (no spaces; keys in any order):

    MECHANISM:key=value,key=value,...
    gaussian:sigma=S,clip=C,on=MESSAGE,mode=local|central|distributed[,delta=D][,accountant=rdp|prv][,seed=os|N]
             [,colluders=auto|N]   (mode=distributed only)
    laplace:epsilon=E,clip=C,on=MESSAGE,mode=local|central[,delta=D][,seed=os|N]

`clip` bounds each client's whole message (all its fields as one vector): L2 for gaussian, L1 for
laplace, so the sensitivity of the sum to adding or removing one client is `clip`. `on` is a
message name or an alias of several (MESSAGE_ALIASES; `all` = every message the run's method
sends); every aggregation of them is a release. `seed`: where the noise comes from, `os` (the
default: OS entropy, privfgl.privacy.noise) or an integer N for reproducible noise. Seeded noise is
removable by anyone who knows N, and N is in the run record (attacks/dp/dp_noise_removal.py): ε then
holds only against an adversary who does not know the seed, which the record's `seed_warning` says.
`delta` is the δ at which ε is reported (default 1e-5; for laplace, the δ' of advanced composition).
`colluders` (mode=distributed): how many clients may collude with the server and subtract their own
noise shares; each client's share is sized so that the other K − N shares still sum to the full
N(0, (σ·clip)²) (message_dp.py). `auto` (the default): the coalition the run's protocol tolerates
(privacy/trust.py: tolerated_colluders); `0`: the 1/K shares, which hold against the server alone.

Pre-weighted sums ({n·W, n}, {p·s, p}): the clip scales a client's whole message by one factor
c = min(1, clip/‖message‖), so its ratio W = (c·n·W)/(c·n) is kept exactly while its weight in the
pooled ratio becomes c·n instead of n. The fields in DENOMINATORS are what the server divides by;
message_dp.guard_denominators floors them after the reveal (post-processing; see message_dp.py).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from privfgl.errors import ConfigError
from privfgl.privacy.accounting import ACCOUNTANTS
from privfgl.privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from privfgl.privacy.noise import OS

# The aggregated messages each method sends (the valid targets of `on=`).
METHOD_MESSAGES = {"local": (), "fedavg": ("model_update",), "fedprox": ("model_update",),
                   "dp-fedavg": ("model_update",), "opfgl": ("class_stats", "class_counts"),
                   "fedspray": ("encoder_update", "proxy_update"),
                   "fedomd": ("hidden_sums", "moment_sums", "model_update"),
                   "fedgpl": ("prompted_graph", "embeddings", "embedding_grads", "feature_grads", "prompt_update")}
# FedGPL's split messages M1-M4 (privfgl/privacy/split_dp.py: per-row clipping, noised by their sender).
SPLIT_MESSAGES = ("prompted_graph", "embeddings", "embedding_grads", "feature_grads")
# Aliases of the aggregated messages DP can protect: `on=ALIAS` protects every message listed.
# "update":  the model, {n·W, n} (FedAvg/FedProx/FedOMD) or DP-FedAvg's delta;
# "stats":   O-pFGL's class statistics {S1, S2} and class counts {n, b, n_orig} (methods/opfgl/run.py);
# "encoder": FedSpray's {N·ω per tensor, n = N}; "proxies": FedSpray's {proxy = p_j·s_j, weight = p};
# "moments": FedOMD's per-round hidden-output statistics, {z_l sums, n} and the central-moment sums;
# "all":     every message the run's method sends (resolved by check_dp_for_run; parsed alone it
#            names every message any method sends, each method sending only its own).
ALL = "all"
MESSAGE_ALIASES = {"update": ("model_update",), "stats": ("class_stats", "class_counts"),
                   "encoder": ("encoder_update",), "proxies": ("proxy_update",),
                   "moments": ("hidden_sums", "moment_sums"),
                   "m1": ("prompted_graph",), "m2": ("embeddings",), "m3": ("embedding_grads",),
                   "m4": ("feature_grads",), "split": SPLIT_MESSAGES,
                   ALL: tuple(dict.fromkeys(n for ns in METHOD_MESSAGES.values() for n in ns))}
# The field(s) of a message that the server divides the others by after the reveal (a weighted mean
# = Σ n·W / Σ n). message_dp.guard_denominators floors them (post-processing) so that noise cannot make
# them ≈ 0 or < 0 before the division.
# (O-pFGL's counts keep their own handling.)
DENOMINATORS = {"encoder_update": ("n",), "proxy_update": ("weight",), "hidden_sums": ("n",),
                "moment_sums": ("n",), "model_update": ("n",)}
MECHANISMS = ("gaussian", "laplace")
AUTO = "auto"  # colluders=auto: the coalition the run's protocol tolerates
MODES = {"gaussian": ("local", "central", "distributed"), "laplace": ("local", "central")}
_KEYS = {"gaussian": {"sigma", "clip", "on", "mode", "delta", "accountant", "seed", "colluders"},
         "laplace": {"epsilon", "clip", "on", "mode", "delta", "seed"}}
_REQUIRED = {"gaussian": ("sigma", "clip", "on", "mode"), "laplace": ("epsilon", "clip", "on", "mode")}


class DPSpecError(ConfigError):
    """A bad --dp spec; the message names the problem and what is valid."""


@dataclass(frozen=True)
class DPSpec:
    """A parsed --dp spec. `messages`: the resolved message names; `secure`: noise from OS entropy
    (`seed` None), else from the explicit `seed`;
    `unprotected`: set by check_dp_for_run (ε covers the protected messages only); `colluders`: the
    clients that may collude with the server in mode=distributed (None: the protocol's tolerated
    coalition)."""
    text: str
    mechanism: str
    messages: tuple[str, ...]
    mode: str
    clip: float
    sigma: float | None = None
    epsilon: float | None = None
    delta: float = 1e-5
    accountant: str = "rdp"
    seed: int | None = None
    secure: bool = False
    colluders: int | None = None
    unprotected: tuple[str, ...] = ()  # messages the run's method sends that this spec leaves without DP

    def build(self) -> GaussianMechanism | LaplaceMechanism:
        """The calibrated mechanism: sensitivity = clip (one client's message, add/remove)."""
        if self.mechanism == "gaussian":
            return GaussianMechanism(self.sigma, self.clip)
        return LaplaceMechanism(self.epsilon, self.clip)

    @property
    def clip_norm(self) -> int:
        return 2 if self.mechanism == "gaussian" else 1

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _number(key: str, value: str, text: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise DPSpecError(f"--dp {text!r}: {key}={value!r} is not a number") from None
    if not math.isfinite(x) or x <= 0:
        raise DPSpecError(f"--dp {text!r}: {key} must be a finite number > 0, got {value}")
    return x


def parse_dp_spec(text: str) -> DPSpec:
    """Parse `text` (grammar in the module docstring); raise DPSpecError naming the problem."""
    head, sep, body = text.strip().partition(":")
    mech = head.strip().lower()
    if mech not in MECHANISMS:
        raise DPSpecError(f"--dp {text!r}: unknown mechanism {head!r}; valid: {', '.join(MECHANISMS)} "
                          "(e.g. gaussian:sigma=1.0,clip=1.0,on=update,mode=central)")
    values: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in body.split(","))) if sep else ():
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq or not value.strip():
            raise DPSpecError(f"--dp {text!r}: {item!r} is not key=value")
        if key not in _KEYS[mech]:
            raise DPSpecError(f"--dp {text!r}: unknown key {key!r} for {mech}; valid: {', '.join(sorted(_KEYS[mech]))}")
        if key in values:
            raise DPSpecError(f"--dp {text!r}: {key} is given twice")
        values[key] = value.strip()
    missing = [k for k in _REQUIRED[mech] if k not in values]
    if missing:
        what = {"clip": "clip (the clipping bound that sets the sensitivity)", "on": "on (the message to protect)",
                "mode": f"mode ({', '.join(MODES[mech])})"}
        raise DPSpecError(f"--dp {text!r}: missing {', '.join(what.get(k, k) for k in missing)}")
    names = set(MESSAGE_ALIASES[ALL])
    messages = MESSAGE_ALIASES.get(values["on"], (values["on"],))
    if not set(messages) <= names:
        raise DPSpecError(f"--dp {text!r}: unknown message {values['on']!r}; valid: aliases "
                          f"{', '.join(MESSAGE_ALIASES)} or messages {', '.join(sorted(names))}")
    mode = values["mode"].lower()
    if mode not in MODES[mech]:
        why = " (Laplace noise is not split into per-client shares; use gaussian)" \
            if mode == "distributed" and mech == "laplace" else ""
        raise DPSpecError(f"--dp {text!r}: mode {mode!r} is not valid for {mech}{why}; valid: {', '.join(MODES[mech])}")
    delta = _number("delta", values.get("delta", "1e-5"), text)
    if delta >= 1:
        raise DPSpecError(f"--dp {text!r}: delta must be in (0, 1), got {delta}")
    accountant = values.get("accountant", "rdp").lower()
    if accountant not in ACCOUNTANTS:
        raise DPSpecError(f"--dp {text!r}: unknown accountant {accountant!r}; valid: {', '.join(ACCOUNTANTS)}")
    seed_text = values.get("seed", OS)
    secure = seed_text.lower() == OS
    try:
        seed = None if secure else int(seed_text)
    except ValueError:
        raise DPSpecError(f"--dp {text!r}: seed must be an integer or 'os' (the default), got {seed_text!r}") from None
    colluders_text = values.get("colluders", AUTO).lower()
    if colluders_text != AUTO and mode != "distributed":
        raise DPSpecError(f"--dp {text!r}: colluders applies to mode=distributed only (the size of each client's "
                          f"noise share), not to mode={mode}")
    if colluders_text != AUTO and not colluders_text.isdigit():
        raise DPSpecError(f"--dp {text!r}: colluders must be 'auto' (the protocol's tolerated coalition) or an "
                          f"integer >= 0, got {colluders_text!r}")
    return DPSpec(text=text, mechanism=mech, messages=messages, mode=mode, clip=_number("clip", values["clip"], text),
                  sigma=_number("sigma", values["sigma"], text) if mech == "gaussian" else None,
                  epsilon=_number("epsilon", values["epsilon"], text) if mech == "laplace" else None,
                  delta=delta, accountant=accountant, seed=seed, secure=secure,
                  colluders=None if colluders_text == AUTO else int(colluders_text))


def valid_targets(method: str) -> tuple[str, ...]:
    """The `on=` values that fit `method`: the aliases whose messages it all sends, then its message names."""
    sends = set(METHOD_MESSAGES.get(method, ()))
    if not sends:
        return ()
    aliases = [a for a, ns in MESSAGE_ALIASES.items() if a == ALL or set(ns) <= sends]
    return (*aliases, *METHOD_MESSAGES[method])


def check_dp_for_run(text: str | None, method: str, protocol: str, run_seed: int | None = None) -> DPSpec | None:
    """Parse a run's --dp (None: no message DP) and check it fits the run: the target messages are
    ones `method` sends (`on=all`: all of them), distributed noise has a secure protocol, dp-fedavg
    has Gaussian noise on its update, and dp-sgd (configured by its own method params) has no --dp.
    The returned spec lists in `unprotected` the method's messages it leaves without DP. `run_seed`
    plays no part (the noise seed no longer defaults to it); it is accepted for existing callers."""
    if method == "dp-sgd":
        if text is not None:
            raise DPSpecError("--dp does not apply to dp-sgd: its noise is set by --method-param sigma=,clip=,degree=")
        return None
    if method == "gap":
        if text is not None:
            raise DPSpecError("--dp does not apply to gap: its noise is set by --method-param epsilon=,delta=,hops=")
        return None
    if method == "lapgraph":
        if text is not None:
            raise DPSpecError("--dp does not apply to lapgraph: its noise is set by --method-param epsilon=,count_share=")
        return None
    if text is None:
        if method == "dp-fedavg":
            raise DPSpecError("dp-fedavg needs --dp gaussian:sigma=S,clip=C,on=update,mode=central|distributed|local")
        return None
    spec = parse_dp_spec(text)
    sends = METHOD_MESSAGES.get(method)
    if not sends:
        raise DPSpecError(f"--dp {text!r}: method {method!r} sends no message --dp can protect "
                          f"(methods that do: {', '.join(m for m, s in METHOD_MESSAGES.items() if s)})")
    if spec.messages == MESSAGE_ALIASES[ALL]:
        spec = replace(spec, messages=SPLIT_MESSAGES if method == "fedgpl" else sends)
    if not set(spec.messages) <= set(sends):
        raise DPSpecError(f"--dp {text!r}: method {method!r} sends no message {'/'.join(spec.messages)!r}; "
                          f"valid for {method}: on={'|'.join(valid_targets(method))}")
    spec = replace(spec, unprotected=tuple(m for m in sends if m not in spec.messages))
    if method == "fedgpl":
        if "prompt_update" in spec.messages:
            raise DPSpecError(f"--dp {text!r}: DP on FedGPL's federated prompt/head sums is not built; protect "
                              "the split messages: on=m1|m2|m3|m4|split")
        if spec.mode != "local":
            raise DPSpecError(f"--dp {text!r}: split messages are noised by their sender; use mode=local")
    if method == "dp-fedavg" and spec.mechanism != "gaussian":
        raise DPSpecError(f"--dp {text!r}: dp-fedavg uses the Gaussian mechanism (gaussian:sigma=..,clip=..)")
    if spec.mode == "distributed" and protocol == "plain":
        raise DPSpecError(f"--dp {text!r}: mode=distributed needs a secure protocol (crypten, ckks, bfv, secagg); "
                          "under plain the server sees each client's upload carrying only 1/K of the noise variance")
    return spec
