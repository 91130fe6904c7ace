"""Checks on what a party's view holds, shared by the methods' privacy tests."""
import gc

import torch


def class_rates(setup) -> list[torch.Tensor]:
    """Each client's training-label distribution [C] (what a class-weighted upload may expose)."""
    out = []
    for c in setup.clients:
        counts = torch.bincount(c.y[c.train_mask], minlength=setup.num_classes).double()
        out.append(counts / counts.sum())
    return out


def holds(tensors: dict, vector: torch.Tensor) -> bool:
    """Does any observed tensor contain `vector` (up to float noise) as a row or as itself?"""
    for t in tensors.values():
        t = t.double().reshape(-1, t.shape[-1]) if t.dim() else t.double().reshape(1, 1)
        if t.shape[-1] == vector.numel() and bool(torch.isclose(t, vector, atol=1e-6).all(-1).any()):
            return True
    return False


def reachable(roots, limit: int = 200_000):
    """Every object reachable from `roots` (up to `limit`): what an attack could touch from its inputs."""
    seen, stack = {}, list(roots)
    while stack and len(seen) < limit:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen[id(o)] = o
        stack.extend(gc.get_referents(o))
    return seen.values()


def spying(attack_cls, **params):
    """An instance of `attack_cls` that records the (view, aux) pairs its attack() received."""
    class Spy(attack_cls):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.received = []

        def attack(self, view, aux):
            self.received.append((view, aux))
            return super().attack(view, aux)
    return Spy(**params)
