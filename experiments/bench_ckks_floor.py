"""CKKS against its own floor (issue #18): the ckks backend's wall time for one secure sum beside the
native cost of the ciphertexts it must produce, measured in the same process on the same keys.

Floor: for the same number of ciphertexts the backend produces for K clients x n values
(K * ceil(n / slots)), SEAL's encode (CKKSEncoder.encode of ``slots`` doubles at the preset's
scale) + encrypt (public-key or symmetric seeded, as the preset) + serialise (Ciphertext.save, the
only serialisation TenSEAL 0.3.18's sealapi offers, into /dev/shm, and reading the bytes back),
single-threaded, on the backend's own encoder and encryptor. Nothing else: no range check, no
grid, no server, no decryption. The backend's wall time is one ``aggregate`` (every client
encrypts, the server loads and adds, the key holder decrypts and rounds onto the grid), after a
warm-up sum. ratio = backend / floor of the same repetition (they alternate), the median of
``--repeat`` repetitions, with the range of the ratios; target <= 1.3.

    python experiments/bench_ckks_floor.py                           # K 10; n 92000, 1e5, 1e6; both presets
    python experiments/bench_ckks_floor.py --sizes 92000 --presets sum --repeat 3
    python experiments/bench_ckks_floor.py --profile                 # cProfile of one backend sum per row
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time

import numpy as np
import torch

from protocols import get_protocol


def floor_seconds(protocol, flats: list[np.ndarray]) -> dict[str, float]:
    """Encode + encrypt + serialise every chunk of every client's vector, timed per step."""
    import tenseal.sealapi as sa  # noqa: PLC0415

    slots, scale = protocol.slots, protocol.scale
    encoder, encryptor = protocol._encoder, protocol._encryptor
    path = os.path.join(protocol._serializer._dir, "floor")
    out = {"encode": 0.0, "encrypt": 0.0, "serialise": 0.0, "ciphertexts": 0}
    for flat in flats:
        for start in range(0, flat.size, slots):
            t0 = time.perf_counter()
            plain = sa.Plaintext()
            encoder.encode(flat[start:start + slots].tolist(), scale, plain)
            t1 = time.perf_counter()
            if protocol.preset.symmetric:
                ct = encryptor.encrypt_symmetric(plain)
            else:
                ct = sa.Ciphertext()
                encryptor.encrypt(plain, ct)
            t2 = time.perf_counter()
            ct.save(path)
            with open(path, "rb") as f:
                f.read()
            t3 = time.perf_counter()
            out["encode"] += t1 - t0
            out["encrypt"] += t2 - t1
            out["serialise"] += t3 - t2
            out["ciphertexts"] += 1
    out["total"] = out["encode"] + out["encrypt"] + out["serialise"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["default", "sum"], choices=["default", "sum"])
    parser.add_argument("--sizes", type=float, nargs="+", default=[92000, 1e5, 1e6])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed repetitions, backend and floor alternating (the median ratio is reported)")
    parser.add_argument("--params", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra ckks parameters (e.g. workers=2)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one backend sum per row")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    extra = {}
    for item in args.params:
        key, _, value = item.partition("=")
        extra[key] = int(value) if value.isdigit() else value
    print(f"load average {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs; K = {args.clients}; params {extra}")
    header = (f"{'preset':<8}{'n':>9}{'cts':>6}{'backend_s':>11}{'protect':>9}{'aggr':>8}{'reveal':>8}"
              f"{'floor_s':>9}{'encode':>8}{'encrypt':>9}{'serial':>8}{'ratio':>7}{'max_err':>10}   range")
    print(header)
    print("-" * len(header))
    for preset in args.presets:
        protocol = get_protocol("ckks", preset=preset, **extra)
        for size in args.sizes:
            n = int(size)
            rng = np.random.default_rng(args.seed)
            xs = [torch.from_numpy(rng.uniform(-1.0, 1.0, n)) for _ in range(args.clients)]
            reference = np.sum([x.numpy() for x in xs], axis=0)
            protocol.aggregate(xs)  # warm-up (and the one-off setup transfers)
            backend, floors, result = [], [], None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                result = protocol.aggregate(xs)
                backend.append(time.perf_counter() - t0)
                # The floor encodes the same grid values the clients encrypt.
                f = result.details["frac_bits"]
                flats = [np.round(x.numpy() * 2.0**f) / 2.0**f for x in xs]
                floors.append(floor_seconds(protocol, flats))
            # Backend and floor alternate, so each ratio compares two neighbouring measurements (the
            # machine's load drifts); the row shows the median run and the ratios' range.
            ratios = [bk / fl["total"] for bk, fl in zip(backend, floors)]
            i = int(np.argsort(ratios)[len(ratios) // 2])
            b, fl = backend[i], floors[i]
            ph = result.phases
            err = float(np.abs(result.total.numpy() - reference).max())
            print(f"{preset:<8}{n:>9}{fl['ciphertexts']:>6}{b:>11.3f}{ph['protect']:>9.3f}{ph['aggregate']:>8.3f}"
                  f"{ph['reveal']:>8.3f}{fl['total']:>9.3f}{fl['encode']:>8.3f}{fl['encrypt']:>9.3f}"
                  f"{fl['serialise']:>8.3f}{ratios[i]:>7.2f}{err:>10.1e}   {min(ratios):.2f}-{max(ratios):.2f}",
                  flush=True)
            if args.profile:
                profiler = cProfile.Profile()
                profiler.enable()
                protocol.aggregate(xs)
                profiler.disable()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
        protocol.close()
    print(f"load average {os.getloadavg()[0]:.1f} (1 min) at the end")


if __name__ == "__main__":
    main()
