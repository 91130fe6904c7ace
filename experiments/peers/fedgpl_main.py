r"""The FedGPL authors' code (github.com/gzn00417/FedGPL, commit 13f30a2) run on the CPU here, on samples
fixed once, for experiments/authors_side_by_side_fedgpl.py.

Not a dependency of privfgl: it runs from its own checkout in its own scratch venv (torch 2.13 CPU,
torch_geometric 2.8.1, pytorch_lightning, torchmetrics), e.g.

    python -m venv /tmp/peer-gpl/venv
    /tmp/peer-gpl/venv/bin/pip install torch==2.13.0 torch_geometric==2.8.1 pytorch_lightning torchmetrics
    FEDGPL_SRC=/tmp/peer-gpl/src /tmp/peer-gpl/venv/bin/python experiments/peers/fedgpl_main.py \
        prepare --dataset_name Cora --num_classes 7                # the missing induced graphs, their functions
    ... fedgpl_main.py export --dataset_name Cora --num_classes 7 --out cora-authors.pt   # privfgl's file
    ... fedgpl_main.py run --dataset_name Cora --num_classes 7 --ratio 0.1 --epochs 50 -S 0   # main.py's flags

The three commands:
- prepare: most induced-graph files are not in the public repository (it keeps only files < 4 MiB).
  Every induced graph is rebuilt with the repository's own data_preprocess functions
  (induced_graphs_nodes / _edges / _graphs) from its shipped feature_reduced.data and node/edge index
  files, under PEER_DATA_SEED (default 2023, main.py's seed) for torch, numpy and random. The few
  shipped induced-graph files are rebuilt too: only 58-61 % of their rows are rows of the shipped
  feature file, so they come from another feature version.
- export: the clients' samples exactly as the code's get_dataset builds them (iid; every task's
  train support + query and test support + query shuffled by `random` and cut into 3 clients) under
  PEER_DATA_SEED, written in privfgl's samples file (privfgl/methods/fedgpl/samples_file.py), with
  each graph's B.8 part (found by matching it to the induced-graph files) and the feature table.
- run: main.py's model and Trainer (frozen GraphCL trunk from pre_trained_gnn/, VPG `Ours`, `Answer`,
  `Server`) on those samples: get_dataset is called under PEER_DATA_SEED's `random` state, so every
  training seed (-S) trains on the exported samples; the training seed then drives everything else,
  as main.py's seed_everything does.

Shims, none in the training arithmetic: `fed_gnn(gnn_list)`, which the HiDTA branch calls every
epoch after the first and the repository defines nowhere (a NameError), is a no-op: the GNN copies all
hold the frozen checkpoint (requires_grad False, so Adam skips them), so averaging them would change
nothing; wandb is not imported (main.py's logger; the scores are read
from the code's own validation outputs, below); 'cuda' device strings in `.to(...)` become the CPU
(the code hard-codes them); the Trainer runs on the CPU (main.py's accelerator='gpu', devices=[3]),
without the checkpoint callback (it only saves the best model; the best ACC is read here).
Per epoch the code's on_validation_epoch_end averages each task's clients' test ACC/F1 and then the
three tasks; the subclass below records exactly those numbers before the code clears them, printed as
`PEER_EPOCH e ACC a F1 f N n E e G g` (fractions). `PEER_RUN_START seed t`, `PEER_RUN_END t` (perf_counter)
bracket a run; `PEER_SAMPLES_SHA s` is the SHA-256 of the packed samples the run trains on (the export
prints the same line for the file's content).
"""
import hashlib
import importlib.util
import os
import pickle as pk
import random
import sys
import time
from pathlib import Path

SRC = os.environ.get("FEDGPL_SRC", "/tmp/peer-gpl/src")
DATA_SEED = int(os.environ.get("PEER_DATA_SEED", "2023"))
HERE = Path(__file__).resolve()

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))


def _cpu(value):
    return "cpu" if isinstance(value, str) and value.startswith("cuda") else value


_tensor_to, _module_to = torch.Tensor.to, torch.nn.Module.to
torch.Tensor.to = lambda self, *a, **k: _tensor_to(self, *(_cpu(v) for v in a), **{n: _cpu(v) for n, v in k.items()})
torch.nn.Module.to = lambda self, *a, **k: _module_to(self, *(_cpu(v) for v in a), **{n: _cpu(v) for n, v in k.items()})

sys.modules.setdefault("wandb", type(sys)("wandb"))  # imported by nothing we run; main.py is not run
os.chdir(SRC)  # the code reads ./data and ./pre_trained_gnn
sys.path.insert(0, SRC)


def _samples_file_module():
    spec = importlib.util.spec_from_file_location(
        "samples_file", HERE.parents[2] / "privfgl" / "methods" / "fedgpl" / "samples_file.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare(args) -> None:
    import data_preprocess as dp  # noqa: PLC0415 - the authors' module
    data = pk.load(open(f"./data/{args.dataset_name}/feature_reduced.data", "rb"))
    _seed(DATA_SEED)
    dp.induced_graphs_nodes(data, args.dataset_name, args.num_classes, 100, 300)
    dp.induced_graphs_edges(data, args.dataset_name, args.num_classes, 100, 300)
    dp.induced_graphs_graphs(data, args.dataset_name, args.num_classes, 100, 300)
    Path(f"./data/{args.dataset_name}/induced_graphs/PEER_DATA_SEED").write_text(str(DATA_SEED))


def _fixed_dataset(get_dataset):
    """get_dataset under PEER_DATA_SEED's `random` state; the caller's state is restored after."""
    def fixed(*a, **k):
        marker = Path(f"./data/{a[0]}/induced_graphs/PEER_DATA_SEED")
        if not marker.exists() or marker.read_text() != str(DATA_SEED):
            raise SystemExit(f"induced graphs of {a[0]} not built under PEER_DATA_SEED={DATA_SEED}: run prepare")
        state = random.getstate()
        random.seed(DATA_SEED)
        try:
            return get_dataset(*a, **k)
        finally:
            random.setstate(state)
    return fixed


def _parts(dataset_name: str, num_classes: int) -> dict:
    """sha of (x, edge_index) -> B.8 part (0 train-support .. 3 test-query) over the induced-graph files."""
    out = {}
    for task_id in range(3 * num_classes):
        for part, (t, d) in enumerate((("train", "support"), ("train", "query"), ("test", "support"), ("test", "query"))):
            with open(f"./data/{dataset_name}/induced_graphs/task{task_id}.meta.{t}.{d}", "rb") as f:
                for g in pk.load(f)["pos"]:
                    out[_graph_key(g.x, g.edge_index)] = part
    return out


def _graph_key(x, edge_index) -> str:
    return hashlib.sha256(x.to(torch.float32).numpy().tobytes() + edge_index.to(torch.int64).numpy().tobytes()).hexdigest()


def _packed(dataset: dict, parts: dict | None, sf) -> list[dict]:
    clients = []
    for task in ("node", "edge", "graph"):
        for train, test in zip(dataset[task]["train"], dataset[task]["test"]):
            graphs = []
            for which, batch in ((0, train), (2, test)):
                for g in batch.to_data_list():
                    part = parts[_graph_key(g.x, g.edge_index)] if parts is not None else which
                    graphs.append((g.x, g.edge_index, int(g.y), part))
            clients.append(sf.pack_client(task, graphs))
    return clients


def _digest(clients: list[dict]) -> str:
    h = hashlib.sha256()
    for c in clients:
        for key in ("x", "node_ptr", "edge_index", "edge_ptr", "y"):
            h.update(c[key].numpy().tobytes())
    return h.hexdigest()


def export(args) -> None:
    from lib.data import get_dataset  # noqa: PLC0415
    sf = _samples_file_module()
    dataset = _fixed_dataset(get_dataset)(args.dataset_name, args.num_classes, args.num_users, args.data_type, args.alpha)
    clients = _packed(dataset, _parts(args.dataset_name, args.num_classes), sf)
    features = pk.load(open(f"./data/{args.dataset_name}/feature_reduced.data", "rb")).x
    sha = sf.write_samples(args.out, args.dataset_name, args.num_classes, clients, features)
    print(f"PEER_SAMPLES_SHA {_digest(clients)}")
    print(f"PEER_SAMPLES_FILE {args.out} sha256 {sha}")


def run(args) -> None:
    import pytorch_lightning as pl  # noqa: PLC0415
    import lib.train  # noqa: PLC0415
    from lib import GNN, Answer, Ours, Server  # noqa: PLC0415
    lib.train.get_dataset = _fixed_dataset(lib.train.get_dataset)
    lib.train.fed_gnn = lambda gnn_list: None  # called by HiDTA's branch, defined nowhere; see the docstring
    record = []

    class Recorded(Server):
        def on_validation_epoch_end(self):
            tasks = {t: [dict(o) for o in self.validation_step_outputs[t]] for t in ("node", "edge", "graph")}
            super().on_validation_epoch_end()
            acc = {t: sum(o["ACC"] for o in v) / len(v) for t, v in tasks.items()}
            f1 = {t: sum(o["F1"] for o in v) / len(v) for t, v in tasks.items()}
            record.append(acc)
            print(f"PEER_EPOCH {self.current_epoch} ACC {sum(acc.values()) / 3:.6f} F1 {sum(f1.values()) / 3:.6f} "
                  f"N {acc['node']:.6f} E {acc['edge']:.6f} G {acc['graph']:.6f}", flush=True)

    print(f"PEER_RUN_START {args.seed} {time.perf_counter():.3f}", flush=True)
    pl.seed_everything(args.seed)  # main.py
    gnn = GNN(args.input_dim, hid_dim=args.hidden_dim, out_dim=args.hidden_dim, gcn_layer_num=2, gnn_type=args.gnn_type)
    gnn.load_state_dict(torch.load(f"./pre_trained_gnn/{args.dataset_name}.{args.pre_train_algorithm}.{args.gnn_type}.pth",
                                   map_location="cpu"))
    for p in gnn.parameters():
        p.requires_grad = False
    prompt = Ours(token_dim=args.input_dim, ratio=args.ratio)
    answer = Answer(args.hidden_dim, args.num_classes, args.answer_layers)
    module = Recorded(gnn, prompt, answer, **{k: v for k, v in vars(args).items() if k not in ("command", "out")})
    sf = _samples_file_module()
    print(f"PEER_SAMPLES_SHA {_client_digest(module, sf)}", flush=True)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=args.epochs, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
                         check_val_every_n_epoch=1, num_sanity_val_steps=0)
    trainer.fit(module)
    print(f"PEER_RUN_END {time.perf_counter():.3f}", flush=True)


def _client_digest(module, sf) -> str:
    """The digest of the samples the run's clients hold (train then test, as export packs them)."""
    clients = []
    for client in module.client_list:
        graphs = [(g.x, g.edge_index, int(g.y), 0) for loader in (client.train_dataloader, client.val_dataloader)
                  for g in loader.dataset.to_data_list()]
        clients.append(sf.pack_client(client.task, graphs))
    return _digest(clients)


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command not in ("prepare", "export", "run"):
        raise SystemExit("usage: fedgpl_main.py prepare|export|run [main.py's flags] [--out PATH (export)]")
    out = None
    rest = sys.argv[2:]
    if "--out" in rest:
        i = rest.index("--out")
        out, rest = rest[i + 1], rest[:i] + rest[i + 2:]
    sys.argv = [sys.argv[0]] + rest
    from lib.options import args_parser  # noqa: PLC0415
    args = args_parser()
    args.out = out
    {"prepare": prepare, "export": export, "run": run}[command](args)


if __name__ == "__main__":
    main()
