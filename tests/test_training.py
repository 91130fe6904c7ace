"""Local training engines: the stacked engine is the per-client loop, only faster."""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from privfgl.training import LoopedTrainers, ModelConfig, StackedTrainers, init_params, make_trainers


def random_clients(sizes=(30, 50, 20), features=40, classes=4, seed=0, dense=False):
    g = torch.Generator().manual_seed(seed)
    clients = []
    for n in sizes:
        x = torch.randn(n, features, generator=g) if dense else (torch.rand(n, features, generator=g) < 0.1).float()
        ei = to_undirected(torch.randint(0, n, (2, 2 * n), generator=g))
        ei = ei[:, ei[0] != ei[1]]
        y = torch.randint(0, classes, (n,), generator=g)
        clients.append(Data(x=x, edge_index=ei, y=y, train_mask=torch.rand(n, generator=g) < 0.5))
    return clients


# Features: sparse bag-of-words (one sparse product), dense with balanced clients (one padded batched
# product) and dense with one client much larger than the others (a product per client).
FEATURES = {"sparse": {}, "dense-balanced": {"dense": True}, "dense-unbalanced": {"dense": True, "sizes": (10, 80, 10)}}


@pytest.mark.parametrize("swapped_grad", [False, True])
@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("model", ["gcn", "sage", "sgc", "mlp"])
def test_stacked_engine_trains_exactly_like_one_model_per_client(monkeypatch, model, features, swapped_grad):
    """swapped_grad: the last layer's weight gradient as (gᵀ h)ᵀ, as for clients of SWAPPED_GRAD_ROWS rows."""
    from privfgl.models import stacked
    if swapped_grad:
        monkeypatch.setattr(stacked, "SWAPPED_GRAD_ROWS", 1)
    clients = random_clients(**FEATURES[features])
    cfg = ModelConfig(model=model, hidden=16, dropout=0.0)
    init = [init_params(cfg, 40, 4, seed=k) for k in range(3)]
    anchors = [init_params(cfg, 40, 4, seed=99)] * 3
    looped, stacked = LoopedTrainers(clients, cfg, init), StackedTrainers(clients, cfg, init)
    for engine in (looped, stacked):
        engine.train(5, prox_mu=0.1, anchors=anchors)
    for a, b in zip(looped.predict(), stacked.predict()):
        assert torch.allclose(a, b, atol=1e-5)
    for k in range(3):
        pa, pb = looped.get_params(k), stacked.get_params(k)
        assert pa.keys() == pb.keys()
        for name in pa:
            assert torch.allclose(pa[name], pb[name], atol=1e-5), name


@pytest.mark.parametrize("model", ["gcn", "sage"])
@pytest.mark.parametrize("dense", [True, False])
def test_a_dense_input_is_propagated_once_so_no_step_gathers_hidden_rows(monkeypatch, model, dense):
    """Dense features: the first layer is (Â x) W with Â x computed once, not Â (x W), so no training
    step multiplies the graph by [N, hidden] rows (the gather that outgrows the cache at 1M nodes).
    Bag-of-words features keep Â (x W): Â x would be denser than x."""
    from privfgl.models import stacked
    widths = []
    product = stacked.FixedSparse.__matmul__
    graph_products = lambda a, h: widths.append(h.shape[1]) if a.a.shape[0] == a.a.shape[1] else None
    monkeypatch.setattr(stacked.FixedSparse, "__matmul__", lambda a, h: graph_products(a, h) or product(a, h))
    cfg = ModelConfig(model=model, hidden=16, dropout=0.5)
    engine = StackedTrainers(random_clients(dense=dense), cfg, [init_params(cfg, 40, 4, seed=k) for k in range(3)])
    engine.train(3)
    gathered_hidden = widths.count(16)
    if dense:
        assert gathered_hidden == 0 and widths.count(40) == 1  # x [N, 40] propagated once
    else:
        assert gathered_hidden == 3  # once per step


def test_the_swapped_weight_gradient_is_autograds_up_to_rounding():
    from privfgl.models.stacked import _BatchedLinear
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 50, 8, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(3, 8, 4, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(_BatchedLinear.apply, (h, w))
    upstream = torch.randn(3, 50, 4, dtype=torch.float64, generator=g)
    ours = torch.autograd.grad((_BatchedLinear.apply(h, w) * upstream).sum(), (h, w))
    theirs = torch.autograd.grad((torch.bmm(h, w) * upstream).sum(), (h, w))
    assert torch.equal(ours[0], theirs[0])  # the input's gradient is the same product
    assert torch.allclose(ours[1], theirs[1], rtol=1e-12, atol=0)


def test_a_client_model_depends_only_on_its_own_data():
    clients = random_clients()
    cfg = ModelConfig(hidden=16, dropout=0.0)
    init = [init_params(cfg, 40, 4, seed=0)] * 3
    before = StackedTrainers(clients, cfg, init)
    before.train(5)
    changed = random_clients()
    changed[1].x = 1.0 - changed[1].x  # only client 1's private data differs
    changed[1].y = (changed[1].y + 1) % 4
    after = StackedTrainers(changed, cfg, init)
    after.train(5)
    # Other clients' models are unchanged up to float rounding (the shared kernels may sum in a
    # different order); client 1's own model moves by orders of magnitude more.
    for k in (0, 2):
        for name, p in before.get_params(k).items():
            assert torch.allclose(p, after.get_params(k)[name], rtol=0, atol=1e-6)
    assert max((p - after.get_params(1)[n]).abs().max() for n, p in before.get_params(1).items()) > 1e-2


def test_set_and_get_params_touch_only_the_named_client():
    clients = random_clients()
    cfg = ModelConfig(hidden=8)
    engine = StackedTrainers(clients, cfg, [init_params(cfg, 40, 4, seed=k) for k in range(3)])
    new = init_params(cfg, 40, 4, seed=7)
    untouched = engine.get_params(0)
    engine.set_params(2, new)
    assert all(torch.equal(engine.get_params(2)[n], new[n]) for n in new)
    assert all(torch.equal(engine.get_params(0)[n], untouched[n]) for n in untouched)


def test_auto_engine_falls_back_to_the_loop_for_gat_and_stacked_refuses_it():
    clients = random_clients()
    cfg = ModelConfig(model="gat", hidden=16)
    init = [init_params(cfg, 40, 4, seed=0)] * 3
    assert isinstance(make_trainers(clients, cfg, init, "auto"), LoopedTrainers)
    with pytest.raises(ValueError, match="looped"):
        make_trainers(clients, cfg, init, "stacked")
    with pytest.raises(ValueError, match="unknown engine"):
        make_trainers(clients, cfg, init, "warp")


@pytest.mark.parametrize("sizes", [(3, 3, 3), (4, 1, 3), (2, 0, 5)])
def test_block_graph_pads_each_client_to_the_largest_and_back(sizes):
    """pad puts client k's rows at k * n_max with zeros after them; unpad undoes it, gradients included."""
    from privfgl.models.stacked import BlockGraph
    xs = [torch.randn(n, 2) for n in sizes]
    graph = BlockGraph(xs, [torch.zeros(2, 0, dtype=torch.long)] * len(sizes))
    rows = torch.cat(xs).requires_grad_(True)
    padded = graph.pad(rows)
    n_max = max(sizes)
    assert padded.shape == (len(sizes) * n_max, 2)
    for k, (x, n) in enumerate(zip(xs, sizes)):
        assert torch.equal(padded[k * n_max:k * n_max + n], x)
        assert not padded[k * n_max + n:(k + 1) * n_max].any()
    back = graph.unpad(padded * torch.arange(1.0, padded.shape[0] + 1)[:, None])
    weight = torch.cat([torch.arange(k * n_max + 1.0, k * n_max + n + 1) for k, n in enumerate(sizes)])
    assert torch.equal(back, rows * weight[:, None])
    back.sum().backward()
    assert torch.equal(rows.grad, weight[:, None].expand_as(rows))


@pytest.mark.parametrize("engine", [LoopedTrainers, StackedTrainers])
def test_the_proximal_term_pulls_each_client_towards_its_anchor(engine):
    # One SGD step: w ← w − lr·(∇L + μ·(w − anchor)), so against the same step without the term the weights
    # differ by exactly −lr·μ·(w₀ − anchor): towards the anchor, at the rate μ.
    clients = random_clients()
    cfg = ModelConfig(model="gcn", hidden=16, dropout=0.0, lr=0.1, weight_decay=0.0, optimizer="sgd")
    init = [init_params(cfg, 40, 4, seed=k) for k in range(3)]
    anchors = [init_params(cfg, 40, 4, seed=99)] * 3
    with_term, without = engine(clients, cfg, init), engine(clients, cfg, init)
    with_term.train(1, prox_mu=0.5, anchors=anchors)
    without.train(1)
    for k in range(3):
        for name, w0 in init[k].items():
            expected = -0.1 * 0.5 * (w0 - anchors[k][name])
            got = with_term.get_params(k)[name] - without.get_params(k)[name]
            assert torch.allclose(got, expected, atol=1e-6), (k, name)
