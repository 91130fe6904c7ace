"""privfgl/plots.py: matplotlib line plots (legend, error bars, ∞ tick) and no hand-written PNG encoder."""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from privfgl.plots import Reference, Series, mean_std_by, read_csv, tick_label

REPO = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

ROWS = [{"method": m, "eps": e, "seed": s, "acc": 0.5 + 0.02 * e + 0.01 * s + (0.1 if m == "b" else 0.0)}
        for m in ("a", "b") for e in (1.0, 4.0, 16.0) for s in (0, 1, 2)]


def test_mean_std_by_groups_seeds():
    groups = mean_std_by(ROWS + [{"method": "a", "eps": None, "seed": 0, "acc": 0.9}], "eps", "acc", ["method"])
    assert sorted(groups) == [("a",), ("b",)]
    x, mean, std = zip(*groups[("a",)])
    assert x == (1.0, 4.0, 16.0, math.inf)  # a missing x reads as inf (e.g. ε of a non-private run)
    assert mean[0] == pytest.approx(0.53) and std[0] == pytest.approx(0.01) and std[-1] == 0.0


def test_tick_label():
    assert [tick_label(v) for v in (math.inf, 16.0, 1761.78, 1.65e9, 1e-5)] == ["∞", "16", "1762", "1.65e9", "1e-5"]


def test_read_csv_types(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("method,epsilon,seed,acc\nfedavg,,0,0.75\ndp-fedavg,8.0,1,0.5\n")
    assert read_csv(path) == [{"method": "fedavg", "epsilon": None, "seed": 0, "acc": 0.75},
                              {"method": "dp-fedavg", "epsilon": 8.0, "seed": 1, "acc": 0.5}]


def test_line_plot_writes_matplotlib_png_with_legend_and_error_bars(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.container import ErrorbarContainer

    from privfgl.plots import line_figure, line_plot

    series = [Series(m, *zip(*pts)) for (m,), pts in mean_std_by(ROWS, "eps", "acc", ["method"]).items()]
    series.append(Series("no DP at ∞", [4.0, math.inf], [0.6, 0.8], linestyle="--"))
    kwargs = dict(references=[Reference("baseline", 0.55, yerr=0.02)], xlabel="ε (δ = 1e-5)",
                  ylabel="test accuracy (fraction)", title="accuracy vs ε", logx=True)
    fig = line_figure(series, **kwargs)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["baseline", "a", "b", "no DP at ∞"]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 3 and bars[0].has_yerr
    assert ax.get_xlabel() == "ε (δ = 1e-5)" and ax.get_title() == "accuracy vs ε" and ax.get_xscale() == "log"
    assert "∞" in [t.get_text() for t in ax.get_xticklabels()]
    import matplotlib.pyplot as plt
    plt.close(fig)

    path = line_plot(series, tmp_path / "sub" / "plot.png", **kwargs)
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert b"Matplotlib" in data[:400]  # Agg's Software text chunk
    assert len(data) > 10_000  # text, ticks and lines, not a few pixels


def test_import_privfgl_does_not_load_matplotlib():
    code = "import sys, privfgl, privfgl.plots; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_no_hand_written_png_encoder():
    """Figures come from matplotlib: no source file writes PNG chunks itself."""
    chunk = re.compile(r"""b["'](IHDR|IDAT|IEND)["']""")
    compress, pack = "zlib." + "compress", "struct." + "pack"  # split, so this file does not match itself
    offenders = []
    for folder in ("privfgl", "experiments", "attacks", "protocols", "tests"):
        for path in (REPO / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8", errors="replace")
            if chunk.search(text) or (compress in text and pack in text):
                offenders.append(str(path.relative_to(REPO)))
    assert offenders == []
    assert not (REPO / "experiments" / "png_canvas.py").exists()
