"""A saved view reads back only its own files: `load_view` refuses a view.json entry that names a file
outside the view's folder (issue #40, finding 5), so a view.json from elsewhere cannot make an
auditor's reader open any other file on disk."""
import json
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attacks.view import AdversaryView, load_view, save_view
from privfgl.federation.messages import Message

SECRET = b"a file outside the view"


def saved_view(folder):
    """A one-message view saved in `folder` (a tensor and a blob), and a secret file beside the folder."""
    message = Message(0, "model_update", "client0", "server", "plaintext", 24, {"w": torch.arange(3.0)}, (b"\x01\x02",))
    save_view(AdversaryView("server", (message,)), folder)
    (folder.parent / "secret.npy").write_bytes(SECRET)
    return folder / "view.json"


def point_entry(view_json, kind: str, name: str) -> None:
    data = json.loads(view_json.read_text())
    entry = data["messages"][0]
    if kind == "tensors":
        entry["tensors"]["w"] = name
    else:
        entry["blobs"][0] = name
    view_json.write_text(json.dumps(data))


def test_a_saved_view_reads_back_unchanged(tmp_path):
    saved_view(tmp_path / "view")
    view = load_view(tmp_path / "view")
    assert view.party == "server" and torch.equal(view.messages[0].tensors["w"], torch.arange(3.0))
    assert view.messages[0].blobs == (b"\x01\x02",)


@pytest.mark.parametrize("kind", ["tensors", "blobs"])
@pytest.mark.parametrize("name", ["../secret.npy", "{parent}/secret.npy", "sub/../../secret.npy", "..", ".", "",
                                  "/etc/passwd", "link.npy"])
def test_an_entry_outside_the_folder_is_refused_in_one_line(tmp_path, kind, name):
    folder = tmp_path / "view"
    view_json = saved_view(folder)
    os.symlink(tmp_path / "secret.npy", folder / "link.npy")  # a symlink inside the folder that leads out of it
    name = name.format(parent=tmp_path)
    point_entry(view_json, kind, name)
    with pytest.raises(ValueError) as caught:
        load_view(folder)
    message = str(caught.value)
    assert "\n" not in message and repr(name) in message and "plain file name" in message
    assert f"messages[0].{kind}" in message


@settings(max_examples=60, deadline=None)
@given(name=st.text(alphabet="./ab", min_size=1, max_size=8))
def test_a_name_is_read_only_if_it_is_a_plain_file_of_the_folder(tmp_path_factory, name):
    folder = tmp_path_factory.mktemp("case") / "view"
    view_json = saved_view(folder)
    point_entry(view_json, "blobs", name)
    (folder / "b").write_bytes(b"inside")  # a plain file of the folder that a name may reach
    plain = "/" not in name and name not in (".", "..")
    if plain and (folder / name).is_file():
        assert load_view(folder).messages[0].blobs == ((folder / name).read_bytes(),)
    else:
        with pytest.raises((ValueError, FileNotFoundError, IsADirectoryError)) as caught:
            load_view(folder)
        if not plain:
            assert caught.type is ValueError  # refused before any file is opened
