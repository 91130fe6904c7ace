"""A sweep's TOML file -> the cells to run (each = run options + seeds) and the tables/plots to make.

    [sweep]
    name = "privacy-utility"            # default: the file's stem
    results = "runs/privacy-utility"    # one record per cell and seed lands here (default runs/<name>)
    seeds = [0, 1, 2]
    columns = ["test_acc", "epsilon"]   # the Markdown table's metric columns (default: see report.py)
    doc = "docs/sweeps.md"              # the report rewrites this sweep's block in that page
    headers = { "attacks.0.metrics.auc" = "AUC" }   # a column's title in the Markdown table (optional)
    title = "FedAvg on {dataset}"       # tables and plots; {dataset}: the datasets the records ran on
    warmup = true                       # one untimed 1-round run per cell first (seconds without start-up)

    [base]                              # run options of every cell (the run record's config keys),
    method = "dp-fedavg"                # plus `attacks` (specs as for `privfgl audit --attack`),
    rounds = 30                         # `adversary` and `target_epsilon` (below)

    [grid]                              # every combination of these lists (optional)
    evaluation = ["local_model", "global_model"]

    [[cells]]                           # explicit cells, each crossed with the grid (optional);
    label = "FedAvg, no DP"             # `label` names the cell in tables and plots
    method = "fedavg"
    grid = { rounds = [10, 30] }        # a grid of this cell's own (optional)
    seeds = [0]                         # optional: the cell runs only at these of the sweep's seeds
                                        #   (e.g. an audit at one seed beside accuracy at three)

    [[plots]]                           # see report.py: kind = "bars" | "line"
    file = "accuracy-vs-epsilon.png"
    kind = "line"
    x = "target_epsilon"
    y = "test_acc_last"

`target_epsilon = E` calibrates Gaussian noise: `{sigma}` in the cell's `dp` spec becomes the smallest
noise multiplier with ε(δ) ≤ E over the releases the run's accountant composes (runner.noise_schedule:
the method's own rounds, one release per protected message a round, DP-FedAvg's accounted rate; δ and
the accountant from the spec). A run that spends more is refused (runner.check_spent). `sigma = S` puts S there instead. A grid key may name one method
parameter ("method_params.dp_epsilon"); `{target_epsilon}` in an option becomes the cell's.
`paper = { test_acc = 0.7643 }` in a cell puts a published number beside the measured column
("paper:test_acc"); a column may also be any number in the record by its path
("metrics.test_f1_macro", "metrics.settings.unseen-node.test_acc"; a number indexes a list:
"attacks.0.metrics.epsilon_lb" is the first finding, i.e. the first attack spec's first target). `{seed}` in `dp` or in a
method parameter becomes the cell's seed (seeded noise: reproducible, and removable by whoever
knows the seed, as the record's `seed_warning` says). `partition = "file:PATH"`: a relative PATH is
taken from the sweep file's folder, and the file's SHA-256 is part of the cell's key (an edited
partition file is a new cell); `split_file = "PATH"` likewise, and so does a method parameter
`file:PATH` (FedGPL's `samples`, `trunk`).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from privfgl.data.partition_file import file_sha256, is_file_partition, resolve_partition
from privfgl.data.split_file import resolve_split_file, split_sha256
from privfgl.errors import ConfigError

# Cell options that are not run options: the sweep handles them.
SWEEP_OPTIONS = ("attacks", "adversary", "target_epsilon", "sigma", "label", "paper")
# Options that say where or how to run, or what to compare with, not what runs: they do not change
# a cell's identity (its key).
ENVIRONMENT_OPTIONS = ("data_root", "download", "progress", "threads", "allocator", "paper")


@dataclass(frozen=True)
class Cell:
    """One setting of the grid: `options` (run options + SWEEP_OPTIONS), run once per seed. `name` is the
    [[cells]] entry's own label (the same for every grid point of the entry: a line plot's series);
    `seeds`, where set, the only seeds of the sweep's this cell runs at. Neither is part of the key."""
    label: str
    options: dict
    name: str = ""
    seeds: tuple[int, ...] | None = None

    @property
    def key(self) -> str:
        """Folder name of the cell's records: its label as a slug + a hash of its options (a changed
        setting is a new cell, never a stale record)."""
        identity = {k: v for k, v in self.options.items() if k not in ENVIRONMENT_OPTIONS}
        if is_file_partition(self.options.get("partition")):
            try:
                identity["partition_sha256"] = file_sha256(self.options["partition"])
            except ValueError:  # missing: check_cells names it before anything runs
                pass
        if self.options.get("split_file"):
            try:
                identity["split_sha256"] = split_sha256(self.options["split_file"])
            except ValueError:  # missing: RunConfig.validate names it before anything runs
                pass
        files = {name: value for name, value in (self.options.get("method_params") or {}).items()
                 if isinstance(value, str) and value.startswith("file:") and os.path.isfile(value[len("file:"):])}
        if files:  # a method's input file (FedGPL's samples=, trunk=): an edited file is a new cell
            identity["method_file_sha256"] = {name: _file_digest(value[len("file:"):], *_stamp(value[len("file:"):]))
                                              for name, value in files.items()}
        digest = hashlib.sha1(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:8]
        slug = re.sub(r"[^A-Za-z0-9.=+-]+", "_", self.label).strip("_")[:60]
        return f"{slug}-{digest}"


def _stamp(path: str) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    """SHA-256 of a file's bytes, remembered while its modification time and size stay the same (a
    samples file can be hundreds of MB, and a sweep asks for a cell's key many times)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass(frozen=True)
class PlotSpec:
    file: str
    kind: str                      # "bars" or "line"
    y: tuple[str, ...]
    x: str | None = None           # line: the numeric column on the x axis
    series: tuple[str, ...] = ()   # line: one line per value of these columns
    logx: bool = False
    missing_x: str = "reference"   # line: a cell without x is a dashed "reference" line, or drawn at x = "inf"
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    logy: bool = False
    diagonal: bool = False         # line: the line y = x, dashed (e.g. an audited ε against the accountant's)
    where: tuple = ()              # ((column, value or tuple of values), ...): only the cells with these values
    dashed: tuple = ()             # line: ((column, value), ...): the series of cells with these values are dashed


@dataclass(frozen=True)
class Sweep:
    name: str
    source: Path
    results: Path
    seeds: tuple[int, ...]
    cells: tuple[Cell, ...]
    columns: tuple[str, ...] = ()
    plots: tuple[PlotSpec, ...] = ()
    title: str = ""
    doc: str | None = None         # a docs page whose block for this sweep the report rewrites
    headers: dict = field(default_factory=dict)  # column -> its title in the Markdown table
    warmup: bool = False           # one untimed, unrecorded 1-round run per cell (and process) before its timed runs
    tasks: tuple[tuple[Cell, int], ...] = field(init=False, default=())

    def __post_init__(self):
        object.__setattr__(self, "tasks", tuple((c, s) for c in self.cells for s in self.seeds
                                                if c.seeds is None or s in c.seeds))


def _label(options: dict, grid_keys: list[str], explicit: str | None) -> str:
    parts = [explicit] if explicit else []
    parts += [f"{k}={_short(options[k])}" for k in grid_keys]
    return ", ".join(parts) or "base"


def _short(value) -> str:
    if isinstance(value, dict):
        return "+".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return "+".join(map(str, value))
    return str(value)


def _merge(base: dict, over: dict) -> dict:
    """base updated by over; dict-valued options (method_params, ...) are merged key by key, and a
    dotted key ("method_params.dp_epsilon") sets one key inside one."""
    out = dict(base)
    for k, v in over.items():
        if "." in k:
            outer, inner = k.split(".", 1)
            if not isinstance(out.get(outer) or {}, dict):
                raise ConfigError(f"option {k!r} sets a key inside {outer!r}, which is {out[outer]!r}, not a table")
            out[outer] = {**(out.get(outer) or {}), inner: v}
        else:
            out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_sweep(path: str | Path, results: str | Path | None = None, overrides: dict | None = None,
               seeds: list[int] | None = None) -> Sweep:
    """Parse and expand a sweep file. `overrides` (e.g. {"dataset": "sbm"}) replace the options of
    every cell; `seeds` replaces [sweep] seeds. Raises ConfigError naming the file and key for
    anything malformed."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"sweep config {path}: a folder, not a file")
    if not path.is_file():
        raise ConfigError(f"sweep config {path}: no such file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"sweep config {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"sweep config {path}: not valid TOML ({e})") from None
    for key, kind in (("sweep", "a table ([sweep])"), ("base", "a table ([base])"), ("grid", "a table ([grid])"),
                      ("cells", "an array of tables ([[cells]])"), ("plots", "an array of tables ([[plots]])")):
        value = data.get(key)
        is_table = isinstance(value, dict)
        is_array = isinstance(value, list) and all(isinstance(v, dict) for v in value)
        if value is not None and not (is_array if key in ("cells", "plots") else is_table):
            raise ConfigError(f"sweep config {path}: {key} must be {kind}, got {value!r}")
    unknown = sorted(set(data) - {"sweep", "base", "grid", "cells", "plots"})
    if unknown:
        raise ConfigError(f"sweep config {path}: unknown table(s) {', '.join(unknown)}; valid: sweep, base, grid, "
                          "cells, plots")
    head = data.get("sweep", {})
    bad = sorted(set(head) - {"name", "results", "seeds", "columns", "title", "doc", "headers", "warmup"})
    if bad:
        raise ConfigError(f"sweep config {path}: unknown [sweep] key(s) {', '.join(bad)}; valid: name, results, "
                          "seeds, columns, title, doc, headers, warmup")
    if not isinstance(head.get("warmup", False), bool):
        raise ConfigError(f"sweep config {path}: [sweep] warmup must be true or false, got {head['warmup']!r}")
    headers = head.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise ConfigError(f"sweep config {path}: [sweep] headers must map columns to titles (strings), got {headers!r}")
    name = str(head.get("name", path.stem))
    seeds = seeds if seeds is not None else head.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds):
        raise ConfigError(f"sweep config {path}: [sweep] seeds must be a non-empty list of integers, got {seeds!r}")
    if len(set(seeds)) < len(seeds):
        raise ConfigError(f"sweep config {path}: seeds {seeds} name a seed twice; each seed is one run of every "
                          "cell, and a repeat would count as a second one")
    columns = head.get("columns", [])
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise ConfigError(f"sweep config {path}: [sweep] columns must be a list of column names (strings), "
                          f"got {columns!r}")
    base = _merge(data.get("base", {}), overrides or {})
    grid = data.get("grid", {})
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"sweep config {path}: [grid] {k} must be a non-empty list, got {v!r}")
    if data.get("cells") == []:
        raise ConfigError(f"sweep config {path}: cells is empty; leave it out for one cell of [base] and [grid]")
    cells, seen, labels = [], set(), {}
    for spec in data.get("cells", [{}]):
        spec = dict(spec)
        label = spec.pop("label", None)
        if label is not None and not isinstance(label, str):
            raise ConfigError(f"sweep config {path}: a cell's label must be a string, got {label!r}")
        paper = spec.get("paper", {})
        if not isinstance(paper, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                  for v in paper.values()):
            raise ConfigError(f"sweep config {path}: cell {label!r}: paper must map columns to published numbers, "
                              f"e.g. paper = {{ test_acc = 0.7643 }}; got {paper!r}")
        own = spec.pop("grid", {})
        own_seeds = spec.pop("seeds", None)
        if own_seeds is not None and (not isinstance(own_seeds, list) or not own_seeds or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in own_seeds)):
            raise ConfigError(f"sweep config {path}: cell {label!r}: seeds must be a non-empty list of integers "
                              f"(the sweep's seeds this cell runs at), got {own_seeds!r}")
        if own_seeds is not None and not set(own_seeds) <= set(head.get("seeds", [0])):
            raise ConfigError(f"sweep config {path}: cell {label!r}: seeds {own_seeds} are not all among [sweep] "
                              f"seeds {head.get('seeds', [0])}: the cell would skip them")
        if not isinstance(own, dict) or any(not isinstance(v, list) or not v for v in own.values()):
            raise ConfigError(f"sweep config {path}: cell {label!r}: grid must map options to non-empty lists")
        axes = {**own, **grid}
        for combo in itertools.product(*axes.values()):
            options = _merge(_merge(_merge(base, spec), dict(zip(axes, combo))), overrides or {})
            if "partition" in options:
                options["partition"] = resolve_partition(options["partition"], path.parent)
            if "split_file" in options:
                options["split_file"] = resolve_split_file(options["split_file"], path.parent)
            cell = Cell(_label(options, list(axes), label), options, name=label or "",
                        seeds=None if own_seeds is None else tuple(own_seeds))
            if cell.key in seen:
                raise ConfigError(f"sweep config {path}: two cells have the same options ({cell.label})")
            if cell.label in labels:
                raise ConfigError(f"sweep config {path}: two cells are labelled {cell.label!r}; a label names one "
                                  "row of the tables and plots, so give each cell its own")
            seen.add(cell.key)
            labels[cell.label] = cell
            cells.append(cell)
    plots = tuple(_plot(path, p) for p in data.get("plots", []))
    if not any(data.get(key) for key in ("base", "grid", "cells")):
        raise ConfigError(f"sweep config {path}: defines no runs; valid: a [base] table, a [grid] table or [[cells]] "
                          "(docs/sweeps.md)")
    return Sweep(name=name, source=path, results=Path(results or head.get("results") or f"runs/{name}"),
                 seeds=tuple(seeds), cells=tuple(cells), columns=tuple(columns), plots=plots,
                 title=str(head.get("title", "")), doc=head.get("doc"), headers=dict(headers),
                 warmup=head.get("warmup", False))


def _plot(path: Path, p: dict) -> PlotSpec:
    fields = {f.name for f in dataclasses.fields(PlotSpec)}
    bad = sorted(set(p) - fields)
    if bad or "file" not in p or "y" not in p:
        raise ConfigError(f"sweep config {path}: a [[plots]] entry needs file and y; unknown key(s) "
                          f"{', '.join(bad) or 'none'}; valid: {', '.join(sorted(fields))}")
    kind = p.get("kind", "bars")
    if p.get("missing_x", "reference") not in ("reference", "inf"):
        raise ConfigError(f"sweep config {path}: plot {p['file']}: missing_x {p['missing_x']!r}; valid: reference, inf")
    if kind not in ("bars", "line"):
        raise ConfigError(f"sweep config {path}: plot {p['file']}: kind {kind!r}; valid: bars, line")
    if kind == "line" and not p.get("x"):
        raise ConfigError(f"sweep config {path}: plot {p['file']}: a line plot needs x (a numeric column)")
    as_tuple = lambda v: tuple(v) if isinstance(v, (list, tuple)) else (v,)
    for key in ("where", "dashed"):
        if not isinstance(p.get(key, {}), dict):
            raise ConfigError(f"sweep config {path}: plot {p['file']}: {key} must be a table of column = value, "
                              f"got {p[key]!r}")
    where = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in p.get("where", {}).items())
    return PlotSpec(file=p["file"], kind=kind, y=as_tuple(p["y"]), x=p.get("x"),
                    series=as_tuple(p.get("series", ())), logx=bool(p.get("logx", False)),
                    missing_x=p.get("missing_x", "reference"),
                    title=p.get("title", ""), xlabel=p.get("xlabel", ""), ylabel=p.get("ylabel", ""),
                    logy=bool(p.get("logy", False)), diagonal=bool(p.get("diagonal", False)),
                    where=where, dashed=tuple(p.get("dashed", {}).items()))
