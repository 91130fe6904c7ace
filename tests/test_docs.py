"""The README stays a newcomer's page, and every link in it and in docs/ points at a real file."""
from __future__ import annotations

import re
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


def test_the_readme_names_the_two_commands_and_they_exist_in_the_makefile():
    readme, makefile = (REPO / "README.md").read_text(), (REPO / "Makefile").read_text()
    assert "make run" in readme and "make test" in readme
    assert re.search(r"^run:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "privfgl quickstart" in makefile
