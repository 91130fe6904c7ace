"""The README stays a newcomer's page, every link in it and in docs/ points at a real file, and a
script's --help shows its commands as they are written."""
from __future__ import annotations

import io
import re
import subprocess
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_under_15_kb():
    assert len((REPO / "README.md").read_bytes()) < 15_000


def test_every_relative_link_resolves():
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


def test_every_shipped_sweep_is_listed_in_the_sweeps_page():
    listed = set(re.findall(r"\]\(\.\./experiments/([\w.-]+\.toml)\)", (REPO / "docs" / "sweeps.md").read_text()))
    shipped = {p.name for p in (REPO / "experiments").glob("*.toml")}
    assert sorted(shipped - listed) == []


def test_the_readme_names_the_two_commands_and_they_exist_in_the_makefile():
    readme, makefile = (REPO / "README.md").read_text(), (REPO / "Makefile").read_text()
    assert "make run" in readme and "make test" in readme
    assert re.search(r"^run:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "privfgl quickstart" in makefile


def test_no_docstring_joins_a_command_split_over_two_lines():
    # a backslash at the end of a line inside a non-raw string is a line continuation: --help (which
    # prints the module docstring) then shows the two lines of a command run together
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    joined = []
    for name in files.stdout.split():
        source = (REPO / name).read_text(encoding="utf-8")
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            literal = token.string.lstrip("bBfFuU")
            if token.type == tokenize.STRING and not literal.lower().startswith("r") \
                    and re.search(r"(?<!\\)(\\\\)*\\\n", literal):
                joined.append(f"{name}:{token.start[0]}")
    assert joined == []
