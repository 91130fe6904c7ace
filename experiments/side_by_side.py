"""What the authors_side_by_side_*.py scripts share: their command line's peer options, their results
file (cell -> stage -> result, JSON) and the issue's target (privfgl >= the authors' mean minus one std,
wall time <= theirs)."""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def peer_parser(doc: str, peer: str, cells, stages, default_stages=None) -> argparse.ArgumentParser:
    """--peer-python, --peer-src and --work (the peer's venv, checkout and run folder, by default under
    /tmp/peer-PEER), --cells and --stages; the script adds its own options."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--peer-python", type=Path, default=Path(f"/tmp/peer-{peer}/venv/bin/python"))
    ap.add_argument("--peer-src", type=Path, default=Path(f"/tmp/peer-{peer}/src"))
    ap.add_argument("--work", type=Path, default=Path(f"/tmp/peer-{peer}/side"))
    ap.add_argument("--cells", nargs="+", choices=list(cells), default=list(cells))
    ap.add_argument("--stages", nargs="+", choices=list(stages), default=list(default_stages or stages))
    return ap


def save_result(store: Path, cell: str, stage: str, result: dict) -> dict:
    """Add one stage's result to the results file `store`, re-read first (another call may have run other
    cells), stamped with privfgl's commit under 'code' (privfgl.provenance.code_commit); returns the whole
    file's results."""
    from privfgl.provenance import code_commit
    merged = json.loads(store.read_text()) if store.is_file() else {}
    merged.setdefault(cell, {})[stage] = {**result, "code": code_commit()}
    store.write_text(json.dumps(merged, indent=1))
    return merged


def results_commits(results: dict) -> str:
    """The sentence naming the privfgl commits of a results file's stages (cell -> stage -> result, as
    save_result keeps them; a stage saved before commits were kept counts as unknown); '' when none is
    known."""
    from privfgl.provenance import commits_sentence
    return commits_sentence([result.get("code") for stages in results.values() for result in stages.values()],
                            what="results")


def floor_check(label: str, peer: list[float], ours: list[float]) -> str:
    """'LABEL holds|fails (floor F)': privfgl's mean >= the authors' mean minus their population std."""
    floor = statistics.fmean(peer) - statistics.pstdev(peer)
    return f"{label} {'holds' if statistics.fmean(ours) >= floor else 'fails'} (floor {floor:.2f})"


def time_check(peer_seconds: list[float], our_seconds: list[float]) -> str:
    """'time holds|fails': privfgl's mean seconds per run <= the authors'."""
    return f"time {'holds' if statistics.fmean(our_seconds) <= statistics.fmean(peer_seconds) else 'fails'}"
