"""Cost and accuracy of every secure-aggregation backend: time per phase, bytes, max error.

Each row sums K client vectors of n unit-scale values (uniform in [-1, 1], float64) once (after
one warm-up sum of the same size; `--repeat R`: the median of R sums) and reports the phase times,
the bytes each client uploads, the upload bytes per value, the max abs error against a float64
reference sum, the backend's own error bound, and the total time relative to `plain` on the same
inputs. Key generation and process start-up are excluded from the rows and printed separately.

    python experiments/bench_protocols.py --quick           # small grid, in-process backends
    python experiments/bench_protocols.py                   # n 1e3..1e6, K 2..100 (skips noted)
    python experiments/bench_protocols.py --multiprocess    # add crypten and secagg multi-process rows
    python experiments/bench_protocols.py --backends secagg secagg:kregular --clients 2 10 100
    python experiments/bench_protocols.py --secagg-profile --clients 10 --sizes 92232 --repeat 40
    python experiments/bench_protocols.py --secagg-wait 26 --clients 10 --sizes 92232 --repeat 40

`secagg` rows (complete graph, Bonawitz et al.), `secagg:kregular` rows (SecAgg+, default degree
2*ceil(log2 K)), `secagg:w2` rows (complete graph, the clients run by 2 worker processes; their
start-up is in the setup time) and `secagg:session` / `secagg:kregular-session` rows (`keys=session`:
the warm-up sum makes the c key pairs, the timed sums reuse them) are followed by a second table: seconds per round (advertise keys, share keys,
masked input, unmasking; all clients + the server, in process) and the critical path (per round
the slowest client, then the server: the latency when clients run in parallel).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from protocols import get_protocol

# label -> (backend, params, cost class used to skip the slowest combinations)
BACKENDS: dict[str, tuple[str, dict, str]] = {
    "plain": ("plain", {}, "cheap"),
    "crypten": ("crypten", {}, "shares"),
    "ckks:default": ("ckks", {"preset": "default"}, "he-heavy"),
    "ckks:sum": ("ckks", {"preset": "sum"}, "he"),
    "bfv:default": ("bfv", {"preset": "default"}, "he-heavy"),
    "bfv:sum": ("bfv", {"preset": "sum"}, "he"),
    "secagg": ("secagg", {}, "secagg-complete"),
    "secagg:kregular": ("secagg", {"graph": "kregular"}, "cheap"),
    "secagg:w2": ("secagg", {"workers": 2}, "secagg-complete"),  # the clients in 2 worker processes
    "secagg:session": ("secagg", {"keys": "session"}, "secagg-complete"),  # c key pairs kept across sums
    "secagg:kregular-session": ("secagg", {"graph": "kregular", "keys": "session"}, "cheap"),
}
MP_LABEL = "crypten:mp"
MP_LABELS: dict[str, tuple[str, dict]] = {MP_LABEL: ("crypten", {"mode": "multiprocess"}),
                                          "secagg:mp": ("secagg", {"mode": "multiprocess"})}


def too_slow(cost: str, clients: int, size: int) -> str | None:
    """A note when a combination is skipped by default (estimated minutes on 2 cores), else None."""
    if cost == "he-heavy" and clients * size > 1e7:
        return "K*n > 1e7 (default HE presets: 1.3-3 s per client per 1e6 values)"
    if cost == "he" and clients * size > 2e7:
        return "K*n > 2e7 (sum HE preset)"
    if cost == "shares" and clients * clients * size > 2e9:
        return "K^2*n > 2e9 (in-process sharing is O(K^2 n))"
    if cost == "secagg-complete" and clients > 100:
        return "K > 100 (complete graph: K(K-1) X25519 agreements and PRG expansions per sum)"
    if cost == "mp" and (clients > 10 or size > 1e5):
        return "multi-process rows limited to K <= 10, n <= 1e5"
    return None


def inputs(clients: int, size: int, seed: int) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.uniform(-1.0, 1.0, size)) for _ in range(clients)]


def measure(protocol, xs: list[torch.Tensor], reference: np.ndarray, repeat: int = 1) -> dict:
    protocol.aggregate(xs)  # warm-up (and multi-process start-up), not timed
    timed = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = protocol.aggregate(xs)
        timed.append((time.perf_counter() - t0, result))
    wall, result = sorted(timed, key=lambda x: x[0])[(repeat - 1) // 2]  # the median sum (the lower one)
    size = xs[0].numel()
    return {
        **{k: result.phases[k] for k in ("protect", "aggregate", "reveal")},
        "total": wall,
        "up_per_client": max(result.bytes_up),
        "bytes_per_value": result.bytes_up[-1] / size,
        "max_err": float(np.max(np.abs(result.total.numpy() - reference))),
        "bound": result.error_bound,
        "details": result.details,
    }


PRIMITIVES = (  # (module, function, label): what one secagg sum spends its time in
    ("crypto", "add_prgs", "PRG masks: AES-128-CTR + add"), ("crypto", "agree", "X25519 agreements"),
    ("crypto", "new_keypair", "X25519 key pairs"), ("crypto", "keypair_from_seed", "X25519 key pairs"),
    ("crypto", "pair_key", "HKDF pair keys"), ("crypto", "self_mask_key", "HKDF self-mask keys"),
    ("crypto", "seal", "ChaCha20-Poly1305 seal + open"), ("crypto", "open_sealed", "ChaCha20-Poly1305 seal + open"),
    ("shamir", "split", "Shamir split + combine"), ("shamir", "combine", "Shamir split + combine"),
    ("quantize.Grid", "encode", "quantise"), ("quantize.Grid", "decode", "decode"),
    ("protocol", "array_bytes", "wire bytes of y"), ("server.Server", "add", "server add"),
)


def profile_secagg(clients: int, size: int, repeat: int, seed: int) -> None:
    """One-process secagg sums with a timer around each primitive: ms per sum, per round and per primitive."""
    import importlib
    import statistics
    from collections import Counter, defaultdict

    spent, calls = Counter(), Counter()
    for where, name, label in PRIMITIVES:
        module, _, cls = where.partition(".")
        owner = importlib.import_module(f"protocols.secagg.{module}")
        owner = getattr(owner, cls) if cls else owner
        original = getattr(owner, name)

        def timed(*a, _f=original, _label=label, **kw):
            t0 = time.perf_counter()
            out = _f(*a, **kw)
            spent[_label] += time.perf_counter() - t0
            calls[_label] += 1
            return out
        setattr(owner, name, timed)
    xs = inputs(clients, size, seed)
    walls, rounds = [], defaultdict(list)
    with get_protocol("secagg") as protocol:
        protocol.aggregate(xs)
        spent.clear(), calls.clear()
        for _ in range(repeat):
            t0 = time.perf_counter()
            result = protocol.aggregate(xs)
            walls.append(time.perf_counter() - t0)
            for name, r in result.details["round_s"].items():
                rounds[f"{name} clients"].append(r["clients"])
                rounds[f"{name} server"].append(r["server"])
    print(f"secagg, one process, K={clients}, n={size}, {repeat} sums: wall median {statistics.median(walls) * 1e3:.2f} "
          f"ms (min {min(walls) * 1e3:.2f}); ms per sum (rounds: median; primitives: mean, timers included)")
    for name, values in rounds.items():
        print(f"  {name:32s}{statistics.median(values) * 1e3:9.2f}")
    for label, seconds in spent.most_common():
        print(f"  {label:32s}{seconds / repeat * 1e3:9.2f}   ({calls[label] // repeat} calls)")
    print(f"  {'sum of the primitives':32s}{sum(spent.values()) / repeat * 1e3:9.2f}")


def secagg_wait(clients: int, size: int, repeat: int, seed: int, train_ms: float) -> None:
    """What a trainer waits for per secagg sum when each sum follows train_ms of one-thread matmuls (a
    stand-in for a round's local training): one process, against the clients in 2 worker processes
    preparing the next sum while the trainer runs (workers=2 offline=true)."""
    import statistics

    xs = inputs(clients, size, seed)
    a = torch.randn(700, 700)

    def train() -> None:
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < train_ms:
            a @ a

    print(f"secagg, K={clients}, n={size}, {repeat} sums each after {train_ms:g} ms of training: ms the trainer waits per sum")
    for label, params in (("one process", {}), ("workers=2 offline=true", {"workers": 2, "offline": True})):
        with get_protocol("secagg", **params) as protocol:
            if params:
                protocol.start_workers()
            for _ in range(5):  # warm-up: the first preparation, the workers' imports
                train(), protocol.aggregate(xs)
            walls, offline = [], []
            for _ in range(repeat):
                train()
                t0 = time.perf_counter()
                result = protocol.aggregate(xs)
                walls.append(time.perf_counter() - t0)
                offline.append(result.details.get("offline"))
        prepared = f"; {offline.count('prepared')} of {repeat} sums prepared" if params else ""
        print(f"  {label:26s} median {statistics.median(walls) * 1e3:7.2f}   min {min(walls) * 1e3:7.2f}{prepared}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="n in {1e3, 1e4, 92000}, K in {2, 10}")
    parser.add_argument("--sizes", type=float, nargs="+", help="vector sizes n (default 1e3 1e4 1e5 1e6)")
    parser.add_argument("--clients", type=int, nargs="+", help="client counts K (default 2 10 100)")
    parser.add_argument("--backends", nargs="+", choices=list(BACKENDS) + list(MP_LABELS), help="subset of rows")
    parser.add_argument("--multiprocess", action="store_true", help=f"add {', '.join(MP_LABELS)} rows")
    parser.add_argument("--all", action="store_true", help="do not skip the slow combinations")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="timed sums per row; the median is shown (default 1)")
    parser.add_argument("--secagg-profile", action="store_true",
                        help="only: time each primitive of one-process secagg sums (first --clients and --sizes)")
    parser.add_argument("--secagg-wait", type=float, metavar="TRAIN_MS",
                        help="only: the trainer's wait per secagg sum, each sum after TRAIN_MS of training, one "
                             "process vs workers=2 offline=true (first --clients and --sizes)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.secagg_profile:
        profile_secagg((args.clients or [10])[0], int((args.sizes or [92232])[0]), args.repeat, args.seed)
        return
    if args.secagg_wait is not None:
        secagg_wait((args.clients or [10])[0], int((args.sizes or [92232])[0]), args.repeat, args.seed, args.secagg_wait)
        return

    sizes = [int(s) for s in (args.sizes or ([1e3, 1e4, 92000] if args.quick else [1e3, 1e4, 1e5, 1e6]))]
    clients = args.clients or ([2, 10] if args.quick else [2, 10, 100])
    labels = args.backends or list(BACKENDS) + (list(MP_LABELS) if args.multiprocess else [])
    if "plain" not in labels:
        labels = ["plain"] + labels  # the ratio column needs it

    protocols, setup = {}, {}
    for label in labels:
        t0 = time.perf_counter()
        if label in MP_LABELS:
            name, params = MP_LABELS[label]
            protocols[label] = get_protocol(name, **params)
        else:
            name, params, _ = BACKENDS[label]
            protocols[label] = get_protocol(name, **params)
            if params.get("workers", 1) > 1:
                protocols[label].start_workers()  # every timed sum runs in the workers
        setup[label] = time.perf_counter() - t0

    header = (
        f"{'backend':<24}{'K':>4}{'n':>9}{'protect_s':>11}{'aggr_s':>9}{'reveal_s':>10}{'total_s':>9}"
        f"{'up_B/client':>13}{'B/value':>9}{'max_err':>10}{'bound':>10}{'x_plain':>9}"
    )
    print(header)
    print("-" * len(header))
    skipped, round_rows = [], []
    for size in sizes:
        for k in clients:
            xs = inputs(k, size, args.seed)
            reference = xs[0].numpy().copy()
            for x in xs[1:]:
                reference += x.numpy()
            plain_total = None
            for label in labels:
                cost = "mp" if label in MP_LABELS else BACKENDS[label][2]
                note = None if args.all else too_slow(cost, k, size)
                if note:
                    skipped.append(f"{label} K={k} n={size}: {note}")
                    continue
                row = measure(protocols[label], xs, reference, args.repeat)
                if label == "plain":
                    plain_total = row["total"]
                if "round_s" in row["details"]:
                    round_rows.append((label, k, size, row["details"]))
                ratio = row["total"] / plain_total if plain_total else float("nan")
                print(
                    f"{label:<24}{k:>4}{size:>9}{row['protect']:>11.4f}{row['aggregate']:>9.4f}"
                    f"{row['reveal']:>10.4f}{row['total']:>9.4f}{row['up_per_client']:>13,}"
                    f"{row['bytes_per_value']:>9.2f}{row['max_err']:>10.2e}{row['bound']:>10.2e}{ratio:>9.1f}",
                    flush=True,
                )
    if round_rows:
        print()
        print(f"{'secagg rounds':<24}{'K':>4}{'n':>9}{'deg':>5}{'t':>4}{'advert_s':>10}{'share_s':>9}{'mask_s':>9}"
              f"{'unmask_s':>10}{'crit_s':>9}")
        for label, k, size, d in round_rows:
            r = d["round_s"]
            per = [r[name]["clients"] + r[name]["server"]
                   for name in ("advertise_keys", "share_keys", "masked_input", "unmasking")]
            print(f"{label:<24}{k:>4}{size:>9}{d['degree']:>5}{d['threshold']:>4}{per[0]:>10.4f}{per[1]:>9.4f}"
                  f"{per[2]:>9.4f}{per[3]:>10.4f}{d['critical_path_s']:>9.4f}")
    print()
    for label in labels:
        extra = ""
        if label in MP_LABELS:
            extra = f"; process start-up {protocols[label].startup_seconds:.2f} s (last start)"
        print(f"setup {label}: {setup[label]:.3f} s{extra}")
    for line in skipped:
        print(f"skipped {line}")
    for protocol in protocols.values():
        protocol.close()


if __name__ == "__main__":
    main()
