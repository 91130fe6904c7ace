"""Start-up (issue #21): `privfgl --help`, argument errors and `import privfgl.cli` load none of the heavy
libraries; a plain FedAvg run loads only torch and torch_geometric of them. Each check runs a fresh
interpreter (sys.modules of this test process already holds everything). Wall times are measured by
experiments/bench_startup.py (docs/speed.md), not asserted here."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torch_geometric", "sklearn", "scipy", "crypten", "tenseal", "opacus", "networkx", "matplotlib",
         "pymetis", "ray")  # ray: only under `privfgl sweep --ray`


def python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def loaded_after(statements: str, env: dict | None = None) -> list[str]:
    """The HEAVY (and `attacks`) top-level modules in sys.modules after running `statements`."""
    done = python(f"{statements}\nimport json, sys\n"
                  f"print(json.dumps([m for m in {HEAVY + ('attacks',)!r} if m in sys.modules]))", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("statements", [
    "import privfgl",
    "import privfgl.cli",
    "import privfgl.data\nfrom privfgl.data import DataError, DatasetUnavailable",
    "from privfgl.methods import METHODS\nassert 'fedavg' in METHODS and len(METHODS) == 12",
])
def test_light_imports_load_no_heavy_library(statements):
    assert loaded_after(statements) == []


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["audit", "--help"], ["sweep", "--help"],
                                  ["run", "--no-such-flag"], ["run", "--clients", "x"], ["no-such-command"]])
def test_help_and_argument_errors_load_no_heavy_library(argv):
    statements = (f"from privfgl.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
                  "import sys; sys.stdout.flush()")
    assert loaded_after(statements) == []


def test_help_exits_0():
    done = python("from privfgl.cli import main; main()", "--help")
    assert done.returncode == 0, done.stderr
    assert "run" in done.stdout and "audit" in done.stdout and done.stderr == ""


def test_module_entry_point_answers_help():
    done = subprocess.run([sys.executable, "-m", "privfgl.cli", "run", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "fedavg" in done.stdout


@pytest.mark.parametrize("argv, message", [
    (["run", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["run", "--clients", "x"], "--clients: invalid int value"),
    (["no-such-command"], "invalid choice: 'no-such-command'"),
    ([], "required: command"),
])
def test_a_bad_flag_gives_one_line_on_stderr_and_exit_code_2(argv, message):
    done = subprocess.run([sys.executable, "-m", "privfgl.cli", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("privfgl") and ": error: " in lines[0] and message in lines[0]


def test_help_lists_exactly_the_methods():
    from privfgl.cli import METHOD_NAMES
    from privfgl.methods import METHODS
    assert METHOD_NAMES == tuple(METHODS)


def test_lazy_names_resolve_to_the_defining_modules():
    import privfgl.data as data
    import privfgl.methods as methods
    from privfgl.data.datasets import load_dataset
    from privfgl.methods.base import Setup
    from privfgl.methods.fedavg import run_fedavg
    for name in data.__all__:
        assert getattr(data, name) is not None
    for name in methods.__all__:
        assert getattr(methods, name) is not None
    assert data.load_dataset is load_dataset and methods.Setup is Setup
    assert methods.METHODS["fedavg"] is run_fedavg is methods.run_fedavg
    assert dict(methods.METHODS)["opfgl"] is methods.run_opfgl
    with pytest.raises(AttributeError):
        data.no_such_name  # noqa: B018
    with pytest.raises(KeyError):
        methods.METHODS["no-such-method"]


def test_a_plain_fedavg_run_loads_only_torch_and_torch_geometric(tmp_path):
    """Neither the attacks nor CrypTen, TenSEAL, opacus, scikit-learn, scipy or networkx (the
    dirichlet partition of a synthetic graph needs none of them either)."""
    statements = ("from privfgl.cli import main\n"
                  "assert main(['run', '--method', 'fedavg', '--dataset', 'sbm', '--partition', 'dirichlet', "
                  "'--clients', '3', '--rounds', '1', '--no-progress']) == 0")
    assert loaded_after(statements, env={"PRIVFGL_CACHE": str(tmp_path)}) == ["torch", "torch_geometric"]


SPY_COMMAND = """
import gc, json, sys
from privfgl import cli
seen = []
def spy(args):
    seen.append(gc.isenabled())
    cli.imports_done()
    seen.append(gc.isenabled())
    return 0
cli.cmd_datasets = spy
"""


def test_console_entry_keeps_the_collector_off_the_imports_only():
    """`privfgl` (cli.entry): the cyclic GC is off until the command's imports are done, then on again,
    and what the imports built is frozen (docs/speed.md: about 2 s of start-up and exit)."""
    done = python(SPY_COMMAND + "sys.argv = ['privfgl', 'datasets']\ntry:\n    cli.entry()\nexcept SystemExit as e:\n"
                  "    print(json.dumps([seen, gc.isenabled(), gc.get_freeze_count() > 0, e.code]))")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [[False, True], True, True, 0]


def test_main_alone_leaves_the_collector_as_it_is():
    done = python(SPY_COMMAND + "code = cli.main(['datasets'])\n"
                  "print(json.dumps([seen, gc.isenabled(), gc.get_freeze_count(), code]))")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [[True, True], True, 0, 0]


def test_console_entry_resumes_the_collector_after_an_argument_error():
    done = python("import gc, sys\nfrom privfgl import cli\nsys.argv = ['privfgl', 'run', '--no-such-flag']\n"
                  "try:\n    cli.entry()\nexcept SystemExit as e:\n    print(gc.isenabled(), e.code)")
    assert done.stdout.split() == ["True", "2"], done.stderr


def test_a_process_leaves_none_of_pygs_rendered_templates_in_the_temp_folder(tmp_path):
    """PyG renders each layer class's propagate into <tmp>/torch_geometric.*.py and never removes it;
    privfgl removes them at exit (one file per layer class per run would pile up over sweeps)."""
    code = ("import tempfile; from privfgl.models import build_model\n"
            "for name in ('gcn', 'sage', 'gat'): build_model(name, 5, 8, 3)\n"
            "import os; print(sum(f.startswith('torch_geometric.') for f in os.listdir(tempfile.gettempdir())))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(tmp_path)},
                         capture_output=True, text=True, check=True).stdout
    assert int(out) >= 3  # PyG did write them while the process ran
    assert not [f for f in os.listdir(tmp_path) if f.startswith("torch_geometric.")]
