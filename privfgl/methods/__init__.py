"""Federated methods, one module each. A method is a function `run_<name>(setup)`.

METHODS maps a method's name to its function and imports the method's module on first lookup,
so a FedAvg run does not load FedGPL's or FedLoG's code (nor what they import); the `run_<name>`
functions and MethodConfig/Setup are loaded on first use as well.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

# method name -> (module, function); the order is the one help texts list.
_METHOD_FUNCTIONS: dict[str, tuple[str, str]] = {
    "local": ("privfgl.methods.local", "run_local"),
    "fedavg": ("privfgl.methods.fedavg", "run_fedavg"),
    "fedprox": ("privfgl.methods.fedavg", "run_fedprox"),
    "opfgl": ("privfgl.methods.opfgl.run", "run_opfgl"),
    "dp-fedavg": ("privfgl.methods.dp_fedavg", "run_dp_fedavg"),
    "dp-sgd": ("privfgl.methods.dp_sgd", "run_dp_sgd"),
    "fedspray": ("privfgl.methods.fedspray.run", "run_fedspray"),
    "fedomd": ("privfgl.methods.fedomd.run", "run_fedomd"),
    "fedgpl": ("privfgl.methods.fedgpl", "run_fedgpl"),
    "fedlog": ("privfgl.methods.fedlog.run", "run_fedlog"),
    "gap": ("privfgl.methods.gap.run", "run_gap"),
    "lapgraph": ("privfgl.methods.lapgraph.run", "run_lapgraph"),
}


class _Methods(Mapping):
    """Read-only name -> run function; a lookup imports only that method's module."""

    def __getitem__(self, name: str):
        module, function = _METHOD_FUNCTIONS[name]
        return getattr(importlib.import_module(module), function)

    def __contains__(self, name: object) -> bool:  # Mapping's default would import the method
        return name in _METHOD_FUNCTIONS

    def __iter__(self) -> Iterator[str]:
        return iter(_METHOD_FUNCTIONS)

    def __len__(self) -> int:
        return len(_METHOD_FUNCTIONS)

    def __repr__(self) -> str:
        return f"METHODS({', '.join(_METHOD_FUNCTIONS)})"


METHODS: Mapping = _Methods()

_LAZY = {function: module for module, function in _METHOD_FUNCTIONS.values()}
_LAZY.update(MethodConfig="privfgl.methods.base", Setup="privfgl.methods.base")


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["METHODS", "MethodConfig", "Setup", "run_dp_fedavg", "run_dp_sgd", "run_fedavg", "run_fedgpl", "run_fedlog",
           "run_fedomd", "run_fedprox", "run_fedspray", "run_gap", "run_lapgraph", "run_local", "run_opfgl"]
