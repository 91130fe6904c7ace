"""experiments/dp_audit.toml (issue #41): dp-audit of DP-FedAvg (central and distributed) and of node-level
DP-SGD at every accountant ε, its table in docs/dp-audit.md and its plot of the audited ε against the accountant's with y = x."""
from __future__ import annotations

from pathlib import Path

from privfgl import plots
from privfgl.sweep import load_sweep
from privfgl.sweep.config import ENVIRONMENT_OPTIONS

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "experiments" / "dp_audit.toml"
TARGETS = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]


def _doc_rows() -> dict[str, dict[str, str]]:
    """The rows of the sweep's block in docs/dp-audit.md: cell label -> {column title: text}."""
    page = (REPO / "docs" / "dp-audit.md").read_text()
    block = page.split("<!-- sweep:dp_audit -->")[1].split("<!-- /sweep:dp_audit -->")[0]
    lines = [line for line in block.splitlines() if line.startswith("| ")]
    titles = [t.strip() for t in lines[0].strip("|").split("|")]
    return {cells[0]: dict(zip(titles, cells)) for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}


def test_the_sweep_audits_central_and_distributed_dp_fedavg_at_every_target_epsilon(tmp_path):
    sweep = load_sweep(CONFIG, results=tmp_path)
    assert sweep.doc == "docs/dp-audit.md" and sweep.seeds == (0,)
    audited = [c for c in sweep.cells if c.options.get("attacks") and c.options["method"] == "dp-fedavg"]
    for mode, protocol in (("central", "plain"), ("distributed", "secagg")):
        cells = [c for c in audited if f"mode={mode}," in c.options["dp"]]
        assert sorted(c.options["target_epsilon"] for c in cells) == TARGETS
        for cell in cells:
            o = cell.options
            assert o["attacks"] == ["dp-audit:canaries=20000,view=rounds"]
            assert (o["method"], o["dataset"], o["partition"], o["clients"], o["rounds"], o["protocol"]) == (
                "dp-fedavg", "cora", "louvain", 10, 20, protocol)
            assert o["dp"].startswith("gaussian:sigma={sigma},clip=0.5,") and o["method_params"] == {"q": 1.0}
    assert len(audited) == 12
    sgd = [c for c in sweep.cells if c.options["method"] == "dp-sgd"]
    assert sorted(c.options["target_epsilon"] for c in sgd) == TARGETS
    for cell in sgd:  # SGD, one step a round: the server recovers each round's noisy gradient sum
        o = cell.options
        assert o["attacks"] == ["dp-audit:canaries=10000"] and o["protocol"] == "plain"
        assert (o["optimizer"], o["local_epochs"], o["dataset"], o["clients"], o["rounds"]) == ("sgd", 1, "cora", 10, 20)
        assert o["method_params"] == {"sigma": "{sigma}", "clip": 1.0, "degree": 3, "seed": "{seed}"}
    # the audit's cost: the same run at ε = 8 without it, keeping the transcript the audited runs keep
    plain = [c for c in sweep.cells if not c.options.get("attacks")]
    assert len(plain) == 2 and all(c.options["target_epsilon"] == 8.0 and c.options["transcript"] == "all"
                                   for c in plain)
    for bare in plain:
        twin = next(c for c in audited if c.options["dp"] == bare.options["dp"] and c.options["target_epsilon"] == 8.0)
        differ = {k for k in {*bare.options, *twin.options} - set(ENVIRONMENT_OPTIONS)
                  if bare.options.get(k) != twin.options.get(k)}
        assert differ <= {"attacks", "transcript"}, differ
    (plot,) = sweep.plots
    assert plot.kind == "line" and plot.x == "epsilon" and plot.diagonal and plot.logx and plot.logy
    assert plot.y == ("attacks.0.metrics.epsilon_lower_bound",) and plot.series == ("method", "protocol")


def test_the_sweep_audits_message_dp_and_opfgl_statistics_at_every_target_epsilon(tmp_path):
    """Canary contributions (FedAvg's model_update, distributed DP behind secagg) and canary nodes (O-pFGL's
    statistics, dp_mode=distributed behind secagg), each at every target ε, on DP-FedAvg's setting."""
    sweep = load_sweep(CONFIG, results=tmp_path)
    for method, attack in (("fedavg", "dp-audit:canaries=10000"), ("opfgl", "dp-audit:canaries=20000")):
        cells = [c for c in sweep.cells if c.options["method"] == method]
        assert sorted(c.options["target_epsilon"] for c in cells) == TARGETS
        for cell in cells:
            o = cell.options
            assert o["attacks"] == [attack] and o["protocol"] == "secagg"
            assert (o["dataset"], o["partition"], o["clients"]) == ("cora", "louvain", 10)
            if method == "fedavg":
                assert o["dp"].startswith("gaussian:sigma={sigma},clip=0.5,on=update,mode=distributed")
                assert o["rounds"] == 20 and not o.get("method_params")
            else:
                assert o["method_params"]["dp_epsilon"] == "{target_epsilon}"
                assert o["method_params"]["dp_mode"] == "distributed" and "dp" not in o


def test_the_docs_table_is_the_sweeps_and_no_valid_bound_exceeds_the_accountants_epsilon(tmp_path):
    sweep = load_sweep(CONFIG, results=tmp_path)
    rows = _doc_rows()
    assert set(rows) == {c.label for c in sweep.cells}
    audited = [row for row in rows.values() if row["valid bound"] != "–"]
    assert len(audited) == len([c for c in sweep.cells if c.options.get("attacks")])
    for row in audited:
        bound, epsilon = float(row["valid bound"]), float(row["accountant ε"])
        assert 0 < bound <= epsilon and abs(float(row["bound / ε"]) - bound / epsilon) < 1e-3
        assert row["by"] == "per_round"  # q = 1 and every round's release seen: the claim fixes the per-round bound
        if row["f-DP bound"] != "–":  # (no Gaussian claim to refine under FedGPL's Laplace)
            assert float(row["one-run bound"]) <= float(row["f-DP bound"])  # the f-DP refinement is the stronger
    assert (REPO / "docs" / "img" / "dp_audit" / "dp_audit.png").stat().st_size > 10_000


def test_a_line_plot_with_diagonal_draws_y_equals_x_over_the_x_range_dashed(tmp_path):
    series = [plots.Series("f-DP bound", [0.5, 2.0, 16.0], [0.2, 1.2, 9.8])]
    fig = plots.line_figure(series, xlabel="accountant ε", ylabel="audited ε", logx=True, logy=True, diagonal=True)
    (diagonal,) = [line for line in fig.axes[0].get_lines() if line.get_label() == "y = x"]
    xs, ys = diagonal.get_xdata(), diagonal.get_ydata()
    assert list(xs) == list(ys) and min(xs) == 0.5 and abs(max(xs) - 16.0) < 1e-9 and len(xs) > 2
    assert diagonal.get_linestyle() == "--" and fig.axes[0].get_yscale() == "log"
    assert "y = x" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    without = plots.line_figure(series, xlabel="x", ylabel="y")
    assert not [line for line in without.axes[0].get_lines() if line.get_label() == "y = x"]
    import matplotlib.pyplot as plt
    plt.close(fig), plt.close(without)
    path = plots.line_plot(series, tmp_path / "audit.png", xlabel="x", ylabel="y", diagonal=True)
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 1000


def test_the_sweep_report_draws_one_valid_bound_line_per_mechanism_with_the_diagonal(tmp_path, monkeypatch):
    from privfgl.sweep.report import draw
    sweep = load_sweep(CONFIG, results=tmp_path)
    (y,) = sweep.plots[0].y
    summary = [{"cell": f"{m} {p} {e}", "method": m, "protocol": p, "epsilon": e, y: e * 0.8}
               for m, p in (("dp-fedavg", "plain"), ("dp-fedavg", "secagg"), ("dp-sgd", "plain"))
               for e in (0.4953, 0.4986, 8.0)]
    calls = []
    monkeypatch.setattr(plots, "line_plot", lambda series, path, **kw: calls.append((series, kw)))
    draw(sweep, summary)
    (series, kw), = calls
    assert kw["diagonal"] and kw["logy"] and kw["logx"]
    assert sorted(s.label for s in series) == ["dp-fedavg, plain", "dp-fedavg, secagg", "dp-sgd, plain"]
    assert kw["xticks"] == [0.4953, 8.0]  # 0.4986 would print over 0.4953

