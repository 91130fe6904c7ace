"""Check privfgl/methods/options.py against the methods themselves: which shared training flags
change a run, method by method.

For every method, a small base run (Cora, Louvain, 3 clients, 2 rounds; O-pFGL 1 round; FedGPL its
3 task clients; the DP methods with seeded noise, so that two runs can be compared) and one run per
flag set to another value (`OTHER_VALUES`), with the refusal switched off. A flag "changes" the run
when the record's metrics or costs differ from the base run's (the base runs twice first, so the
caches are warm and the run is shown deterministic; their hit/miss sits under the record's `time`).
Prints one table row per method and flag, and exits 1 where the run disagrees with the table (a flag
the table says is ignored that changes the run, or the reverse). A method's own refusal of a value
(e.g. O-pFGL's --model) counts as reading the flag.

    PRIVFGL_DATA=... OMP_NUM_THREADS=1 python experiments/method_options.py [--methods fedavg,fedomd]

Took 11 minutes on this 2-core machine (2026-11-27; O-pFGL and FedGPL 15-30 s a run): 0 disagreements.
"""
from __future__ import annotations

import argparse
import json
import sys

import privfgl.experiment as experiment
from privfgl.experiment import config_for, run
from privfgl.methods import METHODS
from privfgl.methods.options import OTHER_VALUES, UNUSED

BASE = {"fedgpl": {"clients": 3}, "opfgl": {"rounds": 1},
        "dp-fedavg": {"dp": "gaussian:sigma=1,clip=1,on=update,mode=central,seed=3"},
        "dp-sgd": {"method_params": {"seed": 3}}, "gap": {"method_params": {"seed": 3, "encoder_rounds": 2}}}


def outcome(values: dict) -> str:
    """The record's metrics and costs as JSON, or "refused" when the method refuses the value."""
    try:
        record, _ = run(config_for(values))
    except ValueError:
        return "refused"
    return json.dumps([record["metrics"], record["cost"]], sort_keys=True, default=str)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default=",".join(METHODS))
    args = ap.parse_args()
    experiment.unused_option = lambda method, option: None  # run what validate refuses
    wrong = 0
    print("| method | flag | run | table |\n|---|---|---|---|")
    for method in args.methods.split(","):
        base = {"method": method, "clients": 3, "rounds": 2, "progress": False, "transcript": "none",
                **BASE.get(method, {})}
        reference = outcome(base)
        if outcome(base) != reference:
            print(f"| {method} | (base run) | not deterministic: skipped | |")
            wrong += 1
            continue
        for option, value in OTHER_VALUES.items():
            changes = outcome({**base, option: value}) != reference
            listed = option in UNUSED[method]
            agree = changes != listed
            wrong += not agree
            print(f"| {method} | {option} | {'changes' if changes else 'no effect'} | "
                  f"{'ignored' if listed else 'read'}{'' if agree else ' (DISAGREES)'} |", flush=True)
    print(f"\n{wrong} disagreement(s)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
