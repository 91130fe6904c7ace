"""Federated methods, one module each. A method is a function `run_<name>(setup)`."""
from privfgl.methods.base import MethodConfig, Setup
from privfgl.methods.dp_fedavg import run_dp_fedavg
from privfgl.methods.dp_sgd import run_dp_sgd
from privfgl.methods.fedavg import run_fedavg, run_fedprox
from privfgl.methods.fedgpl import run_fedgpl
from privfgl.methods.fedlog import run_fedlog
from privfgl.methods.fedomd import run_fedomd
from privfgl.methods.fedspray import run_fedspray
from privfgl.methods.local import run_local
from privfgl.methods.opfgl import run_opfgl

METHODS = {"local": run_local, "fedavg": run_fedavg, "fedprox": run_fedprox, "opfgl": run_opfgl,
           "dp-fedavg": run_dp_fedavg, "dp-sgd": run_dp_sgd, "fedspray": run_fedspray, "fedomd": run_fedomd,
           "fedgpl": run_fedgpl, "fedlog": run_fedlog}

__all__ = ["METHODS", "MethodConfig", "Setup", "run_dp_fedavg", "run_dp_sgd", "run_fedavg", "run_fedgpl", "run_fedlog", "run_fedomd",
           "run_fedprox", "run_fedspray", "run_local", "run_opfgl"]
