"""Cross-check of privfgl's `secagg` against Flower's own SecAgg+ (issue #18; an optional extra).

The same K client vectors (uniform in [-1, 1], seeded) go to privfgl's `secagg` (in this process,
the project's venv) and to Flower's SecAgg+ (``SecAggPlusWorkflow`` + ``secaggplus_mod`` in a Ray
simulation, run in a SEPARATE venv by re-invoking this file there with ``--flower-worker``: Flower is
never installed in the project's venv). Both sums are compared with the exact (math.fsum) sum and with
each other, within both grids' bounds:

  privfgl: K * 2^-(f+1) (its public fixed-point grid, round to nearest);
  Flower:  stochastic rounding onto the grid 2c/Q per client (c = clipping_range, Q =
           quantization_range) -> K * 2c/Q on the sum, plus the quantised weight it divides by
           (|sum| * K * 2c/Q / (K * (1 + c) * Q / (2c)), negligible): bound K * 2c/Q * (1 + |sum|).
Flower returns a weighted average: each client reports num_examples = 1 and max_weight = 1.0, and the
sum is the average times the number of clients aggregated.

    /tmp/flwr-venv: python3 -m venv /tmp/flwr-venv && /tmp/flwr-venv/bin/pip install "flwr[simulation]==1.42.0"
    python experiments/secagg_flower_check.py                     # K 10, n 92000
    python experiments/secagg_flower_check.py --clients 5 --size 1000 --flower-python /path/to/python
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def flower_worker(inputs: str, output: str, num_shares: int, threshold: int, clipping_range: float,
                  quantization_range: int) -> None:
    """Runs in the Flower venv: one round of SecAgg+ over the clients of ``inputs`` (K x n .npy)."""
    from flwr.client import ClientApp, NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.common import Context, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
    from flwr.simulation import run_simulation

    xs = np.load(inputs)
    num_clients, size = xs.shape
    captured: dict = {}

    class Client(NumPyClient):
        def __init__(self, k: int):
            self.k = k

        def fit(self, parameters, config):
            return [xs[self.k]], 1, {}  # num_examples = 1: the weighted average is the plain average

    def client_fn(context: Context):
        return Client(int(context.node_config["partition-id"])).to_client()

    class Capture(FedAvg):
        def aggregate_fit(self, server_round, results, failures):
            params, metrics = super().aggregate_fit(server_round, results, failures)
            captured["average"] = parameters_to_ndarrays(params)[0]
            captured["aggregated"] = len(results)
            return params, metrics

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = Capture(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=num_clients,
                           min_available_clients=num_clients,
                           initial_parameters=ndarrays_to_parameters([np.zeros(size)]))
        legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=1), strategy=strategy)
        workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(
            num_shares=num_shares, reconstruction_threshold=threshold, clipping_range=clipping_range,
            quantization_range=quantization_range, max_weight=1.0))
        t0 = time.perf_counter()
        workflow(grid, legacy)
        captured["round_s"] = time.perf_counter() - t0

    client_app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod])
    t0 = time.perf_counter()
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=num_clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": 2}})
    wall = time.perf_counter() - t0
    total = captured["average"] * captured["aggregated"]
    np.save(output, total)
    with open(output + ".json", "w") as f:
        json.dump({"aggregated": captured["aggregated"], "round_s": captured.get("round_s"), "wall_s": wall}, f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--size", type=int, default=92000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clipping-range", type=float, default=8.0)
    parser.add_argument("--quantization-range", type=int, default=2**22)
    parser.add_argument("--flower-python", default="/tmp/flwr-venv/bin/python",
                        help="the python of the separate venv that has flwr[simulation]")
    parser.add_argument("--flower-worker", nargs=2, metavar=("INPUTS", "OUTPUT"), help=argparse.SUPPRESS)
    parser.add_argument("--num-shares", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--threshold", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flower_worker:
        flower_worker(*args.flower_worker, args.num_shares, args.threshold, args.clipping_range,
                      args.quantization_range)
        return

    import torch  # noqa: PLC0415 - the project's venv only

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from protocols import get_protocol  # noqa: PLC0415

    rng = np.random.default_rng(args.seed)
    xs = rng.uniform(-1.0, 1.0, (args.clients, args.size))
    exact = np.array([math.fsum(col) for col in xs.T])
    protocol = get_protocol("secagg")
    _, _, t = protocol.setup(args.clients)
    t0 = time.perf_counter()
    result = protocol.aggregate([torch.from_numpy(x.copy()) for x in xs])
    privfgl_s = time.perf_counter() - t0
    ours = result.total.numpy()
    if not os.path.exists(args.flower_python):
        sys.exit(f"{args.flower_python} not found: install Flower in a separate venv (see the docstring)")
    with tempfile.TemporaryDirectory(prefix="privfgl-flower-") as tmp:
        inputs, output = os.path.join(tmp, "inputs.npy"), os.path.join(tmp, "flower_sum.npy")
        np.save(inputs, xs)
        t0 = time.perf_counter()
        run = subprocess.run(
            [args.flower_python, os.path.abspath(__file__), "--flower-worker", inputs, output,
             "--num-shares", str(args.clients), "--threshold", str(t),
             "--clipping-range", str(args.clipping_range), "--quantization-range", str(args.quantization_range)],
            capture_output=True, text=True)
        flower_wall = time.perf_counter() - t0
        if run.returncode != 0:
            sys.exit(f"Flower run failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
        theirs = np.load(output)
        with open(output + ".json") as f:
            meta = json.load(f)
    c, q, k = args.clipping_range, args.quantization_range, args.clients
    flower_bound = k * 2 * c / q * (1 + float(np.abs(exact).max()))
    ours_err = float(np.abs(ours - exact).max())
    theirs_err = float(np.abs(theirs - exact).max())
    gap = float(np.abs(ours - theirs).max())
    print(f"K = {k}, n = {args.size}, seed {args.seed}; privfgl secagg: complete graph, t = {t}, "
          f"f = {result.details['frac_bits']}; Flower SecAgg+: num_shares {k}, threshold {t}, "
          f"clipping_range {c:g}, quantization_range 2^{math.log2(q):g}, max_weight 1")
    print(f"{'':<16}{'max |err| vs exact':>20}{'bound':>11}{'seconds':>10}")
    print(f"{'privfgl secagg':<16}{ours_err:>20.2e}{result.error_bound:>11.2e}{privfgl_s:>10.3f}")
    print(f"{'Flower SecAgg+':<16}{theirs_err:>20.2e}{flower_bound:>11.2e}{meta['round_s'] or float('nan'):>10.3f}"
          f"   (whole simulation incl. Ray start {meta['wall_s']:.1f} s; subprocess {flower_wall:.1f} s;"
          f" {meta['aggregated']} clients aggregated)")
    ok = gap <= result.error_bound + flower_bound and ours_err <= result.error_bound and theirs_err <= flower_bound
    print(f"max |privfgl - Flower| = {gap:.2e} <= {result.error_bound + flower_bound:.2e} (sum of the bounds): "
          f"{'agree' if ok else 'DISAGREE'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
