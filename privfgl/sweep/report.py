"""A sweep's records -> one row per run, the per-cell mean ± std over seeds (CSV and Markdown), plots.

Columns of a row (units in the names): test_acc (at the round chosen on validation), test_acc_last
(last round), val_acc, best_round, epsilon (the accountant's ε of the run, empty without DP),
MB_up_per_client (mean over clients, whole run, MB = 1e6 bytes), MB_up_per_client_round, seconds
(the run's own wall time, time.total_s), and per attack headline metric `ATTACK:METRIC` with its
baseline `ATTACK:METRIC:baseline` and `ATTACK:on` (what was attacked: each client's upload, or only
the aggregate when the view holds no per-client plaintext), averaged over the attacked targets.

Plots (matplotlib via privfgl.plots; error bars = std over seeds):
    kind = "bars"   one panel per y column, one bar per cell; an attack column also shows its baseline
    kind = "line"   y against the numeric column x, one line per value of `series`; cells whose x is
                    empty (e.g. no target_epsilon: the non-private runs) are drawn as dashed references
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

from privfgl.doc_block import write_block
from privfgl.errors import ConfigError
from privfgl.provenance import commits_sentence
from privfgl.sweep.config import Sweep
from privfgl.sweep.runner import record_path

CONFIG_COLUMNS = ("method", "dataset", "partition", "clients", "rounds", "protocol", "evaluation", "dp",
                  "target_epsilon", "sigma")
TABLE_CONFIG_COLUMNS = tuple(c for c in CONFIG_COLUMNS if c != "dp")  # the spec is long; σ and ε say it
DEFAULT_TABLE = ("test_acc", "epsilon", "MB_up_per_client", "seconds")
# Axis titles with units for the known columns; an attack column reads "ATTACK: METRIC".
AXIS_LABELS = {"test_acc": "test accuracy (fraction)", "test_acc_last": "test accuracy, last round (fraction)",
               "val_acc": "validation accuracy (fraction)", "epsilon": "ε spent (accountant)",
               "MB_up_per_client": "upload per client, whole run (MB)",
               "MB_up_per_client_round": "upload per client per round (MB)", "seconds": "wall time per run (s)",
               "target_epsilon": "target ε", "clients": "clients", "test_f1_macro": "test macro-F1 (fraction)",
               "minority_acc": "minority-node accuracy (fraction)", "test_acc_micro": "test accuracy, pooled (fraction)"}


def axis_label(column: str) -> str:
    if column in AXIS_LABELS:
        return AXIS_LABELS[column]
    if column.startswith(RECORD_BLOCKS):  # a record path: its last parts
        parts = column.split(".")[1:]
        if parts[0] == "settings":  # metrics.settings.unseen-node.test_acc
            return f"{parts[1]}: {AXIS_LABELS.get(parts[-1], parts[-1])}"
        return AXIS_LABELS.get(parts[-1], ".".join(parts))
    if ":" in column:
        attack, metric = column.split(":", 1)
        return f"{attack}: {metric} (attack score)"
    return column


def _attack_columns(findings: list[dict]) -> dict:
    """Per attack and headline metric: the mean over targets with input, preferring each client's
    own upload ("clients") over the aggregate ("aggregate")."""
    from attacks.audit import HEADLINES
    out: dict = {}
    for name in dict.fromkeys(f["name"] for f in findings):
        usable = [f for f in findings if f["name"] == name and "no_input" not in f["metrics"]]
        own = [f for f in usable if not f["target"].startswith("aggregate")]
        chosen = own or usable
        out[f"{name}:on"] = ("clients" if own else "aggregate") if chosen else "no input"
        for key in HEADLINES.get(name, ()):
            values = [f["metrics"][key] for f in chosen if isinstance(f["metrics"].get(key), (int, float))]
            bases = [b for f in chosen if isinstance(b := f["baseline"].get(key, f["baseline"].get(f"uniform_{key}")),
                                                     (int, float))]
            if values:
                out[f"{name}:{key}"] = statistics.fmean(values)
            if bases:
                out[f"{name}:{key}:baseline"] = statistics.fmean(bases)
    return out


RECORD_BLOCKS = ("config.", "metrics.", "cost.", "time.", "privacy.", "attacks.", "canaries.")


def record_value(record: dict, path: str):
    """The value at a dotted path of the record ("metrics.settings.unseen-node.test_acc"; a number
    indexes a list: "attacks.1.metrics.auc" is the second finding), or None."""
    value = record
    for part in path.split("."):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return None
    return value


def record_row(record: dict, extra: tuple[str, ...] = ()) -> dict:
    """One run record -> one flat row (see the module docstring); `extra`: record paths to add."""
    s, c, m, cost = record["sweep"], record["config"], record["metrics"], record["cost"]
    per_client = cost["bytes_up_per_client"]
    mb = statistics.fmean(per_client) / 1e6 if per_client else 0.0
    epsilon = record.get("privacy", {}).get("epsilon")
    row = {"cell": s["cell"], "seed": s["seed"], "method": c["method"], "dataset": c.get("dataset_name", c["dataset"]),
           "partition": c["partition"], "clients": c["clients"], "rounds": c["rounds"], "protocol": c["protocol"],
           "evaluation": c["evaluation"], "dp": c.get("dp"), "target_epsilon": s["options"].get("target_epsilon"),
           "sigma": s.get("sigma"),
           "test_acc": m["test_acc"], "test_acc_last": m.get("last", {}).get("test_acc", m["test_acc"]),
           "val_acc": m.get("val_acc"), "best_round": m.get("best_round"),
           "epsilon": epsilon if epsilon is not None and math.isfinite(epsilon) else None,
           "MB_up_per_client": mb, "MB_up_per_client_round": mb / max(cost.get("rounds") or 1, 1),
           "seconds": record["time"]["total_s"], "privfgl_commit": c.get("versions", {}).get("privfgl_commit")}
    row.update(_attack_columns(record.get("attacks", [])))
    row.update({path: record_value(record, path) for path in extra})
    return row


def collect(sweep: Sweep) -> list[dict]:
    """The rows of every recorded (cell, seed), in the sweep's order."""
    rows = []
    for cell, seed in sweep.tasks:
        path = record_path(sweep.results, cell, seed)
        if path.is_file():
            row = record_row(json.loads(path.read_text()), tuple(c for c in sweep.columns if c.startswith(RECORD_BLOCKS)))
            row.update({f"paper:{k}": v for k, v in (cell.options.get("paper") or {}).items()})  # as configured now
            row["name"] = cell.name  # the [[cells]] entry's label: one line plot series per entry
            rows.append(row)
    return rows


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def summarise(rows: list[dict], cells: list[str]) -> list[dict]:
    """Per cell (in `cells` order): the config columns, `seeds` (how many), and for each numeric
    column its mean and sample std over the seeds (`COL` and `COL:std`)."""
    out = []
    for label in cells:
        group = [r for r in rows if r["cell"] == label]
        if not group:
            continue
        summary = {"cell": label, "seeds": len(group)}
        for key in dict.fromkeys(k for r in group for k in r):
            if key in ("cell", "seed"):
                continue
            values = [r.get(key) for r in group]
            numbers = [v for v in values if _is_number(v)]
            if key in CONFIG_COLUMNS or not numbers:
                summary[key] = next((v for v in values if v is not None), None)
            else:
                summary[key] = statistics.fmean(numbers)
                summary[f"{key}:std"] = statistics.stdev(numbers) if len(numbers) > 1 else 0.0
        out.append(summary)
    return out


def _fmt(value, std=None) -> str:
    if value is None:
        return "–"
    if not _is_number(value):
        return str(value)
    if isinstance(value, int) or (std is None and float(value).is_integer() and abs(value) < 1e5):
        return str(int(value)) if std is None else f"{value} ± {std:.4f}"
    if abs(value) >= 1e5 or (std is None and 0 < abs(value) < 1e-3):  # e.g. a tiny σ and its ε
        return f"{value:.3g}"
    digits = 4 if abs(value) < 10 else 2
    text = f"{value:.{digits}f}"
    return f"{text} ± {std:.{digits}f}" if std is not None else text


def table_columns(sweep: Sweep, summary: list[dict]) -> list[str]:
    """The config columns that differ between cells, then the sweep's metric columns (default:
    DEFAULT_TABLE and every attack's metric with its baseline)."""
    varying = [k for k in TABLE_CONFIG_COLUMNS if len({json.dumps(s.get(k), default=str) for s in summary}) > 1]
    metrics = list(sweep.columns) or [*DEFAULT_TABLE, *sorted({k for s in summary for k in s if ":" in k
                                                              and not k.endswith(":std") and not k.startswith("paper:")})]
    with_paper = []
    for column in metrics:  # a published number goes right after the column it is compared with
        with_paper.append(column)
        if any(s.get(f"paper:{column}") is not None for s in summary):
            with_paper.append(f"paper:{column}")
    return [*varying, *with_paper]


def markdown(sweep: Sweep, summary: list[dict], commits: list[str | None] | None = None) -> str:
    """The sweep's table under a line naming its config and records, then (`commits`: each record's
    privfgl_commit) the commits the records come from (privfgl.provenance.commits_sentence)."""
    cols = table_columns(sweep, summary)
    titles = [sweep.headers.get(c, c) for c in cols]  # [sweep] headers: a column's title in this table only
    lines = ["| cell | seeds | " + " | ".join(titles) + " |", "|---" * (len(cols) + 2) + "|"]
    for s in summary:
        cells = [_fmt(s.get(c), s.get(f"{c}:std") if s["seeds"] > 1 and not c.startswith("paper:") else None)
                 for c in cols]
        lines.append(f"| {s['cell']} | {s['seeds']} | " + " | ".join(cells) + " |")
    seeds = ", ".join(map(str, sweep.seeds))
    provenance = commits_sentence(commits or [])
    return (f"{titled(sweep.title, summary) or 'Sweep ' + sweep.name}: mean ± std over seeds ({seeds}); config "
            f"`{shown(sweep.source)}`, records in `{shown(sweep.results)}/records/`."
            + (f" {provenance}" if provenance else "") + "\n\n" + "\n".join(lines) + "\n")


def _spaced(xs: list[float], logx: bool) -> list[float]:
    """The labelled x ticks: the data's x values, less any within 5 % (log axis: a factor 1.05) of the
    previous one kept, whose labels would print over each other (e.g. accountant ε 0.4953, 0.4986, 0.5)."""
    kept: list[float] = []
    span = (xs[-1] - xs[0]) if xs else 0.0
    for x in xs:
        if kept and math.isfinite(x) and math.isfinite(kept[-1]) and (
                (logx and kept[-1] > 0 and x / kept[-1] < 1.05) or (not logx and x - kept[-1] < 0.05 * span)):
            continue
        kept.append(x)
    return kept


def titled(title: str, summary: list[dict]) -> str:
    """`title` with `{dataset}` replaced by the datasets the records ran on: a real one by its name
    (Cora), a synthetic one said to be one ("synthetic graph 'sbm'"), so that a sweep run on a
    stand-in never reads as the real dataset."""
    if "{dataset}" not in title:
        return title
    from privfgl.data import DATASETS
    names = dict.fromkeys(str(s["dataset"]) for s in summary if s.get("dataset") is not None)
    shown = [DATASETS[n.lower()].folder if n.lower() in DATASETS else f"synthetic graph '{n}'"  # folder: PyG's name
             for n in names]
    return title.replace("{dataset}", ", ".join(shown) or "no dataset")


def write_csv(rows: list[dict], path: Path) -> Path:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def check_line_x(spec, values: list) -> None:
    """A line plot's x values (None: a cell without x, drawn as a reference): numbers, else ConfigError."""
    text = sorted({str(v) for v in values if v is not None and not _is_number(v)})
    if spec.kind == "line" and text:
        raise ConfigError(f"plot {spec.file}: x {spec.x!r} must be a numeric column; the cells have "
                          f"{', '.join(text)} (a bars plot shows one bar per cell)")


def draw(sweep: Sweep, summary: list[dict]) -> list[Path]:
    """The sweep's [[plots]] as PNGs in its results folder."""
    from privfgl import plots
    written, every = [], summary
    label = lambda column: sweep.headers.get(column) or axis_label(column)
    for spec in sweep.plots:
        path = sweep.results / spec.file
        summary = [s for s in every if matches(s, spec.where)]
        seeds = max((s.get("seeds", len(sweep.seeds)) for s in summary), default=len(sweep.seeds))  # own seeds
        note = f"mean ± std over {seeds} seed{'s' * (seeds > 1)}" if seeds > 1 else "one seed"
        if spec.kind == "line":
            check_line_x(spec, [s.get(spec.x) for s in summary])
        if spec.kind == "bars":
            panels = [plots.Panel(label(y), [s.get(y) for s in summary], [s.get(f"{y}:std") for s in summary],
                                  [s.get(f"{y}:baseline") for s in summary], [s.get(f"paper:{y}") for s in summary])
                      for y in spec.y]
            plots.bar_panels([s["cell"] for s in summary], panels, path,
                             title=f"{titled(spec.title or sweep.title, summary) or sweep.name} ({note})")
        else:
            _line(plots, dataclasses.replace(spec, title=titled(spec.title or sweep.title, summary) or sweep.name),
                  summary, path, note, label)
        written.append(path)
    return written


def matches(row: dict, pairs) -> bool:
    """Whether the summary row has every (column, value) of `pairs` (compared as text: 8 matches 8.0); a
    tuple of values matches any of them (e.g. the cells of one panel by their `name`)."""
    same = lambda a, b: a == b or (_is_number(a) and _is_number(b) and float(a) == float(b)) or str(a) == str(b)
    return all(any(same(row.get(column), v) for v in (value if isinstance(value, tuple) else (value,)))
               for column, value in pairs)


MARKERS = ("o", "s", "^", "D", "v")  # a line plot with several y and series: one marker and style per series value
SERIES_STYLES = ("-", ":", "-.")


def _line(plots, spec, summary: list[dict], path: Path, note: str, axis_label=axis_label) -> None:
    """y against x: one line per value of `series` (one y), or one line per y column with its
    `:baseline` dashed in the same colour (several y). Cells without x: references or x = ∞."""
    series, refs = [], []
    as_x = lambda r: math.inf if r.get(spec.x) is None and spec.missing_x == "inf" else r.get(spec.x)
    for i, y in enumerate(spec.y):
        groups: dict[tuple, list[dict]] = {}
        for r in summary:
            groups.setdefault(tuple(r.get(k) for k in spec.series), []).append(r)
        for j, (key, group) in enumerate(groups.items()):
            name = ", ".join(str(k) for k in key if k is not None) if spec.series else axis_label(y)
            if len(spec.y) > 1 and spec.series:
                name = f"{axis_label(y)}, {name}"
            color = f"C{len(series)}" if len(spec.y) == 1 else f"C{i}"
            for suffix, style in (("", "-"), (":baseline", "--")):
                points = sorted((float(as_x(r)), r[y + suffix], r.get(f"{y + suffix}:std") or 0.0) for r in group
                                if as_x(r) is not None and _is_number(r.get(y + suffix)))
                if points:
                    label = name if not suffix else "  its baseline"
                    if len(spec.y) > 1 and spec.series and not suffix:  # y: its colour; series: marker and line style
                        marker, style = MARKERS[j % len(MARKERS)], SERIES_STYLES[j % len(SERIES_STYLES)]
                    else:
                        marker = "o" if not suffix else ""
                    if spec.dashed and all(matches(r, spec.dashed) for r in group):
                        style = "--"
                    series.append(plots.Series(label, *zip(*points), color=color, linestyle=style, marker=marker))
            if spec.missing_x == "reference":
                refs += [(r["cell"] if len(spec.y) == 1 else f"{r['cell']}: {axis_label(y)}", r[y],
                          r.get(f"{y}:std") or 0.0) for r in group
                         if r.get(spec.x) is None and _is_number(r.get(y))]
    references = [plots.Reference(label, value, err, color=f"C{len(series) + j}")
                  for j, (label, value, err) in enumerate(refs)]
    xs = _spaced(sorted({p for s in series for p in s.x}), spec.logx)
    ylabel = spec.ylabel or (axis_label(spec.y[0]) if len(spec.y) == 1 else "score")
    plots.line_plot(series, path, references=references, logx=spec.logx, xticks=xs or None, diagonal=spec.diagonal,
                    logy=spec.logy,
                    legend_loc="below" if len(series) + len(references) > 5 else "best",
                    xlabel=spec.xlabel or axis_label(spec.x), ylabel=ylabel, title=f"{spec.title} ({note})")


def shown(path: Path) -> str:
    """`path` relative to the working directory where it lies below it (tables name the config the
    way a user types it), else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def update_doc(sweep: Sweep, table: str, plots_written: list[Path]) -> Path:
    """Rewrite the block between `<!-- sweep:NAME -->` and `<!-- /sweep:NAME -->` in the sweep's
    docs page (appended when absent) with its table and plots; the plots are copied to
    docs/img/NAME/ beside the page, so the page shows what the sweep measured, and nothing else."""
    import shutil
    page = Path(sweep.doc)
    images = page.parent / "img" / sweep.name
    images.mkdir(parents=True, exist_ok=True)
    links = []
    for path in plots_written:
        shutil.copyfile(path, images / path.name)
        links.append(f"![{path.stem}](img/{sweep.name}/{path.name})" if page.parent.name == "docs"
                     else f"![{path.stem}]({(images / path.name).relative_to(page.parent)})")
    command = f"privfgl sweep {shown(sweep.source)}"
    block = (f"<!-- written by `{command}`; edits between these markers are replaced -->\n\n{table}\n"
             + "".join(f"{link}\n" for link in links))
    write_block(page, f"sweep:{sweep.name}", block)
    return page


def report(sweep: Sweep) -> tuple[str, list[Path]]:
    """Writes runs.csv, summary.csv, summary.md and the plots (and the docs block when the sweep
    names a `doc` page); returns (the Markdown table, files)."""
    rows = collect(sweep)
    if not rows:
        return f"sweep {sweep.name}: no records in {sweep.results}\n", []
    summary = summarise(rows, [c.label for c in sweep.cells])
    sweep.results.mkdir(parents=True, exist_ok=True)
    named = [*sweep.columns, *(c for p in sweep.plots for c in (*p.y, *([p.x] if p.x else []), *p.series))]
    for column in dict.fromkeys(named):
        if all(s.get(column) is None for s in summary):
            print(f"privfgl: warning: column {column!r} is in no record of sweep {sweep.name} (a typo? its table "
                  "column and plot stay empty)", file=sys.stderr)
    table = markdown(sweep, summary, commits=[r["privfgl_commit"] for r in rows])
    files = [write_csv(rows, sweep.results / "runs.csv"), write_csv(summary, sweep.results / "summary.csv")]
    (sweep.results / "summary.md").write_text(table)
    files.append(sweep.results / "summary.md")
    plotted = draw(sweep, summary)
    files += plotted
    if sweep.doc:
        files.append(update_doc(sweep, table, plotted))
    return table, files
