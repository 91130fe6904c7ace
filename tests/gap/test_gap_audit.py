"""dp-audit on GAP: canary edges in one client's noisy hop sums, scored from the server's view of the
released sums. On the correct mechanism the 95 % lower bound stays at or below the accountant's ε (and
is not vacuous); every mutant that adds less noise than accounted (experiments/mutants.py GP*) lifts it
above."""
import numpy as np
import pytest

from attacks.audit import prepare_attacks, run_attacks
from attacks.dp.canary_edges import CanaryEdges
from attacks.dp.dp_audit import DPAudit
from privfgl.experiment import RunConfig, run


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def audit(planetoid_root, edge: str, **params):
    cfg = RunConfig(method="gap", dataset="cora", partition="louvain", clients=10, rounds=1, local_epochs=1,
                    hidden=16, data_root=str(planetoid_root), download=False, progress=False,
                    method_params={"epsilon": 8.0, "hops": 4, "edge": edge, "encoder_rounds": 1, "seed": 5, **params})
    attacks = [DPAudit(canaries=6000)]
    record, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method))
    (finding,) = run_attacks(setup, cfg, attacks, "server")
    return record, finding.metrics


@pytest.mark.parametrize("edge", ["undirected", "directed"])
def test_the_lower_bound_stays_under_the_accountants_epsilon_and_is_not_vacuous(planetoid_root, edge):
    record, m = audit(planetoid_root, edge)
    assert m["epsilon_accountant"] == record["privacy"]["epsilon"] <= 8.0
    assert not m["caught"] and m["epsilon_lower_bound"] <= m["epsilon_accountant"]
    assert m["epsilon_lower_bound"] > 0.6 * m["epsilon_accountant"]  # tight enough to catch σ/√2 (ε ≈ 11)
    assert m["hops"] == 4 and m["canaries"] == 6000


def test_canary_rows_carry_the_stated_sensitivity_and_only_the_included_canaries():
    for r in (2, 1, 5):  # undirected edge, directed edge, node of degree 5
        edges = CanaryEdges(50, 3, 8, r)
        norm = np.sqrt(r)
        rows = edges.rows(1).reshape(50, -1)  # one canary's rows side by side
        assert np.allclose(rows.norm(dim=1).numpy(), norm * edges.coins)
        assert np.allclose(edges.observe(edges.rows(2)), edges.coins)  # noiseless: the coin itself


def test_node_level_canary_nodes_bound_the_hops_part_of_the_claim(planetoid_root):
    """unit=node: canary nodes of degree D in the hop sums; the bound holds against the K hops' own ε (the
    DP-SGD steps are in the record's ε but not audited here) and is not vacuous against it."""
    record, m = audit(planetoid_root, "undirected", unit="node", degree=4)
    assert m["epsilon_accountant"] == record["privacy"]["epsilon"] > m["epsilon_accountant_hops"]
    assert not m["caught"] and m["epsilon_lower_bound"] <= m["epsilon_accountant_hops"]
    assert m["epsilon_lower_bound"] > 0.6 * m["epsilon_accountant_hops"]
