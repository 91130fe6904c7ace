"""GraphCL pretraining of the FedGPL trunk: the loss, the augmentations, training, determinism, cache."""
from __future__ import annotations

import math
from dataclasses import asdict

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import is_undirected, to_undirected

from privfgl.methods.fedgpl import pretrain
from privfgl.methods.fedgpl.pretrain import PretrainConfig, augment, nt_xent, pretrain_graphcl, pretrained_trunk
from privfgl.methods.fedgpl.trunk import Trunk

IN_DIM = 16
TINY = PretrainConfig(epochs=3, batch_size=16, hidden=16)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny graphs train faster on one thread, and two threads stall when other work shares the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def two_families(num: int = 40, seed: int = 0) -> list[Data]:
    """Alternating rings with features around +1 and stars with features around -1, 20-30 nodes each."""
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for i in range(num):
        n = int(torch.randint(20, 31, (1,), generator=g))
        if i % 2 == 0:
            src, dst, shift = torch.arange(n), (torch.arange(n) + 1) % n, 1.0
        else:
            src, dst, shift = torch.zeros(n - 1, dtype=torch.long), torch.arange(1, n), -1.0
        x = torch.randn(n, IN_DIM, generator=g) + shift
        graphs.append(Data(x=x, edge_index=to_undirected(torch.stack([src, dst]), num_nodes=n)))
    return graphs


def test_nt_xent_matches_graphcl_formula():
    z1, z2 = torch.randn(6, 8), torch.randn(6, 8)
    sim = torch.exp(torch.nn.functional.cosine_similarity(z1[:, None], z2[None], dim=2) / 0.2)
    pos = sim.diagonal()
    expected = -torch.log(pos / (sim.sum(dim=1) - pos)).mean()
    assert torch.allclose(nt_xent(z1, z2, 0.2), expected, atol=1e-5)


def test_nt_xent_identical_views_lower_than_independent():
    z = torch.randn(32, 16)
    assert nt_xent(z, z, 0.2) < nt_xent(z, torch.randn(32, 16), 0.2) - 1.0


def test_augmentations():
    graph = two_families(2)[0]  # a ring
    n, e = graph.num_nodes, graph.num_edges
    torch.manual_seed(0)
    dropped = augment(graph, "drop_node", 0.2)
    assert dropped.num_nodes == n - int(n * 0.2) and dropped.x.shape == (dropped.num_nodes, IN_DIM)
    assert dropped.num_edges < e and int(dropped.edge_index.max()) < dropped.num_nodes
    perturbed = augment(graph, "drop_edge", 0.2)
    assert torch.equal(perturbed.x, graph.x) and perturbed.num_edges < e and is_undirected(perturbed.edge_index)
    masked = augment(graph, "mask_attr", 0.2)
    changed = (masked.x != graph.x).any(dim=1)
    assert int(changed.sum()) == int(n * 0.2) and torch.allclose(masked.x[changed], graph.x.mean(dim=0).expand_as(masked.x[changed]))
    assert torch.equal(masked.edge_index, graph.edge_index)
    sub = augment(graph, "subgraph", 0.2)
    assert sub.num_nodes == n - int(n * 0.2)
    assert sub.num_edges == 2 * (sub.num_nodes - 1)  # a connected piece of a ring is a path
    with pytest.raises(ValueError):
        augment(graph, "rotate", 0.2)


def test_loss_decreases_on_structured_graphs():
    config = PretrainConfig(epochs=10, batch_size=16, lr=3e-3, hidden=16, dropout=0.0,
                            augmentations=("drop_node", "drop_edge", "mask_attr", "subgraph"))
    state, losses = pretrain_graphcl(two_families(), IN_DIM, config, seed=0)
    assert len(losses) == 10 and all(math.isfinite(v) for v in losses)
    assert sum(losses[-3:]) / 3 < losses[0] - 0.2
    Trunk(IN_DIM, 16).load_state_dict(state)


def test_deterministic_per_seed_and_leaves_global_rng_alone():
    graphs = two_families()
    rng_before = torch.get_rng_state()
    state_a, losses_a = pretrain_graphcl(graphs, IN_DIM, TINY, seed=3)
    assert torch.equal(torch.get_rng_state(), rng_before)
    state_b, losses_b = pretrain_graphcl(graphs, IN_DIM, TINY, seed=3)
    state_c, losses_c = pretrain_graphcl(graphs, IN_DIM, TINY, seed=4)
    assert losses_a == losses_b and all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert losses_a != losses_c and not all(torch.equal(state_a[k], state_c[k]) for k in state_a)


def test_rejects_bad_input():
    with pytest.raises(ValueError):
        pretrain_graphcl(two_families(), IN_DIM, PretrainConfig(augmentations=("rotate",)))
    with pytest.raises(ValueError):
        pretrain_graphcl(two_families(1), IN_DIM, TINY)


def test_cache_hit_loads_without_training(tmp_path, monkeypatch):
    graphs = two_families()
    trunk, info = pretrained_trunk(graphs, IN_DIM, "toy", TINY, seed=1, cache_dir=tmp_path)
    assert info["cache"] == "miss" and info["config"] == asdict(TINY) and len(info["losses"]) == 3
    assert info["path"].startswith(str(tmp_path / "toy-seed1-")) and info["path"].endswith(".pt")
    assert [p.name for p in tmp_path.iterdir()] == [info["path"].rsplit("/", 1)[1]]  # no temp file left

    def no_training(*args, **kwargs):
        raise AssertionError("pretrain_graphcl called on a cache hit")

    monkeypatch.setattr(pretrain, "pretrain_graphcl", no_training)
    again, hit = pretrained_trunk(graphs, IN_DIM, "toy", TINY, seed=1, cache_dir=tmp_path)
    assert hit["cache"] == "hit" and hit["path"] == info["path"]
    assert hit["losses"] == info["losses"] and hit["seconds"] == info["seconds"]
    assert isinstance(again, Trunk)
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in trunk.state_dict().items())
    with pytest.raises(AssertionError):  # another config, seed or key is another file
        pretrained_trunk(graphs, IN_DIM, "toy", PretrainConfig(epochs=4, batch_size=16, hidden=16), seed=1,
                         cache_dir=tmp_path)
    with pytest.raises(AssertionError):
        pretrained_trunk(graphs, IN_DIM, "toy", TINY, seed=2, cache_dir=tmp_path)


def test_cache_paths_depend_on_config_and_default_to_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVFGL_CACHE", str(tmp_path))
    a = pretrain.cache_path("cora-svd100", 100, PretrainConfig(), 0)
    assert a.parent == tmp_path / "fedgpl" and a.name.startswith("cora-svd100-seed0-")
    assert a == pretrain.cache_path("cora-svd100", 100, PretrainConfig(), 0)
    assert a != pretrain.cache_path("cora-svd100", 100, PretrainConfig(temperature=0.5), 0)
    assert a != pretrain.cache_path("cora-svd100", 64, PretrainConfig(), 0)
    assert a != pretrain.cache_path("cora-svd100", 100, PretrainConfig(augmentations=("drop_node",)), 0)


def test_a_trunk_file_in_the_authors_key_names_is_the_servers_trunk(tmp_path):
    """trunk=file:PATH (the authors ship GraphCL checkpoints keyed conv_layers.0/1): the run's trunk holds the
    file's weights exactly; a file that is not such a state_dict is one line naming it."""
    from privfgl.methods.fedgpl.params import resolve_params
    from privfgl.methods.fedgpl.run import trunk_from_file
    source = Trunk(IN_DIM, 16)
    path = tmp_path / "authors.pth"
    torch.save({k.replace("conv1.", "conv_layers.0.").replace("conv2.", "conv_layers.1."): v
                for k, v in source.state_dict().items()}, path)
    p = resolve_params({"dim": IN_DIM, "hidden": 16, "trunk": f"file:{path}"})
    trunk, info = trunk_from_file(str(path), p)
    assert all(torch.equal(a, b) for a, b in zip(trunk.state_dict().values(), source.state_dict().values()))
    assert info["cache"] == "file" and info["seconds"] == 0.0
    with pytest.raises(ValueError) as e:
        trunk_from_file(str(path), resolve_params({"dim": IN_DIM, "hidden": 8}))
    assert "\n" not in str(e.value) and f"trunk file {path}" in str(e.value) and "valid:" in str(e.value)
