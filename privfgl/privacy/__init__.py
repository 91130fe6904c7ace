"""Differential privacy for privfgl: calibrated mechanisms, clipping, accounting, message DP,
DP-SGD for GNNs and DP class statistics.

    noise.py        NoiseSource: seeded torch.Generator, or OS entropy (secure=True)
    mechanisms.py   LaplaceMechanism(ε, Δ1), GaussianMechanism(σ, Δ2)
    clipping.py     clip_vector / clip_rows / clip_tensors (L1 or L2)
    accounting.py   opacus RDP/PRV ε, Laplace basic/advanced composition, PrivacyAccountant
    spec.py         the --dp grammar: parse_dp_spec, check_dp_for_run, DPSpecError
    message_dp.py   MessageDP: clip + noise + account one aggregated message (local/central/distributed);
                    guard_denominators: the floor under revealed denominators before a division
    dpsgd.py        node-level DP-SGD on degree-bounded k-hop subgraphs (torch.func per-sample grads)
    stats.py        DP release of per-class (n, S1, S2) with clipped rows (O-pFGL)
    report.py       the run record's privacy fields
"""
from privfgl.privacy.accounting import (
    ACCOUNTANTS,
    PrivacyAccountant,
    gaussian_epsilon,
    laplace_advanced_composition,
    laplace_basic_composition,
    noise_multiplier_for,
)
from privfgl.privacy.clipping import clip_rows, clip_tensors, clip_vector
from privfgl.privacy.mechanisms import GaussianMechanism, LaplaceMechanism
from privfgl.privacy.message_dp import MessageDP, floor_denominators, guard_denominators
from privfgl.privacy.noise import NoiseSource
from privfgl.privacy.report import privacy_block
from privfgl.privacy.spec import (DENOMINATORS, MESSAGE_ALIASES, METHOD_MESSAGES, DPSpec, DPSpecError, check_dp_for_run,
                                  parse_dp_spec, valid_targets)

__all__ = [
    "ACCOUNTANTS", "DENOMINATORS", "DPSpec", "DPSpecError", "GaussianMechanism", "LaplaceMechanism", "MESSAGE_ALIASES",
    "METHOD_MESSAGES", "MessageDP", "NoiseSource", "PrivacyAccountant", "check_dp_for_run", "clip_rows",
    "clip_tensors", "clip_vector", "floor_denominators", "gaussian_epsilon", "guard_denominators",
    "laplace_advanced_composition", "laplace_basic_composition", "noise_multiplier_for", "parse_dp_spec",
    "privacy_block", "valid_targets",
]
