"""Which code made a result: privfgl's git commit, stored in every record (config.versions.privfgl_commit).

Sweeps and the side-by-side scripts skip a cell or seed that already has a stored result, so a result made by
older code can stay in a table after the code changed. With the commit in each result, their reports name the
commits their numbers came from, and a mixed or out-of-date table shows.
"""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WATCHED = ("privfgl", "experiments")  # a change here makes the checkout "+dirty"


@functools.lru_cache(maxsize=1)
def code_commit() -> str:
    """privfgl's commit (git HEAD, 12 hex digits), with '+dirty' when privfgl/ or experiments/ differ from it
    (tracked changes or untracked files); 'unknown' outside a git checkout (an installed wheel). Read once
    per process, at the first call: call it when work starts, since the checkout may change while it runs."""
    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "--short=12", "HEAD")
    if not head:
        return "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--", *WATCHED) else "")


def commits_sentence(commits: list[str | None], what: str = "records") -> str:
    """'The records come from privfgl commit `X`.' for the commits of a table's results (None: a result
    stored before commits were kept), naming each commit's count when they differ; '' when none is known."""
    known = [c for c in commits if c]
    if not known:
        return ""
    counts = {c: known.count(c) for c in sorted(set(known))}
    unknown = len(commits) - len(known)
    if len(counts) == 1 and not unknown:
        return f"The {what} come from privfgl commit `{known[0]}`."
    listed = ", ".join(f"`{c}` ({n})" for c, n in counts.items())
    tail = f", and {unknown} from before commits were kept" if unknown else ""
    return f"The {what} come from privfgl commits {listed}{tail}: not all from one code."
