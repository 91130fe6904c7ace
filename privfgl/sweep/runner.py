"""Runs a sweep's missing (cell, seed) pairs, one run record each, in this process or in `jobs`
worker processes (one torch thread each). A record is written atomically when its run ends, so a
sweep killed at any point resumes with exactly the missing pairs and never reads a partial record."""
from __future__ import annotations

import dataclasses
import functools
import json
import multiprocessing
import signal
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

from privfgl.errors import ConfigError
from privfgl.sweep.config import SWEEP_OPTIONS, Cell, Sweep


def record_path(results: Path, cell: Cell, seed: int) -> Path:
    return results / "records" / cell.key / f"seed{seed}.json"


def missing(sweep: Sweep) -> list[tuple[Cell, int]]:
    """The (cell, seed) pairs without a record yet."""
    return [(c, s) for c, s in sweep.tasks if not record_path(sweep.results, c, s).is_file()]


def _substitute(value, names: dict):
    """`{seed}`, `{sigma}`, `{target_epsilon}` in a string option (or inside a dict of them); a
    string that becomes a number is that number."""
    if isinstance(value, dict):
        return {k: _substitute(v, names) for k, v in value.items()}
    if not isinstance(value, str) or "{" not in value:
        return value
    text = value
    for name, sub in names.items():
        if "{" + name + "}" in text:
            if sub is None:
                raise ConfigError(f"option {value!r} uses {{{name}}}: set {name} (or target_epsilon) in the cell")
            text = text.replace("{" + name + "}", repr(sub) if isinstance(sub, float) else str(sub))
    from privfgl.plots import scalar
    return scalar(text)


def _uses(options: dict, name: str) -> bool:
    return "{" + name + "}" in json.dumps(options, default=str)


def calibrated_sigma(options: dict) -> float | None:
    """The cell's `sigma`, else the smallest σ whose ε at the run's δ stays within its target_epsilon over
    the releases the run's accountant composes (noise_schedule). None if the cell sets neither."""
    if options.get("sigma") is not None:
        return float(options["sigma"])
    target = options.get("target_epsilon")
    if target is None:
        return None
    return _noise_multiplier(float(target), *noise_schedule(options))


def noise_schedule(options: dict) -> tuple[float, float, int, str]:
    """(δ, sample rate, releases, accountant) of the Gaussian noise the cell's `{sigma}` sets, as the run's
    accountant composes it, from the run's config with the method's defaults filled in (its `rounds`):
    - dp-sgd: rounds × local_epochs steps at rate 1, δ and accountant from its method params;
    - --dp on aggregated or split messages: one release per protected message per round (`on=all`
      counts every message the method sends; FedGPL's split messages: one per round, its minibatches
      being disjoint), at DP-FedAvg's accounted rate (method_params.q under a secure protocol, 1 under
      plain, where the server sees who took part), δ and accountant from the spec.
    A run that stops early (FedOMD's early stopping) makes fewer releases: its ε stays under the target."""
    from privfgl.methods.dp_fedavg import accounted_sample_rate, dp_fedavg_params
    from privfgl.methods.dp_sgd import dp_sgd_params
    from privfgl.privacy.spec import check_dp_for_run
    cfg = _config_for_options(options, seed=0, sigma=1.0)  # σ's value plays no part in the schedule
    if cfg.method == "dp-sgd":
        p = dp_sgd_params(cfg.method_params)
        return float(p["delta"]), 1.0, cfg.rounds * cfg.local_epochs, p["accountant"]
    spec = check_dp_for_run(cfg.dp, cfg.method, cfg.protocol)
    if spec is None or spec.mechanism != "gaussian":
        raise ConfigError(f"{{sigma}} with target_epsilon needs a gaussian --dp spec (got dp={cfg.dp!r})")
    q = 1.0
    if cfg.method == "dp-fedavg":
        q, _ = accounted_sample_rate(float(dp_fedavg_params(cfg.method_params)["q"]), cfg.protocol)
    return spec.delta, q, cfg.rounds * len(spec.messages), spec.accountant


@functools.lru_cache(maxsize=None)
def _noise_multiplier(epsilon: float, delta: float, q: float, releases: int, accountant: str) -> float:
    """opacus' σ search, once per setting (a cell is calibrated when checked and again per seed)."""
    from privfgl.privacy import noise_multiplier_for
    return noise_multiplier_for(epsilon, delta, q, releases, accountant)


def _config_for_options(options: dict, seed: int, sigma: float | None, progress: bool = False,
                        threads: int | None = None):
    """The RunConfig of a cell's run options with `{seed}`, `{sigma}`, `{target_epsilon}` filled in and the
    method's defaults where the cell sets nothing (privfgl.experiment.config_for)."""
    from privfgl.experiment import config_for
    names = {"seed": seed, "sigma": sigma, "target_epsilon": options.get("target_epsilon")}
    values = {k: _substitute(v, names) for k, v in options.items() if k not in SWEEP_OPTIONS}
    values.update(seed=seed, progress=progress)
    if threads is not None:
        values["threads"] = threads
    if options.get("attacks") and "transcript" not in values:
        values["transcript"] = "all"  # attacks read earlier rounds' payloads
    return config_for(values)


def run_config(cell: Cell, seed: int, threads: int | None, progress: bool):
    """The RunConfig of (cell, seed): the cell's run options with `{seed}`/`{sigma}` filled in, the
    method's defaults where the cell sets nothing (privfgl.experiment.config_for)."""
    sigma = calibrated_sigma(cell.options) if _uses(cell.options, "sigma") else None
    return _config_for_options(cell.options, seed, sigma, progress, threads), sigma


def check_cells(sweep: Sweep) -> None:
    """Every cell, before anything runs: a valid RunConfig (a known dataset, protocol parameters the
    backend takes), a target_epsilon > 0, valid attack specs and an adversary that is a party of the run;
    a line plot's x where it is a run option."""
    from privfgl.data.datasets import canonical_name
    from protocols import check_protocol_params
    for cell in sweep.cells:
        try:
            target = cell.options.get("target_epsilon")
            if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                                       or not 0 < target < float("inf")):
                raise ConfigError(f"target_epsilon {target!r}: valid: a number > 0 (the ε to calibrate σ for)")
            run_options = {k: v for k, v in cell.options.items() if k not in SWEEP_OPTIONS}
            if target is not None and not (_uses(run_options, "sigma") or _uses(run_options, "target_epsilon")):
                raise ConfigError(f"target_epsilon {target!r} is used by no option of the cell: put {{sigma}} in its "
                                  "dp spec or {target_epsilon} in a method param (e.g. dp_epsilon)")
            cfg, _ = run_config(cell, sweep.seeds[0], None, False)
            cfg.validate()
            canonical_name(cfg.dataset)
            check_protocol_params(cfg.protocol, cfg.protocol_params)
            from attacks import parse_attack
            from attacks.audit import check_audit
            attacks = [parse_attack(a) for a in cell.options.get("attacks") or []]
            check_audit(attacks, cell.options.get("adversary", "server"), cfg.clients, cfg.canaries)
            if attacks and cfg.transcript == "none":
                raise ConfigError("attacks with transcript \"none\": they would have no payloads to read; valid: "
                                  "transcript \"last\" or \"all\" (all by default when a cell has attacks)")
        except ValueError as e:
            raise ConfigError(f"sweep {sweep.name}, cell {cell.label!r}: {' '.join(str(e).split())}") from None
    from privfgl.sweep.report import check_line_x
    for spec in sweep.plots:  # an x that is a run option is known now; a metric's only after the runs
        try:
            check_line_x(spec, [cell.options.get(spec.x) for cell in sweep.cells])
        except ConfigError as e:
            raise ConfigError(f"sweep {sweep.name}: {e}") from None


def check_spent(cell: Cell, sigma: float | None, spent: float | None) -> None:
    """A run whose σ was calibrated to the cell's target_epsilon must not spend more: RuntimeError (and no
    record) if its accountant's ε exceeds the target, i.e. the calibration missed some of its releases."""
    target = cell.options.get("target_epsilon")
    if sigma is None or target is None or cell.options.get("sigma") is not None or spent is None:
        return
    if spent > float(target) * (1 + 1e-9):
        raise RuntimeError(f"the run spent ε = {spent:.6g}, over its target_epsilon "
                           f"{target} (σ = {sigma:.6g} was calibrated for other releases than the run made); "
                           "no record written")


_WARMED: set[str] = set()  # the cells (keys) this process has run a warm-up of


def warm_up(cell: Cell, seed: int, threads: int | None) -> None:
    """Once per cell and process: one 1-round run of `cell`, neither timed nor recorded, so that the
    imports, the dataset's first load, the partition cache and the backend's first-call set-up land
    here and not in the first timed run's seconds ([sweep] warmup = true)."""
    if cell.key in _WARMED:
        return
    from privfgl.experiment import run
    cfg, _ = run_config(cell, seed, threads, progress=False)
    run(dataclasses.replace(cfg, rounds=1, transcript="none"))
    _WARMED.add(cell.key)


def run_one(cell: Cell, seed: int, results: Path, threads: int | None, progress: bool, warmup: bool = False) -> Path:
    """Run (cell, seed) and write its record, after the cell's warm-up with `warmup`; returns the record's path."""
    from privfgl.results import write_record
    return write_record(run_record(cell, seed, threads, progress, warmup), record_path(results, cell, seed))


def run_record(cell: Cell, seed: int, threads: int | None, progress: bool, warmup: bool = False) -> dict:
    """The run record of (cell, seed), after the cell's warm-up with `warmup`; nothing written."""
    from privfgl.experiment import run
    if warmup:
        warm_up(cell, seed, threads)
    cfg, sigma = run_config(cell, seed, threads, progress)
    specs = cell.options.get("attacks") or []
    attacks = []
    if specs:
        from attacks import parse_attack
        from attacks.audit import prepare_attacks
        attacks = [parse_attack(a) for a in specs]
    record, setup = run(cfg, prepare=prepare_attacks(attacks, cfg.method)) if attacks else run(cfg)
    check_spent(cell, sigma, record["privacy"].get("epsilon"))
    if attacks:
        from attacks import run_attacks
        found = run_attacks(setup, cfg, attacks, cell.options.get("adversary", "server"))
        record["attacks"] = [f.as_record() for f in found]
    record["sweep"] = {"cell": cell.label, "key": cell.key, "seed": seed, "sigma": sigma,
                       "options": json.loads(json.dumps(cell.options, default=str))}
    return record


_STOP = None  # in a worker process: the sweep's stop event (set when the sweep is interrupted)


def _start_worker(stop) -> None:
    """A worker process's start: SIGTERM unwinds the run in flight as Ctrl-C would (run_sweep sends it
    when the sweep is interrupted), and `stop` keeps the runs already queued to it from starting."""
    global _STOP
    _STOP = stop
    signal.signal(signal.SIGTERM, _interrupted)


def _worker(cell: Cell, seed: int, results: str, warmup: bool) -> str:
    if _STOP is not None and _STOP.is_set():
        raise KeyboardInterrupt
    return str(run_one(cell, seed, Path(results), threads=1, progress=False, warmup=warmup))


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt


def check_parallelism(jobs: int, ray: str | None) -> None:
    """--jobs N >= 1, and not N > 1 with --ray (Ray places the runs itself)."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: valid: an integer >= 1")
    if ray is not None and jobs > 1:
        raise ConfigError(f"--ray with --jobs {jobs}: Ray places the runs itself; valid: --ray without --jobs "
                          "(each run takes its torch threads' CPUs of the cluster)")


def failure(cell: Cell, seed: int, e: BaseException) -> str:
    """The line a failed run is reported by at the sweep's end."""
    return f"{cell.label}, seed {seed}: {type(e).__name__}: {' '.join(str(e).split())}"


def run_sweep(sweep: Sweep, jobs: int = 1, progress: bool = True, ray: str | None = None) -> list[str]:
    """Run every missing (cell, seed); returns one line per failed run (the others' records exist).
    jobs = 1: in this process, with the run's own progress bar; jobs > 1: worker processes; `ray` (an
    address, or privfgl.sweep.ray_tasks.LOCAL): Ray tasks on that cluster (privfgl/sweep/ray_tasks.py)."""
    from tqdm.auto import tqdm
    check_parallelism(jobs, ray)
    todo = missing(sweep)
    if ray is not None and todo:
        from privfgl.sweep.ray_tasks import connect
        connect(ray)  # first: an address Ray cannot join is one line, before anything else is printed
    done = len(sweep.tasks) - len(todo)
    own = " (some cells at fewer: their own seeds)" if any(c.seeds is not None for c in sweep.cells) else ""
    print(f"sweep {sweep.name}: {len(sweep.cells)} cells x {len(sweep.seeds)} seeds{own} = {len(sweep.tasks)} runs; "
          f"{done} already recorded in {sweep.results}, {len(todo)} to run", file=sys.stderr)
    failures: list[str] = []
    bar = tqdm(total=len(todo), desc=f"sweep {sweep.name}", unit="run", disable=not progress or not todo)
    start = time.perf_counter()
    if ray is not None and todo:
        from privfgl.sweep.ray_tasks import run_on_ray
        failures = run_on_ray(todo, sweep, bar)
    elif jobs <= 1:
        for cell, seed in todo:
            bar.set_postfix_str(f"{cell.label}, seed {seed}")
            try:
                run_one(cell, seed, sweep.results, threads=None, progress=progress, warmup=sweep.warmup)
            except Exception as e:  # noqa: BLE001 - one failed run must not lose the others
                failures.append(failure(cell, seed, e))
            bar.update()
    else:
        context = multiprocessing.get_context("spawn")
        stop = context.Event()
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_start_worker, initargs=(stop,))
        try:
            pending = {pool.submit(_worker, cell, seed, str(sweep.results), sweep.warmup): (cell, seed)
                       for cell, seed in todo}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    cell, seed = pending.pop(future)
                    if future.exception() is not None:
                        failures.append(failure(cell, seed, future.exception()))
                    bar.update()
        except BaseException:  # Ctrl-C or SIGTERM: interrupt the runs in flight (no record written for them)
            stop.set()
            for process in list((getattr(pool, "_processes", None) or {}).values()):  # no public handle on them
                if process.is_alive():
                    process.terminate()  # SIGTERM: the run unwinds (_worker); the worker then takes the stop sentinel
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    bar.close()
    if todo:
        print(f"sweep {sweep.name}: {len(todo) - len(failures)} runs in {time.perf_counter() - start:.1f} s"
              + (f", {len(failures)} failed" if failures else ""), file=sys.stderr)
    return failures


__all__ = ["check_cells", "check_parallelism", "failure", "missing", "record_path", "run_config", "run_one", "run_record", "run_sweep",
           "warm_up"]
