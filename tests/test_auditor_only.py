"""The run record says which of its fields only the auditor sees (issue #40, finding 5): each
client's counts, accuracies and correct predictions are computed by the auditor from the client's
private labels and never sent to the server, so `privacy.auditor_only` names them."""
import json

import pytest

from privfgl.cli import main
from privfgl.data import load_dataset
from privfgl.experiment import RunConfig, run
from privfgl.results import auditor_only
from tests.record_checks import assert_per_client_values_are_auditor_only


@pytest.fixture(scope="module")
def settings_record():
    """FedAvg on the synthetic graph with every closed-set evaluation setting (per-client blocks in each)."""
    cfg = RunConfig(method="fedavg", dataset="sbm", clients=3, rounds=2, progress=False, transcript="none",
                    evaluate=("unseen-node", "missing-class", "new-client"))
    record, _ = run(cfg, data=load_dataset("sbm"))
    return record


def test_every_per_client_value_is_named_auditor_only(settings_record):
    listed = settings_record["privacy"]["auditor_only"]
    assert "metrics.per_client" in listed and "metrics.settings.unseen-node.per_client" in listed
    assert {"n_nodes", "n_val", "n_test", "test_correct"} <= set(settings_record["metrics"]["per_client"][0])
    assert_per_client_values_are_auditor_only(settings_record)


def test_the_list_names_only_what_the_record_holds():
    record = {"metrics": {"per_client": [], "settings": {"seen": {"per_client": []}, "new-client": {}}}, "attacks": []}
    assert auditor_only(record) == ["metrics.per_client", "metrics.settings.seen.per_client", "attacks"]


def test_the_saved_view_holds_only_the_servers_messages_and_no_record_field(planetoid_root, tmp_path, capsys):
    """--save-view writes what the server received or sent, nothing of the record: no metric, no
    per-client count."""
    from privfgl.federation import SERVER
    out, folder = tmp_path / "r.json", tmp_path / "view"
    assert main(["run", "--method", "fedavg", "--dataset", "cora", "--clients", "3", "--rounds", "2", "--protocol",
                 "crypten", "--save-view", str(folder), "--out", str(out), "--data-root", str(planetoid_root),
                 "--offline", "--no-progress"]) == 0
    record, view = json.loads(out.read_text()), json.loads((folder / "view.json").read_text())
    assert set(view) == {"format", "party", "messages"} and view["party"] == SERVER
    assert all(SERVER in (m["sender"], m["receiver"]) for m in view["messages"])
    assert all(set(m) == {"round", "name", "sender", "receiver", "kind", "nbytes", "tensors", "blobs"}
               for m in view["messages"])
    kinds = record["privacy"]["server_view"]  # e.g. "aggregate: 2; share: 12": the record's own count of them
    counted = sum(int(part.split(": ")[1]) for part in kinds.split("; "))
    assert len([m for m in view["messages"] if m["receiver"] == SERVER]) == counted
    text = (folder / "view.json").read_text()
    assert not any(key in text for key in ("per_client", "test_correct", "n_nodes", "test_acc"))
