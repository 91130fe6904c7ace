"""Line plots of a metric against a parameter (accuracy vs ε, leakage vs ε), written as PNG by matplotlib.

Shared by the experiment scripts (and meant for a future `privfgl sweep`). matplotlib (the `plots`
extra) is imported inside the drawing functions with the Agg backend, so `import privfgl` never loads it.

    rows = read_csv(Path("runs/privacy_utility.csv"))
    groups = mean_std_by(rows, x="target_epsilon", y="test_acc_last", by=["method"])
    series = [Series(method, *zip(*points)) for (method,), points in groups.items()]  # x, mean, std
    line_plot(series, Path("acc.png"), xlabel="ε", ylabel="test accuracy", title="...", logx=True)
"""
from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Series:
    """One line: y (e.g. the mean over seeds) at each x; `yerr` (e.g. the std) is drawn as error bars.

    An x of inf (e.g. ε of a non-private run) is drawn at its own tick, "∞", right of the finite ones.
    """
    label: str
    x: Sequence[float]
    y: Sequence[float]
    yerr: Sequence[float] | None = None
    color: str | None = None
    linestyle: str = "-"
    marker: str = "o"


@dataclass(frozen=True)
class Reference:
    """A horizontal line at y (e.g. a non-private run or an attack's baseline); ± yerr as a shaded band."""
    label: str
    y: float
    yerr: float | None = None
    color: str | None = None
    linestyle: str = "--"


def mean_std(values: Iterable[float]) -> tuple[float, float]:
    """(mean, sample standard deviation); the std of a single value is 0."""
    vs = [float(v) for v in values]
    return statistics.fmean(vs), (statistics.stdev(vs) if len(vs) > 1 else 0.0)


def mean_std_by(rows: Iterable[dict], x: str, y: str, by: Sequence[str]
                ) -> dict[tuple, list[tuple[float, float, float]]]:
    """Rows grouped by the columns `by`; per group, (x, mean y, std y) over the rows at each x (e.g.
    the seeds), sorted by x. A missing x (None) reads as inf; rows whose y is missing or NaN are skipped."""
    groups: dict[tuple, dict[float, list[float]]] = {}
    for r in rows:
        if r.get(y) is None or (isinstance(r[y], float) and math.isnan(r[y])):
            continue
        xv = math.inf if r.get(x) is None else float(r[x])
        groups.setdefault(tuple(r.get(k) for k in by), {}).setdefault(xv, []).append(float(r[y]))
    return {key: [(xv, *mean_std(vs)) for xv, vs in sorted(points.items())] for key, points in groups.items()}


def tick_label(x: float) -> str:
    """Short tick text: "∞", "16", "1762", "1.65e9"."""
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if x == 0 or 1e-3 <= abs(x) < 1e4:
        return f"{x:.4g}"
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def _wrap(text: str, width: int) -> str:
    """A long title on several lines instead of cut off at the figure's edge."""
    import textwrap
    return "\n".join(textwrap.wrap(text, width))


def _inf_position(finite: list[float], logx: bool) -> float:
    """Where an x of inf is drawn: one step (a decade on a log axis) right of the largest finite x."""
    if not finite:
        return 1.0
    lo, hi = min(finite), max(finite)
    if logx:
        return hi * 10 ** max(1.0, 0.15 * math.log10(hi / lo)) if lo > 0 else hi * 10
    return hi + max(0.15 * (hi - lo), 1.0)


def line_figure(series: Sequence[Series], *, xlabel: str, ylabel: str, title: str = "",
                references: Sequence[Reference] = (), logx: bool = False, ylim: tuple[float, float] | None = None,
                xticks: Sequence[float] | None = None, legend_loc: str = "best", diagonal: bool = False, logy: bool = False,
                figsize: tuple[float, float] = (7.0, 4.5)) -> "Figure":
    """The matplotlib Figure of `line_plot` (Agg backend; the caller closes it).

    diagonal: the line y = x over the x range, dashed grey (labelled "y = x"), e.g. an audited ε against the
    accountant's: a valid lower bound stays on or below it.

    xticks: where to put labelled x ticks (default: matplotlib's, or the data's x values when one is inf).
    legend_loc: a matplotlib location, or "below" (under the axes, two columns: for many entries).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    finite = sorted({float(v) for s in series for v in s.x if math.isfinite(float(v))}
                    | {float(v) for v in (xticks or ()) if math.isfinite(float(v))})
    has_inf = any(math.isinf(float(v)) for s in series for v in s.x) or any(
        math.isinf(float(v)) for v in (xticks or ()))
    at_inf = _inf_position(finite, logx)
    pos = lambda v: at_inf if math.isinf(float(v)) else float(v)

    fig, ax = plt.subplots(figsize=figsize)
    for s in series:
        keep = [i for i, v in enumerate(s.y) if v is not None and not math.isnan(float(v))]
        xs = [pos(s.x[i]) for i in keep]
        ys = [float(s.y[i]) for i in keep]
        err = [float(s.yerr[i] or 0.0) for i in keep] if s.yerr is not None else None
        ax.errorbar(xs, ys, yerr=err, label=s.label, color=s.color, linestyle=s.linestyle, marker=s.marker,
                    markersize=4, capsize=3, linewidth=1.5)
    for ref in references:
        line = ax.axhline(ref.y, color=ref.color, linestyle=ref.linestyle, linewidth=1.2, label=ref.label)
        if ref.yerr:
            ax.axhspan(ref.y - ref.yerr, ref.y + ref.yerr, color=line.get_color(), alpha=0.12, linewidth=0)
    if diagonal and finite:  # many points, so the line is y = x on any axis scale
        lo, hi = finite[0], finite[-1]
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)] if lo > 0 else [lo + (hi - lo) * i / 200 for i in range(201)]
        ax.plot(xs, xs, color="grey", linestyle="--", linewidth=1.2, label="y = x")
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if xticks is None and has_inf:
        xticks = [*finite, math.inf]
    if xticks is not None:
        ticks = sorted({pos(v) for v in xticks})
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([tick_label(math.inf if t == at_inf and has_inf else t) for t in ticks])
        lo, hi = ticks[0], ticks[-1]
        if logx and lo > 0:  # a margin of 5% of the span (at least a factor 1.5) on either side
            pad = 10 ** max(0.05 * math.log10(hi / lo), math.log10(1.5))
            ax.set_xlim(lo / pad, hi * pad)
        elif not logx:
            pad = 0.05 * (hi - lo) or 0.5
            ax.set_xlim(lo - pad, hi + pad)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(_wrap(title, 75), fontsize=10)
    ax.grid(True, alpha=0.3)
    if legend_loc == "below":  # many entries: under the axes, clear of the lines
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8, frameon=False)
        fig.set_size_inches(figsize[0], figsize[1] + 0.25 * math.ceil(len(ax.get_legend_handles_labels()[0]) / 2))
    else:
        ax.legend(loc=legend_loc, fontsize=8)
    fig.tight_layout()
    return fig


def line_plot(series: Sequence[Series], path: Path, *, dpi: int = 120, **kwargs: Any) -> Path:
    """Writes the line plot of `series` (error bars where given), `references`, axis titles, a legend
    and a title as a PNG at `path`; keyword arguments as `line_figure`. Returns `path`."""
    fig = line_figure(series, **kwargs)
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def scalar(text: str) -> Any:
    """Text as an int or float where it reads as one; "" as None; else the text."""
    if text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_csv(path: Path) -> list[dict]:
    """Rows of a CSV written by an experiment script: "" → None, numbers → int/float, the rest as text."""
    with open(path, newline="") as fh:
        return [{k: scalar(v) for k, v in row.items()} for row in csv.DictReader(fh)]


@dataclass(frozen=True)
class Panel:
    """One panel of `bar_panels`: a value per bar (e.g. the mean over seeds), its error (std) and,
    for an attack score, the attack's baseline per bar (drawn as a black tick; None: none)."""
    ylabel: str
    values: Sequence[float | None]
    errors: Sequence[float | None] | None = None
    baselines: Sequence[float | None] | None = None
    papers: Sequence[float | None] | None = None  # a published number per bar (a red marker)


def bar_panels(labels: Sequence[str], panels: Sequence[Panel], path: Path, *, title: str = "",
               dpi: int = 120) -> Path:
    """One row of bar charts sharing the bars' labels (e.g. one bar per protocol): a panel per
    metric, error bars where given, an attack's baseline as a black tick over its bar. PNG at `path`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n = len(panels)
    panel_width = max(3.2, 0.5 * len(labels) + 1.0)
    fig, axes = plt.subplots(1, n, figsize=(max(panel_width * n, 6.0), 4.6), squeeze=False)
    colors = [f"C{i % 10}" for i in range(len(labels))]
    has_baseline = has_paper = False
    for ax, panel in zip(axes[0], panels):
        xs = range(len(labels))
        values = [float("nan") if v is None else float(v) for v in panel.values]
        errors = [0.0 if e is None else float(e) for e in panel.errors] if panel.errors is not None else None
        ax.bar(xs, values, yerr=errors, color=colors, capsize=4, edgecolor="black", linewidth=0.6,
               error_kw={"elinewidth": 1.2})
        for x, base in zip(xs, panel.baselines or ()):
            if base is not None and math.isfinite(float(base)):
                ax.hlines(float(base), x - 0.4, x + 0.4, colors="black", linestyles="--", linewidth=1.6)
                has_baseline = True
        for x, paper in zip(xs, panel.papers or ()):
            if paper is not None and math.isfinite(float(paper)):
                ax.plot([x], [float(paper)], marker="*", color="red", markersize=11, markeredgecolor="black",
                        linestyle="")
                has_paper = True
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(panel.ylabel)
        ax.grid(True, axis="y", alpha=0.3)
    handles = [Patch(facecolor=c, edgecolor="black", label=lab) for c, lab in zip(colors, labels)]
    handles.append(Line2D([], [], color="black", marker="", linestyle="", label="error bar: std over seeds"))
    if has_baseline:
        handles.append(Line2D([], [], color="black", linestyle="--", label="attack baseline (no leak)"))
    if has_paper:
        handles.append(Line2D([], [], color="red", marker="*", markersize=10, markeredgecolor="black", linestyle="",
                              label="paper"))
    width = fig.get_size_inches()[0]
    columns = max(1, min(len(handles), int(width / 2.4)))
    rows = math.ceil(len(handles) / columns)
    fig.set_size_inches(width, fig.get_size_inches()[1] + 0.22 * rows)
    fig.legend(handles=handles, loc="lower center", ncol=columns, fontsize=8, frameon=False)
    if title:
        fig.suptitle(_wrap(title, int(12 * width)), fontsize=10)
    fig.tight_layout(rect=(0, 0.05 + 0.045 * rows, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
