"""`privfgl audit ... --engine ray`: the audit of a run whose clients were Ray actors.

The attacks read the adversary's view, which the driver holds (the server's transcript, with every byte that
crossed). Scoring them needs the truth, the clients' private data, which the driver never holds. So the audit
runs in its own actor, the auditor's (``AuditorHost``): it loads the dataset itself, as the client actors do, and
runs attacks.audit.run_attacks on the view handed to it, exactly as an in-process audit does. What returns to the
driver is the attacks' report (the findings), as in process.

Not built: the attacks scored against what exists only inside the run's client actors (the plaintext uploads of
each secure sum, the clipped uploads, who took part under sampling) and those that prepare the run (canaries):
``RAY_AUDIT_REFUSED``; and FedGPL's audit, whose attacks read what its run builds (``RAY_AUDIT_REFUSED_METHODS``).
"""
from __future__ import annotations

import dataclasses

RAY_AUDIT_REFUSED = {
    "secagg-collusion": "it is scored against each client's plaintext upload, which stays on the client's actor",
    "he-key-recovery": "it is scored against each client's plaintext upload, which stays on the client's actor",
    "crypten-seed-search": "it is scored against each client's plaintext upload, which stays on the client's actor",
    "participation": "who took part is each client's own coin, drawn on its actor, and never leaves it",
    "dp-audit": "its canaries are inserted into the run by the driver (audit preparation)",
    "dp-noise-removal": "it regenerates seeded noise, and under --engine ray the noise is drawn from OS entropy",
    "dp-collusion": "it is scored against the clients' clipped uploads, which stay on their actors",
}
RAY_AUDIT_REFUSED_METHODS = {
    "fedgpl": "its attacks read the sample graphs, population features and split truth that the run builds on "
              "the clients' actors and the trunk's task, which the auditor's actor does not rebuild",
}


def check_ray_audit(attacks, method: str) -> None:
    """ValueError (one line) for an attack, or a method, the audit on actors does not run."""
    if method in RAY_AUDIT_REFUSED_METHODS:
        raise ValueError(f"audit --engine ray: method {method!r} is not built: {RAY_AUDIT_REFUSED_METHODS[method]}; "
                         "run its audit in process")
    for attack in attacks:
        if attack.name in RAY_AUDIT_REFUSED:
            valid = sorted(_valid())
            raise ValueError(f"audit --engine ray: attack {attack.name!r} is not built: "
                             f"{RAY_AUDIT_REFUSED[attack.name]}; valid: {', '.join(valid)}")


def _valid() -> list[str]:
    from attacks.audit import ATTACKS  # noqa: PLC0415
    return [name for name in ATTACKS if name not in RAY_AUDIT_REFUSED]


class AuditorHost:
    """The auditor: loads the clients' data of the run `cfg` (the truth, and the aux an attack declares)."""

    def __init__(self, cfg):
        from privfgl.experiment import build_clients, seed_everything  # noqa: PLC0415
        seed_everything(cfg.seed)
        self.clients = build_clients(cfg).clients

    def audit(self, setup, cfg, attacks, party: str, threads: int) -> list[dict]:
        """The findings of `attacks` from `party`'s view of the run (setup: the driver's, no client data), with
        the driver's torch thread count (an in-process audit's), so that float reductions sum in its order."""
        import torch  # noqa: PLC0415

        from attacks.audit import run_attacks  # noqa: PLC0415
        torch.set_num_threads(threads)
        setup = dataclasses.replace(setup, clients=self.clients)
        return [f.as_record() for f in run_attacks(setup, dataclasses.replace(cfg, progress=False), attacks, party)]


def audit_on_ray(setup, cfg, attacks, party: str, timeout_s: float) -> list[dict]:
    """Run the audit in an auditor actor on the driver's Ray; its findings (the attacks' report)."""
    import ray  # noqa: PLC0415
    import torch  # noqa: PLC0415

    from protocols.base import PartyFailure  # noqa: PLC0415
    host = ray.remote(num_cpus=0.01, max_restarts=0)(AuditorHost).remote(cfg)
    view_only = dataclasses.replace(setup, remote=None, tracker=None)
    try:
        ref = host.audit.remote(view_only, cfg, attacks, party, torch.get_num_threads())
        done, _ = ray.wait([ref], timeout=timeout_s)
        if not done:
            raise PartyFailure(f"audit --engine ray: the auditor's actor sent no findings within {timeout_s:g} s")
        return ray.get(ref)
    finally:
        ray.kill(host)
