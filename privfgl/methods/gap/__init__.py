"""GAP (Sajadmanesh et al., USENIX Security 2023): aggregation perturbation, computed once per client.

    params.py       --method-param settings (unit, edge, epsilon, delta, hops, ...)
    aggregation.py  unit-norm rows, neighbour sums, the K noisy hops (the private release)
    accounting.py   σ from the target ε: K Gaussian releases under one opacus accountant
    model.py        the encoder and the classifier (MLPs)
    run.py          the federation: encoder FedAvg, the release, classifier FedAvg
"""
