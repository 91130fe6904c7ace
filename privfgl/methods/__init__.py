"""Federated methods, one module each. A method is a function `run_<name>(setup)`."""
from privfgl.methods.base import MethodConfig, Setup
from privfgl.methods.fedavg import run_fedavg, run_fedprox
from privfgl.methods.local import run_local

METHODS = {"local": run_local, "fedavg": run_fedavg, "fedprox": run_fedprox}

__all__ = ["METHODS", "MethodConfig", "Setup", "run_fedavg", "run_fedprox", "run_local"]
