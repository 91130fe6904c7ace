"""dp-audit on LapGraph: canary pairs in client 0's noisy adjacency, scored from the server's view of the
released canary entries. On the correct mechanism the 95 % one-run lower bound stays at or below ε (and is
not vacuous); a mutant that adds less noise than it accounts (experiments/mutants.py LPG1) lifts it above, also
at the level of a family of 24 audits (`family=24`: each bound at 1 − 0.05/24, LapGraph's)."""
import numpy as np
import pytest

from attacks.audit import prepare_attacks, run_attacks
from attacks.dp.dp_audit import DPAudit
from attacks.dp.lapgraph_audit import CanaryPairs
from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER



def audit(planetoid_root, epsilon: float, canaries: int = 20000):
    cfg = RunConfig(method="lapgraph", dataset="cora", partition="louvain", clients=10, rounds=1, local_epochs=1,
                    data_root=str(planetoid_root), download=False, progress=False,
                    method_params={"epsilon": epsilon, "seed": 5})
    attacks = [DPAudit(canaries=canaries, family=24)]
    record, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    (finding,) = run_attacks(setup, cfg, attacks, "server")
    return record, setup, finding.metrics


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_the_lower_bound_stays_under_epsilon_and_is_not_vacuous(planetoid_root, epsilon):
    record, setup, m = audit(planetoid_root, epsilon)
    assert m["epsilon_accountant"] == record["privacy"]["epsilon"] == epsilon
    # the family's level first: LPG1 (the entries 2ε_entries-DP) is caught there too
    assert not m["caught_family"] and m["epsilon_lower_bound_family"] <= epsilon
    assert m["family"] == 24 and m["confidence_family"] == pytest.approx(1 - 0.05 / 24)
    assert 0.75 * epsilon < m["epsilon_lower_bound_family"] < m["epsilon_lower_bound"]  # same scores, higher level
    assert not m["caught"] and m["epsilon_lower_bound"] <= epsilon
    assert m["epsilon_lower_bound"] > 0.8 * epsilon  # tight enough to catch noise at half its scale (2ε)
    assert m["canaries"] == 20000 and m["delta"] == 0.0
    # only the audited client disclosed its canary entries, once, to the server
    (message,) = setup.federation.transcript.view(SERVER, name="lapgraph_release")
    assert set(message.tensors) == {"canary_entries"}


def test_canary_pairs_carry_one_unit_entry_each_and_only_the_included_ones():
    pairs = CanaryPairs(1000, 3, client=0)
    entries = pairs.entries().numpy()
    assert set(np.unique(entries)) <= {0.0, 1.0} and np.array_equal(entries == 1.0, pairs.coins)
    assert 400 < pairs.coins.sum() < 600  # fair coins
