"""privfgl.provenance: every record names the commit that made it, and a table built from stored results
says when they do not all come from one code (a sweep or side-by-side script skips what is stored, so a
result from older code would otherwise stay in its table unseen)."""
import json
import subprocess

import pytest

from privfgl.provenance import REPO, code_commit, commits_sentence


def _git(*argv: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *argv], capture_output=True, text=True).stdout.strip()


def test_the_commit_is_git_head_and_says_when_privfgl_or_experiments_differ():
    head = _git("rev-parse", "--short=12", "HEAD")
    if not head:
        pytest.skip("not a git checkout")
    dirty = bool(_git("status", "--porcelain", "--", "privfgl", "experiments"))
    assert code_commit() == head + ("+dirty" if dirty else "")


def test_outside_a_checkout_the_commit_is_unknown(monkeypatch, tmp_path):
    import privfgl.provenance as provenance
    monkeypatch.setattr(provenance, "REPO", tmp_path)  # a folder that is no git checkout (an installed wheel)
    provenance.code_commit.cache_clear()
    try:
        assert provenance.code_commit() == "unknown"
    finally:
        provenance.code_commit.cache_clear()


def test_the_sentence_names_one_commit_or_counts_each_when_they_differ():
    assert commits_sentence([]) == "" and commits_sentence([None, None]) == ""
    assert commits_sentence(["aaa", "aaa"]) == "The records come from privfgl commit `aaa`."
    assert commits_sentence(["bbb", "aaa", "bbb"], what="runs") == \
        "The runs come from privfgl commits `aaa` (1), `bbb` (2): not all from one code."
    assert commits_sentence(["aaa", None]) == \
        "The records come from privfgl commits `aaa` (1), and 1 from before commits were kept: not all from one code."


def test_a_record_carries_the_commit():
    from privfgl.experiment import config_for, run
    record, _ = run(config_for({"method": "fedavg", "dataset": "sbm", "clients": 2, "rounds": 1, "progress": False,
                                "transcript": "none"}))
    assert record["config"]["versions"]["privfgl_commit"] == code_commit()
    json.dumps(record)  # still plain JSON
