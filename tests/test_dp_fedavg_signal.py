"""experiments/dp_fedavg_public_settings.py `signal`: the stand-in's class means are redrawn exactly as the
generator drew them (the features regenerate to the bit), and a changed draw is refused, not silently used."""
import importlib

import pytest
import torch

from privfgl.data import load_dataset


@pytest.fixture(scope="module")
def script():
    return importlib.import_module("experiments.dp_fedavg_public_settings")


def test_the_redrawn_class_means_are_the_generator_s(script):
    graph = load_dataset("sbm-cora", seed=1)
    means = script.class_means("sbm-cora", graph, 1)
    assert means.shape == (7, 1433)
    centred = graph.x.double() - means[graph.y]  # what is left is the N(0, I) noise
    assert abs(float(centred.mean())) < 0.01 and abs(float(centred.std()) - 1.0) < 0.01
    per_class = torch.stack([graph.x.double()[graph.y == c].mean(0) for c in range(7)])
    assert float(torch.nn.functional.cosine_similarity(per_class, means).min()) > 0.3  # the classes' own means


def test_another_graph_s_draw_is_refused(script):
    with pytest.raises(RuntimeError, match="differ from the graph's"):
        script.class_means("sbm-cora", load_dataset("sbm-cora", seed=2), 1)
