"""The runtime: every byte crosses the channel, and every party's view is recorded."""
import numpy as np
import pytest
import torch

import protocols
from protocols.crypten_compat import encode
from privfgl.federation import SERVER, Federation, Transcript, client_name, flatten, unflatten


def uploads(K=3, shape=(4, 2)):
    return [{"w": torch.full(shape, float(k + 1)), "n": torch.tensor(float(k + 1))} for k in range(K)]


def test_plain_aggregation_shows_the_server_every_upload_and_counts_their_bytes():
    fed = Federation(3, protocols.get_protocol("plain"))
    sums = fed.aggregate(0, "update", uploads())
    assert torch.equal(sums["w"], torch.full((4, 2), 6.0, dtype=torch.float64))
    assert float(sums["n"]) == 6.0
    seen = fed.transcript.view(SERVER, name="update")
    assert [m.sender for m in seen] == [client_name(k) for k in range(3)]
    for k, m in enumerate(seen):
        assert m.kind == "plaintext"
        assert torch.equal(m.tensors["w"], uploads()[k]["w"])
        assert m.nbytes == (8 + 1) * 8  # 9 float64 values
    assert fed.cost()["bytes_up_per_client"] == [72, 72, 72]
    assert fed.transcript.view(SERVER, name="update:sum")[0].tensors["n"] == 6.0


def test_broadcast_counts_bytes_per_receiving_client():
    fed = Federation(4, protocols.get_protocol("plain"))
    fed.broadcast(0, "model", {"a": torch.zeros(10, dtype=torch.float32), "b": torch.zeros(3, 2)})
    assert fed.cost()["bytes_down"] == 4 * (10 + 6) * 4
    for k in range(4):
        (m,) = fed.transcript.view(client_name(k))
        assert (m.sender, m.name, m.nbytes) == (SERVER, "model", 64)


def test_upload_is_a_plaintext_message_only_the_server_sees():
    fed = Federation(2, protocols.get_protocol("plain"))
    fed.upload(0, 1, "embedding", {"h": torch.ones(5)})
    assert fed.transcript.view(SERVER)[0].sender == "client1"
    assert fed.transcript.view("client0") == []


def test_aggregate_rejects_mismatched_fields_and_wrong_client_count():
    fed = Federation(2, protocols.get_protocol("plain"))
    with pytest.raises(ValueError, match="client 1"):
        fed.aggregate(0, "u", [{"a": torch.ones(2)}, {"b": torch.ones(2)}])
    with pytest.raises(ValueError, match="expected 2 contributions"):
        fed.aggregate(0, "u", [{"a": torch.ones(2)}])


def test_flatten_roundtrip():
    t = {"b": torch.arange(6.0).view(2, 3), "a": torch.tensor(2.0)}
    flat, layout = flatten(t)
    assert flat.dtype == torch.float64 and flat.numel() == 7
    back = unflatten(flat, layout)
    assert all(torch.equal(back[n], t[n].double()) for n in t)


def test_integer_fields_are_summed_as_integers():
    fed = Federation(2, protocols.get_protocol("plain"))
    sums = fed.aggregate(0, "counts", [{"n": torch.tensor([1, 2])}, {"n": torch.tensor([3, 4])}])
    assert sums["n"].dtype == torch.int64 and sums["n"].tolist() == [4, 6]


@pytest.mark.parametrize("keep, payload_rounds", [("all", {0, 1}), ("last", {1}), ("none", set())])
def test_transcript_keeps_payloads_by_policy_and_metadata_always(keep, payload_rounds):
    fed = Federation(2, protocols.get_protocol("plain"), Transcript(keep))
    for r in range(2):
        fed.aggregate(r, "u", uploads(2))
    view = fed.transcript.view(SERVER, name="u")
    assert len(view) == 4
    assert {m.round for m in view if m.tensors is not None} == payload_rounds


@pytest.mark.parametrize("keep, payload_rounds", [("all", {0, 1}), ("last", {1}), ("none", set())])
def test_the_policy_keeps_or_drops_ciphertexts_and_shares_as_it_does_tensors(keep, payload_rounds):
    fed = Federation(2, protocols.get_protocol("crypten"), Transcript(keep))
    for r in range(2):
        fed.aggregate(r, "u", uploads(2))
    view = fed.transcript.view(SERVER, name="u")
    assert view and all(m.kind != "plaintext" for m in view if m.sender != SERVER)
    assert {m.round for m in view if m.blobs is not None} == payload_rounds


def test_a_sum_that_misses_two_clients_counts_two_dropped_inputs():
    fed = Federation(4, protocols.get_protocol("plain"))
    fed.absent = {0: [1, 3]}  # round 0: clients 1 and 3 send nothing
    fed.aggregate(0, "u", uploads(4))
    fed.aggregate(1, "u", uploads(4))
    summary = fed.participation_summary()
    assert (summary["sums"], summary["dropped_inputs"]) == (2, 2)
    assert summary["partial_sums"] == [{"round": 0, "message": "u", "survivors": [0, 2], "dropped": [1, 3]}]


def test_unknown_transcript_policy_is_rejected():
    with pytest.raises(ValueError, match="valid: all, last, none"):
        Transcript("some")


# --- every byte booked to its real sender and receiver ----------------------------------------


@pytest.mark.parametrize(("name", "params"), [("plain", {}), ("crypten", {}), ("ckks", {"preset": "sum"}),
                                              ("bfv", {"preset": "default"})])
def test_the_channel_books_exactly_the_protocols_transfers_per_link(name, params):
    fed = Federation(3, protocols.get_protocol(name, **params))
    protocol_bytes = {}
    original = fed.protocol.aggregate

    def spy(contributions, reveal_to="server"):
        result = original(contributions, reveal_to)
        for t in result.transfers:
            link = f"{t.sender}->{t.receiver}"
            protocol_bytes[link] = protocol_bytes.get(link, 0) + t.nbytes
        return result

    fed.protocol.aggregate = spy
    for r in range(2):
        fed.aggregate(r, "update", uploads())
    assert fed.cost()["by_link"] == {k: v for k, v in sorted(protocol_bytes.items())}
    cost = fed.cost()
    assert cost["bytes_up"] + cost["bytes_down"] == sum(protocol_bytes.values())


def test_crypten_peer_shares_go_client_to_client_not_through_the_server():
    fed = Federation(3, protocols.get_protocol("crypten"))
    fed.aggregate(0, "update", uploads())
    links = fed.cost()["by_link"]
    share = 9 * 8  # one share of the 9 values
    assert links["client0->client1"] == links["client2->client0"] == share
    assert links["client1->server"] == 2 * share  # its input share, then its summed share at the reveal
    assert "server->client0" not in links  # nothing comes back from the server
    (m,) = fed.transcript.view(client_name(1), name="update:share", round=0)[:1]
    assert m.sender == "client0" and m.kind == "share" and len(m.blobs[0]) == share


def test_he_key_holder_sends_the_decrypted_sum_to_the_server_over_the_channel():
    fed = Federation(3, protocols.get_protocol("ckks", preset="sum"))
    fed.aggregate(0, "update", uploads())
    (reveal,) = fed.transcript.view(SERVER, name="update:reveal")
    assert (reveal.sender, reveal.kind, reveal.nbytes) == ("client0", "aggregate", 9 * 8)
    assert fed.cost()["by_link"]["client0->server"] > 9 * 8  # its ciphertexts, the parameters, the sum
    (aggregate,) = fed.transcript.view(client_name(0), name="update:aggregate")
    assert aggregate.sender == SERVER and aggregate.blobs and aggregate.tensors is None
    (context,) = fed.transcript.view(SERVER, name="update:context")
    assert context.nbytes == 0 and context.blobs[0][:2] == b"\x5e\xa1"  # a SEAL serialization it holds


def test_the_server_view_holds_the_bytes_it_received():
    fed = Federation(2, protocols.get_protocol("crypten"))
    fed.aggregate(0, "update", uploads(K=2))
    for m in fed.transcript.view(SERVER):
        if m.kind == "share":
            assert m.tensors is None and sum(map(len, m.blobs)) == m.nbytes


def test_sums_revealed_to_clients_only_never_reach_the_server_crypten():
    """O-pFGL's server_efficient variant: the server holds only its own summed share of each sum."""
    fed = Federation(3, protocols.get_protocol("crypten"), Transcript("all"))
    fed.aggregate(0, "stats", uploads(), reveal_to="clients")
    assert fed.transcript.view(SERVER, name="stats:sum") == []
    assert fed.transcript.view(SERVER, name="stats:reveal") == []
    assert all(fed.transcript.view(client_name(k), name="stats:sum") for k in range(3))
    # What the server holds (its input shares) adds up to a uniform ring element, not the encoded sum.
    held = sum(np.frombuffer(m.blobs[0], dtype="<i8").astype(np.int64) for m in fed.transcript.view(SERVER, "stats"))
    exact = flatten({"n": torch.tensor(6.0), "w": torch.full((4, 2), 6.0)})[0]
    assert not np.array_equal(held, encode(exact, 16).numpy())
