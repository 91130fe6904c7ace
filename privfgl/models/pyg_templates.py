"""PyG's rendered layer templates, removed when the process exits.

PyG (2.5+) renders each MessagePassing layer class's `propagate` from a jinja template into a file in
the temp folder (`torch_geometric.template.module_from_template`, `delete=False`) and imports it
from there: one file per layer class per process, never removed, so every privfgl run (and every
sweep worker) would leave one or more `/tmp/torch_geometric.nn.conv.*_propagate_*.py` behind. The
modules are loaded by the time the process exits, so their files can go then."""
from __future__ import annotations

import atexit
import os
import sys
import tempfile


def remove_rendered_templates() -> list[str]:
    """Delete the files of the loaded torch_geometric modules that PyG rendered into the temp folder
    (a module `torch_geometric.X` whose file is `<tmp>/torch_geometric.X_*.py`); returns their paths."""
    tmp = os.path.realpath(tempfile.gettempdir())
    removed = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if (name.startswith("torch_geometric.") and path and os.path.basename(path).startswith(name + "_")
                and os.path.dirname(os.path.realpath(path)) == tmp):
            try:
                os.remove(path)
                removed.append(path)
            except OSError:
                pass
    return removed


atexit.register(remove_rendered_templates)
