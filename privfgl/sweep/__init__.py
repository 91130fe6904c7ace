"""`privfgl sweep CONFIG`: a grid of runs from a TOML file (config.py), run and resumed cell by cell
(runner.py), summarised over seeds as CSV, Markdown and PNG plots (report.py)."""
from privfgl.sweep.config import Cell, PlotSpec, Sweep, load_sweep
from privfgl.sweep.report import report
from privfgl.sweep.runner import check_cells, missing, run_sweep

__all__ = ["Cell", "PlotSpec", "Sweep", "check_cells", "load_sweep", "missing", "report", "run_sweep"]
