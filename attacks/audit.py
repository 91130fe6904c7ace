"""`privfgl audit`: run a method, then attacks on the adversary's view; findings go to the record."""
from __future__ import annotations

import inspect
import time

import torch

from attacks.base import Attack, Finding, Knowledge, NoInput, NoTruth
from attacks.dp.dp_audit import DPAudit
from attacks.dp.dp_collusion import DPCollusion
from attacks.protocols.crypten_seed_search import CryptenSeedSearch
from attacks.dp.dp_noise_removal import DPNoiseRemoval
from attacks.uploads.edge_recovery import EdgeRecovery
from attacks.uploads.gradient_inversion import GradientInversion
from attacks.protocols.he_key_recovery import HEKeyRecovery
from attacks.uploads.label_inference import LabelInference
from attacks.models.link_stealing import LinkStealing
from attacks.models.membership import Membership
from attacks.protocols.secagg_collusion import SecAggCollusion
from attacks.uploads.method_uploads import for_method
from attacks.protocols.participation import Participation
from attacks.split.split_decoder import SplitDecoder
from attacks.split.split_dp_sensitivity import SplitDPSensitivity
from attacks.split.split_features import SplitFeatures
from attacks.split.split_labels import SplitLabels
from attacks.split.split_topology import SplitTopology
from attacks.uploads.stats_reconstruction import StatsReconstruction
from attacks.view import adversary_view
from privfgl.federation import SERVER
from protocols.base import client as client_name

ATTACKS: dict[str, type[Attack]] = {"gradient-inversion": GradientInversion, "label-inference": LabelInference,
                                    "stats-reconstruction": StatsReconstruction, "he-key-recovery": HEKeyRecovery,
                                    "dp-noise-removal": DPNoiseRemoval, "participation": Participation,
                                    "split-features": SplitFeatures, "split-labels": SplitLabels,
                                    "split-topology": SplitTopology, "split-decoder": SplitDecoder,
                                    "membership": Membership, "link-stealing": LinkStealing,
                                    "secagg-collusion": SecAggCollusion, "edge-recovery": EdgeRecovery,
                                    "dp-collusion": DPCollusion,
                                    "crypten-seed-search": CryptenSeedSearch, "dp-audit": DPAudit,
                                    "split-dp-sensitivity": SplitDPSensitivity}


def parse_attack(spec: str) -> Attack:
    """NAME or NAME:key=value,key=value (e.g. gradient-inversion:variant=dictionary,clients=0+3)."""
    name, _, rest = spec.partition(":")
    if name not in ATTACKS:
        raise ValueError(f"unknown attack {name!r}; valid: {', '.join(ATTACKS)}")
    signature = inspect.signature(ATTACKS[name])
    valid = [n for n, p in signature.parameters.items() if p.kind is not p.VAR_KEYWORD]
    params: dict = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"attack {name}: {item!r} is not KEY=VALUE")
        if key not in valid and len(valid) == len(signature.parameters):
            raise ValueError(f"attack {name}: unknown parameter {key!r}; valid: {', '.join(valid) or 'none'}")
        if key == "clients":
            if not all(v.isdigit() for v in value.split("+")):
                raise ValueError(f"attack {name}: clients={value!r}: expected client indices joined by +, e.g. 0+3")
            params[key] = [int(v) for v in value.split("+")]
        else:
            params[key] = int(value) if value.lstrip("-").isdigit() else value
    try:
        return ATTACKS[name](**params)
    except TypeError as e:
        raise ValueError(f"attack {name}: {e}") from None


def check_audit(attacks: list[Attack], party: str, num_clients: int, canaries: int = 0) -> None:
    """Before the run: every client an attack names exists, the adversary is a party of the run
    (the server or client0 … client{K-1}), and an attack on canaries has some (``canaries`` per client);
    ValueError (one line) otherwise."""
    parties = [SERVER] + [client_name(k) for k in range(num_clients)]
    if party not in parties:
        raise ValueError(f"--adversary {party!r}: not a party of this run; valid: {SERVER}, "
                         f"{client_name(0)} … {client_name(num_clients - 1)}")
    for attack in attacks:
        if getattr(attack, "candidates", None) == "canaries" and not canaries:
            raise ValueError(f"attack {attack.name}: candidates=canaries in a run without canaries; valid: with "
                             "--canaries N (N >= 1), or candidates=nodes")
        named = getattr(attack, "clients", None) or []
        if any(k >= num_clients for k in named):
            raise ValueError(f"attack {attack.name}: clients={'+'.join(map(str, named))}: the run has {num_clients} "
                             f"clients (indices 0 to {num_clients - 1})")


def prepare_attacks(attacks: list[Attack], method: str):
    """The hooks that run on the setup before the method (`run(cfg, prepare=...)`): each attack's
    `prepare(setup, method)` where it has one (dp-audit adds its canary clients)."""
    return [lambda setup, a=a: a.prepare(setup, method) for a in attacks if hasattr(a, "prepare")]


def public_knowledge(setup, run_config) -> Knowledge:
    """The run's public settings and the population priors (the dataset's feature marginals and
    label distribution over all nodes, as from a public copy of the dataset)."""
    has_x = all(getattr(c, "x", None) is not None for c in setup.clients)
    x = (torch.cat([c.x for c in setup.clients]) if has_x else setup.extras["population_features"]).double()
    y = torch.cat([c.y for c in setup.clients])
    m = setup.model
    dp = setup.federation.dp
    noised = tuple(dp.spec.messages) if dp is not None and dp.spec.mode != "central" else ()
    return Knowledge(run_config.method, m.model, m.layers, m.hidden, setup.num_features, setup.num_classes, m.lr,
                     m.weight_decay, setup.method.local_epochs, m.optimizer, m.dropout, (x > 0).double().mean(0),
                     torch.bincount(y, minlength=setup.num_classes).double() / y.numel(), noised)


def run_attacks(setup, run_config, attacks: list[Attack], party: str = SERVER) -> list[Finding]:
    """Every attack on every target it names: the attack sees only `party`'s view and its aux. A progress
    bar over the (attack, target) pairs unless run_config.progress is false."""
    from tqdm.auto import tqdm
    view = adversary_view(setup.federation.transcript, party)
    knowledge = public_knowledge(setup, run_config)
    plan: list[tuple[Attack, str | None, NoInput | None]] = []  # in order; a target of None: no input at all
    for attack in attacks:
        attack = for_method(attack, knowledge)  # FedSpray/FedOMD: gradient inversion of their uploads
        try:
            plan.extend((attack, target, None) for target in attack.targets(view, knowledge, len(setup.clients)))
        except NoInput as e:  # nothing in the view to name a target by (e.g. secagg-collusion on a plain run)
            plan.append((attack, None, e))
    findings = []
    bar = tqdm(plan, desc="attacks", unit="target", leave=False,
               disable=not run_config.progress or len(plan) < 2)
    for attack, target, no_input in bar:
        if no_input is not None:
            findings.append(Finding(attack.name, "all", {"no_input": str(no_input)}, {}, {"adversary": party}))
            continue
        bar.set_postfix_str(f"{attack.name} {target}", refresh=False)
        try:
            aux = attack.declare_aux(setup, knowledge, target)
            start = time.perf_counter()
            reconstruction = attack.attack(view, aux)
        except NoInput as e:
            findings.append(Finding(attack.name, target, {"no_input": str(e)}, {}, {"adversary": party}))
            continue
        seconds = time.perf_counter() - start
        details = {"adversary": party, "seconds": round(seconds, 3)}
        try:
            truth = attack.truth(setup, target)
        except NoTruth as e:
            findings.append(Finding(attack.name, target, {"no_truth": str(e)}, {}, details))
            continue
        metrics, baseline = attack.score(reconstruction, truth, aux)
        findings.append(Finding(attack.name, target, metrics, baseline, details))
    return findings


HEADLINES = {"gradient-inversion": ("auc_per_feature", "auc", "f1_at_density", "cosine", "label_acc",
                                    "word_auc", "overrep_auc", "detected_precision"),
             "label-inference": ("js", "cosine"), "stats-reconstruction": (),
             "he-key-recovery": ("key_fraction", "uploads_recovered", "cosine", "max_abs_error"),
             "dp-noise-removal": ("relative_rmse", "max_abs_error"), "participation": ("accuracy", "f1", "exact_rounds"),
             "split-features": ("cosine", "reid_top1", "reid_auc", "sample_cosine"), "split-labels": ("ari", "label_acc"),
             "split-topology": ("edges_received", "row_share", "edge_share"),
             "split-decoder": ("sample_cosine", "sample_reid_auc", "cosine", "reid_top1", "reid_auc", "public_cosine"),
             "membership": ("auc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.1", "epsilon_lb", "accountant_epsilon", "dp_covers"),
             "link-stealing": ("auc", "ap"), "edge-recovery": ("auc", "ap", "dm_auc", "exact_precision"),
             "secagg-collusion": ("seed_recovered", "recovered", "max_abs_error"),
             "dp-collusion": ("remaining_ratio", "noise_removed"),
             "crypten-seed-search": ("seed_found", "candidates", "recovered_fraction", "max_abs_error"),
             "dp-audit": ("epsilon_lower_bound", "epsilon_accountant", "one_run_epsilon", "one_run_fdp_epsilon",
                          "gdp_epsilon_estimate", "gaussian_fit_epsilon_estimate"),
             "split-dp-sensitivity": ("ratio", "ratio_m1", "ratio_m3", "within_accounted")}


def _headline(f: dict) -> list[tuple[str, object, object]]:
    m, b = f["metrics"], f["baseline"]
    if "no_input" in m:
        return [("no input", m["no_input"], "")]
    if "no_truth" in m:
        return [("not scored", m["no_truth"], "")]
    if f["name"] == "stats-reconstruction" and "by_class_size" not in m:  # FedLoG's class drift
        return [(key, m[key], b.get(key)) for key in ("cosine", "overrep_auc", "label_l1")]
    if f["name"] == "stats-reconstruction":
        return [(f"size {s} raw_auc/exact", f"{v['raw_auc']:.3f}/{v['exact_fraction']:.2f}",
                 f"{b['by_class_size'][s]['raw_auc']:.3f}") for s, v in m["by_class_size"].items()]
    rows = []
    for key in HEADLINES[f["name"]]:
        if key in m:
            base = b.get(key, b.get(f"uniform_{key}"))
            permuted = b.get("words_permuted", {}).get(key)
            if permuted is not None and base is not None:  # both nulls of an unordered reconstruction
                base = f"{base:.3f}, words permuted {permuted:.3f}"
            if b.get(f"{key}_aux") is not None and base is not None:  # and the best answer from the aux alone
                base = f"{base:.3f}, aux alone {b[f'{key}_aux']:.3f}"
            rows.append((key, m[key], base))
    return rows


def format_findings(findings: list[dict]) -> str:
    """A short table: attack, target, metric, value, baseline."""
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)
    cells = [["attack", "target", "metric", "value", "baseline"]]
    for f in findings:
        for key, value, base in _headline(f):
            cells.append([f["name"], f["target"], key, fmt(value), fmt(base)])
    widths = [max(len(r[i]) for r in cells) for i in range(5)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells)
