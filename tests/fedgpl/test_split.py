"""FedGPL's split protocol (spec B.3), its DP on split messages and HiDTA (B.5, B.7)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from scipy import stats
from torch_geometric.data import Batch, Data

from privfgl.federation import SERVER, Federation, Transcript, client_name
from privfgl.methods.fedgpl import hidta
from privfgl.methods.fedgpl.prompt import Head, make_prompt
from privfgl.methods.fedgpl.split import M1, M2, M3, M4, SplitClient, SplitMessageError, SplitServer, split_step
from privfgl.methods.fedgpl.trunk import Trunk
from privfgl.privacy.spec import check_dp_for_run
from privfgl.privacy.split_dp import SplitDP
import protocols

D, H, C = 12, 16, 3


def batch_of(n_graphs: int = 4, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for i in range(n_graphs):
        n = 10 + i
        ring = torch.arange(n)
        edges = torch.stack([ring, (ring + 1) % n])
        graphs.append(Data(x=torch.randn(n, D, generator=g), edge_index=torch.cat([edges, edges.flip(0)], 1),
                           y=torch.tensor([i % C])))
    return Batch.from_data_list(graphs)


def parties(prompt_kind: str = "vpg", lr: float = 0.0):
    torch.manual_seed(0)
    trunk = Trunk(D, H, dropout=0.0)
    prompt, head = make_prompt(prompt_kind, D, seed=0), Head(H, C, seed=0)
    client = SplitClient(prompt, head, torch.optim.SGD([*prompt.parameters(), *head.parameters()], lr=lr))
    return client, SplitServer(trunk, torch.optim.SGD(trunk.parameters(), lr=lr))


@pytest.mark.parametrize("prompt_kind", ["vpg", "gpf", "prog"])
def test_the_split_step_gives_the_unsplit_models_gradients(prompt_kind):
    batch = batch_of()
    client, server = parties(prompt_kind)
    fed = Federation(1, protocols.get_protocol("plain"), Transcript("all"))
    split_step(fed, 0, 0, client, server, batch)
    split = [p.grad.clone() for p in (*client.parameters(), *server.trunk.parameters())]
    ref_client, ref_server = parties(prompt_kind)
    x, e, b = ref_client.prompt(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
    F.cross_entropy(ref_client.head(ref_server.trunk(x, e, b, batch.num_graphs)), batch.y).backward()
    whole = [p.grad for p in (*ref_client.parameters(), *ref_server.trunk.parameters())]
    assert len(split) == len(whole)
    for got, want in zip(split, whole):
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-5)


def test_each_message_crosses_the_channel_to_the_party_that_sees_it():
    fed = Federation(2, protocols.get_protocol("plain"), Transcript("all"))
    client, server = parties()
    split_step(fed, 0, 1, client, server, batch_of())
    to_server = {m.name for m in fed.transcript.view(SERVER)}
    to_client = {m.name for m in fed.transcript.view(client_name(1))}
    assert to_server == {M1, M3} and to_client == {M2, M4}
    m1 = fed.transcript.view(SERVER, name=M1)[0]
    assert set(m1.tensors) == {"x", "edge_index", "batch"}  # the topology travels in the clear
    assert m1.nbytes == sum(t.numel() * t.element_size() for t in m1.tensors.values())
    assert fed.transcript.view(client_name(0)) == []


def laplace_spec(epsilon: float, clip: float, on: str = "split"):
    return check_dp_for_run(f"laplace:epsilon={epsilon},clip={clip},on={on},mode=local,seed=3", "fedgpl", "plain")


def test_the_laplace_scale_is_the_clip_over_epsilon():
    dp = SplitDP(laplace_spec(0.5, 2.0))
    noise = dp.protect(M1, torch.zeros(4000, 25, dtype=torch.float64)).flatten()
    assert dp.mechanism.scale == 4.0
    assert stats.kstest(noise.numpy(), stats.laplace(scale=4.0).cdf).pvalue > 1e-3
    assert stats.kstest(noise.numpy(), stats.laplace(scale=3.6).cdf).pvalue < 1e-6  # the test can tell 10 % apart


def test_the_gaussian_std_is_sigma_times_the_clip():
    dp = SplitDP(check_dp_for_run("gaussian:sigma=1.5,clip=2.0,on=m1,mode=local,seed=3", "fedgpl", "plain"))
    noise = dp.protect(M1, torch.zeros(4000, 25, dtype=torch.float64)).flatten()
    assert dp.mechanism.std == 3.0
    assert stats.kstest(noise.numpy(), stats.norm(scale=3.0).cdf).pvalue > 1e-3
    assert stats.kstest(noise.numpy(), stats.norm(scale=2.7).cdf).pvalue < 1e-6  # the test can tell 10 % apart


def test_rows_are_clipped_to_the_bound_before_the_noise():
    dp = SplitDP(check_dp_for_run("laplace:epsilon=1e9,clip=1.5,on=m1,mode=local", "fedgpl", "plain"))
    rows = torch.randn(50, 8, dtype=torch.float64) * 10
    out = dp.protect(M1, rows)
    assert torch.all(out.abs().sum(1) <= 1.5 + 1e-6)
    assert torch.equal(dp.protect(M3, rows), rows)  # an unprotected message passes unchanged


def test_the_transcript_holds_the_noised_messages_and_the_server_computes_on_them():
    fed = Federation(1, protocols.get_protocol("plain"), Transcript("all"))
    client, server = parties()
    batch = batch_of()
    dp = SplitDP(check_dp_for_run("laplace:epsilon=1,clip=1,on=m1,mode=local,seed=1", "fedgpl", "plain"))
    split_step(fed, 0, 0, client, server, batch, dp)
    sent = fed.transcript.view(SERVER, name=M1)[0].tensors
    clean, _, _ = client.prompt(batch.x, batch.edge_index, batch.batch, batch.num_graphs)
    assert sent["x"].shape == clean.shape and not torch.allclose(sent["x"], clean, atol=0.1)
    server.trunk.eval()
    h = server.trunk(sent["x"], sent["edge_index"], sent["batch"], batch.num_graphs)
    assert torch.allclose(fed.transcript.view(client_name(0), name=M2)[0].tensors["H"], h, atol=1e-6)


def test_composition_counts_one_release_per_noised_message_per_round():
    dp = SplitDP(laplace_spec(0.1, 1.0, on="m1"))
    for _ in range(5):
        dp.protect(M1, torch.zeros(3, 2))
        dp.end_round()
    report = dp.report()
    assert report["dp"]["releases"] == 5 and report["epsilon"] == pytest.approx(0.5)
    both = SplitDP(check_dp_for_run("gaussian:sigma=2,clip=1,on=split,mode=local", "fedgpl", "plain"))
    both.end_round()
    assert both.report()["dp"]["releases"] == 4 and both.report()["dp"]["noise_source"] == "os"


@pytest.mark.parametrize("text, match", [
    ("laplace:epsilon=1,clip=1,on=m1,mode=central", "noised by their sender; use mode=local"),
    ("laplace:epsilon=1,clip=1,on=prompt_update,mode=local", "not built; protect the split messages"),
])
def test_bad_split_dp_specs_are_refused_with_one_line(text, match):
    with pytest.raises(ValueError, match=match):
        check_dp_for_run(text, "fedgpl", "plain")


def test_a_missing_or_misshaped_message_is_named():
    _, server = parties()
    batch = batch_of()
    with pytest.raises(SplitMessageError, match="prompted_graph: missing field 'batch'"):
        server.forward({"x": batch.x, "edge_index": batch.edge_index}, batch.num_graphs)
    with pytest.raises(SplitMessageError, match="field 'x' has shape"):
        server.forward({"x": batch.x[:, 0], "edge_index": batch.edge_index, "batch": batch.batch}, batch.num_graphs)
    x, h = server.forward({"x": batch.x, "edge_index": batch.edge_index, "batch": batch.batch}, batch.num_graphs)
    with pytest.raises(SplitMessageError, match=r"embedding_grads: grad has shape \(2, 16\); expected \(4, 16\)"):
        server.backward(x, h, {"grad": torch.zeros(2, H)})


def test_hidta_rows_are_nonnegative_and_sum_to_one_and_the_diagonal_follows_the_mode():
    g = torch.Generator().manual_seed(0)
    start, now = torch.randn(3, 20, generator=g, dtype=torch.float64), torch.randn(3, 20, generator=g, dtype=torch.float64)
    for mode in ("paper", "code"):
        tau = hidta.transferability(now, start, mode)
        assert torch.all(tau >= 0) and torch.allclose(tau.sum(1), torch.ones(3, dtype=torch.float64))
    delta = now - start
    raw_self = delta.norm(dim=1)
    raw_cross = (now[1] - start[0]) @ delta[0] / delta[0].norm()
    paper = hidta.transferability(now, start, "paper")
    if raw_cross > 0:  # Eq. 5 with a = b is ||θ'_t − θ_t||
        assert paper[0, 1] / paper[0, 0] == pytest.approx(float(raw_cross / raw_self[0]))


def test_the_client_factors_cancel_so_task_group_sums_give_eq7_exactly():
    g = torch.Generator().manual_seed(1)
    thetas = torch.randn(9, 6, generator=g, dtype=torch.float64)
    tasks = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    start = torch.randn(3, 6, generator=g, dtype=torch.float64)
    now = torch.stack([thetas[[j for j in range(9) if tasks[j] == t]].mean(0) for t in range(3)])
    tau = hidta.transferability(now, start)
    c = torch.tensor([hidta.client_factor(thetas[j], now[tasks[j]]) for j in range(9)], dtype=torch.float64)
    # Eq. 6-7 client by client: τ_{i←j} = c_i c_j τ_{p_i←p_j}
    for i in range(9):
        weights = torch.tensor([c[i] * c[j] * tau[tasks[i], tasks[j]] for j in range(9)], dtype=torch.float64)
        direct = (weights.unsqueeze(1) * thetas).sum(0) / weights.sum()
        sums = torch.stack([(c[[j for j in range(9) if tasks[j] == q]].unsqueeze(1)
                             * thetas[[j for j in range(9) if tasks[j] == q]]).sum(0) for q in range(3)])
        counts = torch.stack([c[[j for j in range(9) if tasks[j] == q]].sum() for q in range(3)])
        assert torch.allclose(hidta.combine(tau, sums, counts)[tasks[i]], direct)
    assert math.isfinite(float(tau.sum()))
