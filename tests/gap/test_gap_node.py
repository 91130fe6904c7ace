"""Node-level GAP (`unit=node`): removing a node moves each hop's sums of the other nodes by at most √D
(and by exactly √D for a node with D neighbours) on a degree-bounded graph; the DP-SGD step is the clipped
per-node gradients' sum plus σC noise; the record composes every step and hop under one accountant."""
import math

import pytest
import torch
import torch.nn.functional as F

from privfgl.experiment import RunConfig, run
from privfgl.federation import SERVER
from privfgl.methods.gap.accounting import calibrate_sigma, spent_epsilon
from privfgl.methods.gap.aggregation import clean_edges, neighbour_sum, perturbed_hops
from privfgl.methods.gap.model import Classifier, Encoder
from privfgl.methods.gap.node import private_step
from privfgl.methods.gap.params import GapParams
from privfgl.privacy import GaussianMechanism, NoiseSource, clip_rows
from privfgl.privacy.dpsgd import bound_degree

D = 4


@pytest.fixture(autouse=True)
def _partition_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def remove(ei: torch.Tensor, w: int) -> torch.Tensor:
    return ei[:, (ei[0] != w) & (ei[1] != w)]


def test_removing_a_node_moves_the_other_nodes_hop_sums_by_at_most_sqrt_d(cora):
    n = int(cora.num_nodes)
    b = clean_edges(bound_degree(cora.edge_index, n, D, seed=0), n)
    deg = torch.bincount(b[1], minlength=n)
    assert int(deg.max()) <= D
    stated = GapParams(unit="node", degree=D).sensitivity
    xs, _ = perturbed_hops(torch.randn(n, 8, generator=torch.Generator().manual_seed(0)), b, 3, None, None)
    nodes = torch.cat([torch.nonzero(deg == D).view(-1)[:60], torch.nonzero(deg == 1).view(-1)[:20]])
    for w in nodes.tolist():
        gone = remove(b, w)
        # B has max degree <= D, so bounding B - w again changes nothing: no refill (the stated assumption holds)
        assert torch.equal(clean_edges(bound_degree(gone, n, D, seed=0), n), gone)
        keep = torch.arange(n) != w
        for x in xs[:3]:
            moved = float((neighbour_sum(x, b) - neighbour_sum(x, gone))[keep].norm())
            assert moved <= stated + 1e-5
            assert moved == pytest.approx(math.sqrt(int(deg[w])), abs=1e-5)  # = √D for a node with D neighbours


def test_a_private_step_applies_the_clipped_per_node_gradients_sum_plus_sigma_c_noise():
    torch.manual_seed(0)
    model = Classifier(6, 3, 1, dropout=0.0)
    xs, y = [torch.randn(9, 6), torch.randn(9, 6)], torch.randint(0, 3, (9,))
    names = [n for n, _ in model.named_parameters()]
    per_node = []
    for i in range(9):  # per-node gradients one by one, as autograd gives them
        model.zero_grad()
        F.cross_entropy(model([x[i:i + 1] for x in xs]), y[i:i + 1]).backward()
        per_node.append(torch.cat([p.grad.reshape(-1) for _, p in model.named_parameters()]))
    clipped_sum = clip_rows(torch.stack(per_node), 0.3).sum(0)
    noise = NoiseSource(7).gaussian(clipped_sum.shape, 2.0 * 0.3)
    expected = (clipped_sum + noise) / 9
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    private_step(model, opt, xs, y, 0.3, GaussianMechanism(2.0, 0.3), NoiseSource(7))
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.allclose((before - after) / 0.5, expected.float(), atol=1e-5)
    assert names == [n for n, _ in model.named_parameters()]


def test_the_encoders_per_node_gradients_match_autograd_one_node_at_a_time():
    torch.manual_seed(1)
    model = Encoder(5, 4, 3, 2, dropout=0.0)
    x, y = torch.randn(6, 5), torch.randint(0, 3, (6,))
    from privfgl.methods.gap.node import per_node_grads
    g = per_node_grads(model, {n: p.detach() for n, p in model.named_parameters()}, x, y)
    for i in range(6):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for n, p in model.named_parameters():
            assert torch.allclose(g[n][i], p.grad, atol=1e-6)


def test_the_node_level_record_composes_every_step_and_hop_under_one_accountant(planetoid_root):
    cfg = RunConfig(method="gap", dataset="cora", partition="louvain", clients=10, rounds=3, local_epochs=2,
                    data_root=str(planetoid_root), download=False, progress=False,
                    method_params={"unit": "node", "degree": D, "encoder_rounds": 2, "epsilon": 4.0, "seed": 2})
    record, setup = run(cfg)
    dp = record["privacy"]["dp"]
    # uniform FedAvg weights: a client's training-node count is data-dependent at node level, never uploaded
    uploads = setup.federation.transcript.view(SERVER, name="model_update", round=2)  # payloads: last round
    assert len(uploads) == 10 and {float(m.tensors["n"]) for m in uploads} == {1.0}
    assert dp["releases_by_stage"] == {"encoder_steps": 4, "hops": 2, "classifier_steps": 6} and dp["releases"] == 12
    sigma = calibrate_sigma(4.0, 1e-5, 12, "rdp")
    assert dp["sigma"] == sigma and dp["noise_std"] == sigma * math.sqrt(D) and dp["sgd_noise_std"] == sigma
    assert record["privacy"]["epsilon"] == spent_epsilon(sigma, 12, 1e-5, "rdp") <= 4.0
    assert dp["unit"].startswith("one node") and "refill" in dp["assumption"]


def test_a_sampled_step_sums_the_drawn_nodes_clipped_gradients_plus_noise_over_q_times_t():
    """sample_rate q < 1: the step draws one coin per node from the client's source, then its noise; the
    gradient is (Σ over the drawn nodes of clip(g_t) + N(0, (σC)²)) / (q·T), T all the given nodes."""
    torch.manual_seed(0)
    model = Classifier(6, 3, 1, dropout=0.0)
    xs, y = [torch.randn(40, 6), torch.randn(40, 6)], torch.randint(0, 3, (40,))
    per_node = []
    for i in range(40):
        model.zero_grad()
        F.cross_entropy(model([x[i:i + 1] for x in xs]), y[i:i + 1]).backward()
        per_node.append(torch.cat([p.grad.reshape(-1) for _, p in model.named_parameters()]))
    mirror = NoiseSource(7)
    drawn = mirror.coins(40, 0.3)
    assert 0 < int(drawn.sum()) < 40
    clipped_sum = clip_rows(torch.stack(per_node)[drawn], 0.3).sum(0)
    expected = (clipped_sum + mirror.gaussian(clipped_sum.shape, 2.0 * 0.3)) / (0.3 * 40)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    private_step(model, torch.optim.SGD(model.parameters(), lr=0.5), xs, y, 0.3, GaussianMechanism(2.0, 0.3),
                 NoiseSource(7), sample_rate=0.3)
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.allclose((before - after) / 0.5, expected.float(), atol=1e-5)


def test_a_step_that_draws_no_node_releases_the_noise_alone():
    model = Encoder(5, 4, 3, 2, dropout=0.0)
    x, y = torch.randn(3, 5), torch.randint(0, 3, (3,))
    mirror = NoiseSource(3)
    assert not mirror.coins(3, 1e-9).any()
    d = sum(p.numel() for p in model.parameters())
    expected = mirror.gaussian((d,), 1.0) / (1e-9 * 3)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    private_step(model, torch.optim.SGD(model.parameters(), lr=1e-9), x, y, 1.0, GaussianMechanism(1.0, 1.0),
                 NoiseSource(3), sample_rate=1e-9)
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.allclose((before - after) / 1e-9, expected.float(), rtol=1e-3)


def test_sampled_steps_are_charged_at_rate_q_and_the_hops_at_rate_one_by_opacus(planetoid_root):
    """The record's ε is opacus' RDP accountant on the history [(σ, q, steps), (σ, 1, hops)], within 0.01 below
    the target; σ falls below the full-batch σ of the same releases (amplification by sampling)."""
    from opacus.accountants import RDPAccountant
    from privfgl.privacy.accounting import RDP_ALPHAS
    cfg = RunConfig(method="gap", dataset="cora", partition="louvain", clients=10, rounds=3, local_epochs=2,
                    data_root=str(planetoid_root), download=False, progress=False,
                    method_params={"unit": "node", "degree": D, "encoder_rounds": 2, "epsilon": 4.0, "seed": 2,
                                   "sample_rate": 0.5})
    record, _ = run(cfg)
    dp = record["privacy"]["dp"]
    assert dp["sample_rate"] == 0.5 and dp["releases_by_stage"] == {"encoder_steps": 4, "hops": 2, "classifier_steps": 6}
    accountant = RDPAccountant()
    accountant.history = [(dp["sigma"], 0.5, 10), (dp["sigma"], 1.0, 2)]
    eps = accountant.get_epsilon(delta=1e-5, alphas=RDP_ALPHAS)
    assert record["privacy"]["epsilon"] == pytest.approx(eps, rel=1e-9) and 3.99 <= eps <= 4.0
    assert dp["sigma"] < calibrate_sigma(4.0, 1e-5, 12, "rdp")
