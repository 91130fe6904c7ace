"""`privfgl sweep --ray [ADDRESS]`: each missing (cell, seed) a Ray task on a local Ray or an existing
cluster. A task runs the cell (privfgl.sweep.runner.run_record) and returns its record; the driver writes
each record atomically into the results folder as it arrives, so a killed sweep or a lost node resumes
with only the missing runs. Ray is imported here only, and only under --ray (docs/cluster.md)."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path

from privfgl.errors import ConfigError
from privfgl.sweep.config import Cell, Sweep
from privfgl.sweep.runner import failure, record_path, run_record

LOCAL = "local"  # --ray without ADDRESS: a Ray started for this sweep on this machine
CONNECT_TIMEOUT_S = 10.0  # an ADDRESS that does not answer within this is refused
SHARED_ENV = ("PRIVFGL_DATA", "PRIVFGL_CACHE")  # the workers' data root and partition cache: the driver's


def resources(cell: Cell, seed: int) -> tuple[int, int]:
    """(CPUs, GPUs) a run of (cell, seed) takes: its torch threads (1 unless the cell sets `threads`, as
    --jobs runs), and one GPU under device "cuda"."""
    from privfgl.sweep.runner import run_config
    cfg, _ = run_config(cell, seed, threads=_threads(cell), progress=False)
    return cfg.threads, int(cfg.device.startswith("cuda"))


def _threads(cell: Cell) -> int:
    return int(cell.options.get("threads") or 1)


def _run(cell: Cell, seed: int, warmup: bool) -> dict:
    """A Ray task: the record of (cell, seed), nothing written on the worker's node."""
    return run_record(cell, seed, threads=_threads(cell), progress=False, warmup=warmup)


def check_address(address: str) -> tuple[str, int]:
    """(host, port) of ADDRESS if something answers there within CONNECT_TIMEOUT_S, else one-line ConfigError."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--ray {address}: valid: the cluster head's HOST:PORT (e.g. 10.0.0.1:6379, as `ray start "
                          "--head` prints it), or --ray alone for a local Ray")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise ConfigError(f"--ray {address}: no Ray cluster answers there ({e.strerror or type(e).__name__}, "
                          f"{CONNECT_TIMEOUT_S:g} s timeout); valid: the head's HOST:PORT of a running cluster "
                          "(`ray start --head`)") from None
    return host, int(port)


def connect(address: str) -> None:
    """ray.init on a local Ray (LOCAL: as many CPUs as this machine, token authentication on) or the cluster
    at ADDRESS, with the driver's PRIVFGL_DATA and PRIVFGL_CACHE in every worker's environment; one-line
    ConfigError if Ray cannot join ADDRESS within about CONNECT_TIMEOUT_S."""
    env = {name: os.environ[name] for name in SHARED_ENV if name in os.environ}
    options = dict(runtime_env={"env_vars": env} if env else None, include_dashboard=False,
                   logging_level=logging.WARNING)
    with _keep_sigterm():
        _init(address, options)


@contextlib.contextmanager
def _keep_sigterm():
    """SIGTERM keeps the sweep's handler (Ctrl-C's unwinding: no record for the runs cut short), not the
    one ray.init installs (a stack dump and abort)."""
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():  # where Python may set a handler
            signal.signal(signal.SIGTERM, handler if handler is not None else signal.SIG_DFL)


def _init(address: str, options: dict) -> None:
    if address == LOCAL:
        os.environ.setdefault("RAY_AUTH_MODE", "token")  # Ray's default for a local Ray, said without its warning
        import ray
        ray.init(num_cpus=os.cpu_count(), **options)
        return
    check_address(address)
    # Ray's own connect loop (about 1 s a try) gives up after CONNECT_TIMEOUT_S tries, not its default 20
    os.environ.setdefault("RAY_gcs_server_port_wait_time_s", str(int(CONNECT_TIMEOUT_S)))
    import ray
    with tempfile.TemporaryFile() as log, _stderr_to(log):  # Ray's C++ client logs a warning line per try
        try:
            ray.init(address=address, **options)
            joined = True
        except (ConnectionError, RuntimeError, ValueError):
            joined = False
    if not joined:
        raise ConfigError(f"--ray {address}: Ray could not join a cluster there within about "
                          f"{CONNECT_TIMEOUT_S:g} s (something answers, but no Ray head that admits this driver: "
                          "check the address and, under token authentication, the cluster's token)")


@contextlib.contextmanager
def _stderr_to(file):
    """File descriptor 2 (C++ libraries' stderr too) into `file` for the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run_on_ray(todo: list[tuple[Cell, int]], sweep: Sweep, bar) -> list[str]:
    """Run `todo` as Ray tasks on the Ray `connect` joined, write each record as it returns, then shut this
    driver's Ray down; returns one line per failed run. Ctrl-C (or SIGTERM) cancels the tasks not yet
    returned: their runs leave no record. `bar` counts the returned runs, wherever they ran."""
    import ray
    from ray.exceptions import RayError, RayTaskError

    from privfgl.results import write_record
    try:
        task = ray.remote(_run)
        pending = {}
        for cell, seed in todo:
            cpus, gpus = resources(cell, seed)
            pending[task.options(num_cpus=cpus, num_gpus=gpus).remote(cell, seed, sweep.warmup)] = (cell, seed)
        failures: list[str] = []
        try:
            while pending:
                finished, _ = ray.wait(list(pending), num_returns=1)
                for ref in finished:
                    cell, seed = pending.pop(ref)
                    try:
                        write_record(ray.get(ref), record_path(Path(sweep.results), cell, seed))
                    except RayTaskError as e:  # the run raised: reported as --jobs reports it
                        failures.append(failure(cell, seed, e.cause if e.cause is not None else e))
                    except RayError as e:  # its worker or node died after Ray's retries
                        failures.append(failure(cell, seed, e))
                    bar.update()
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        return failures
    finally:
        ray.shutdown()


__all__ = ["LOCAL", "check_address", "connect", "resources", "run_on_ray"]
