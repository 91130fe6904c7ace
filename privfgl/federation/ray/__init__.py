"""Runs whose clients are Ray actors (`--engine ray`; docs/cluster.md): actor.py (what an actor holds and
does), clients.py (the driver's handle on the actors), sums.py (the server's side of each protocol with the
inputs on the actors), wire.py (tensors as bytes), run.py (the run). Ray is imported only when a run uses it."""
