"""A measured block inside a docs page: the text between `<!-- TAG -->` and `<!-- /TAG -->`.

The sweeps and benchmarks that make a page's numbers replace only their own block, so the page's prose
(and other blocks) stay as written.
"""
from __future__ import annotations

from pathlib import Path


def write_block(path: str | Path, tag: str, block: str, title: str | None = None) -> None:
    """Put `block` between the markers of `tag` in the Markdown page `path`: in place of what they hold,
    else appended (a missing page is created, headed `# title` when one is given)."""
    path = Path(path)
    page = path.read_text() if path.is_file() else (f"# {title}\n\n" if title else "")
    start, end = f"<!-- {tag} -->", f"<!-- /{tag} -->"
    if start in page and end in page:
        page = page[:page.index(start) + len(start)] + "\n" + block + page[page.index(end):]
    else:
        page = page.rstrip("\n") + ("\n\n" if page.strip() else "") + f"{start}\n{block}{end}\n"
    path.write_text(page)
