"""A measured block inside a docs page: the text between `<!-- TAG -->` and `<!-- /TAG -->`.

The benchmarks that make a page's numbers replace only their own block, so the page's prose (and
other benchmarks' blocks) stay as written.
"""
from __future__ import annotations

from pathlib import Path


def write_block(path: str | Path, tag: str, block: str, title: str) -> None:
    """Put `block` between the markers of `tag` in the Markdown page `path`: in place of what they hold,
    else appended (the page is created with `# title` if missing)."""
    path = Path(path)
    page = path.read_text() if path.exists() else f"# {title}\n\n"
    start, end = f"<!-- {tag} -->", f"<!-- /{tag} -->"
    if start in page and end in page:
        page = page[:page.index(start) + len(start)] + "\n" + block + page[page.index(end):]
    else:
        page = page.rstrip("\n") + f"\n\n{start}\n{block}{end}\n"
    path.write_text(page)
