r"""OpenFGL's own entry point (its repository's main.py), for the whole-process benchmark of issue #21.

OpenFGL is not a dependency of privfgl. Install the peer beside the venv, without touching its pins
(OpenFGL's remaining imports — torch, torch_geometric, scikit-learn, networkx, scipy — are the venv's):

    .venv/bin/pip install --no-deps --target /tmp/openfgl openfgl-lib==1.1.0 scikit-network==0.33.5 munkres==3.0.0
    mkdir -p /tmp/openfgl-root/global/subgraph_fl && cp -r $PRIVFGL_DATA/Cora /tmp/openfgl-root/global/subgraph_fl/

and run it with OpenFGL's own flags (its defaults match privfgl's FedAvg: GCN, 2 layers, 64 hidden,
Adam lr 0.01, weight decay 5e-4, dropout 0.5, 3 local epochs):

    OPENFGL_LIB=/tmp/openfgl python experiments/peers/openfgl_main.py --root /tmp/openfgl-root \
        --simulation_mode subgraph_fl_louvain --num_clients 10 --num_rounds 100 --fl_algorithm fedavg --seed 0

Two shims, both outside OpenFGL's training path: the library folder goes on sys.path, and torch.load
gets `weights_only=False` (OpenFGL 1.1.0 predates torch 2.6's default; it loads only the client
files it wrote itself).
"""
import functools
import os
import sys

sys.path.insert(0, os.environ.get("OPENFGL_LIB", "/tmp/openfgl"))

import torch  # noqa: E402

torch.load = functools.partial(torch.load, weights_only=False)

import openfgl.config as config  # noqa: E402  (parses sys.argv on import, as in OpenFGL's main.py)
from openfgl.flcore.trainer import FGLTrainer  # noqa: E402

args = config.args
args.dataset = args.dataset or ["Cora"]
args.model = args.model or ["gcn"]
args.metrics = args.metrics or ["accuracy"]
FGLTrainer(args).train()
