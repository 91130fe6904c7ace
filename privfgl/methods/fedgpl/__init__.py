"""FedGPL (Guo, Han, Liu; spec ../shared/specs/fedlog_fedgpl.md part B): split federated prompt
learning. samples.py (the clients' induced sample graphs), trunk.py and pretrain.py (the server's
GraphCL-pretrained TransformerConv), prompt.py (VPG, GPF, ProG; the head), split.py (M1-M4 over the
channel), hidta.py (task-level aggregation), params.py, run.py (the rounds and the baselines)."""
from __future__ import annotations


def run_fedgpl(setup) -> None:
    """FedGPL or one of its baselines (`--method-param fed=...,prompt=...`); see run.py."""
    from privfgl.methods.fedgpl.run import run_fedgpl as run  # noqa: PLC0415 - PyG loaders load on use

    run(setup)
