"""The run record's privacy.trust block says who must not collude, whether the server is trusted
for DP, and where the noise came from (issue #15)."""
from __future__ import annotations

import protocols
from privfgl.data import contextual_sbm
from privfgl.experiment import RunConfig, run
from privfgl.privacy.trust import trust_block


def test_he_names_the_key_holder_and_the_symmetric_presets_name_every_client():
    ckks = trust_block(protocols.get_protocol("ckks"), None)
    assert ckks["non_collusion"] == ["the server and the key holder (client0)"] and ckks["reveal"] == "grid"
    assert "every client holds the secret key" in trust_block(protocols.get_protocol("bfv", preset="sum"),
                                                              None)["non_collusion"][-1]


def test_the_raw_reveal_is_marked_as_giving_everything_away():
    block = trust_block(protocols.get_protocol("ckks", reveal="raw-unsafe"), None)
    assert block["assumption"].startswith("NONE") and "secret key" in block["assumption"]


def test_central_dp_under_plain_says_the_server_is_trusted_and_sees_raw_uploads():
    dp = {"mode": "central", "noise_source": "os"}
    block = trust_block(protocols.get_protocol("plain"), dp)["dp"]
    assert block["trusted_server"] is True and "every raw upload" in block["why"] and "warning" not in block
    secure = trust_block(protocols.get_protocol("crypten"), {"mode": "distributed", "noise_source": "os"})["dp"]
    assert secure["trusted_server"] is False


def test_seeded_noise_carries_a_warning():
    block = trust_block(protocols.get_protocol("plain"), {"mode": "local", "noise_source": "seeded", "seed": 3})["dp"]
    assert "regenerate" in block["warning"]


def test_every_run_record_carries_the_block():
    graph = contextual_sbm(num_nodes=200, num_classes=3, num_features=8, homophily=0.8, seed=0)
    cfg = RunConfig(method="dp-fedavg", dataset="sbm", partition="louvain", clients=3, rounds=1, local_epochs=1,
                    hidden=8, dp="gaussian:sigma=1,clip=1,on=update,mode=central,seed=5", progress=False)
    record, _ = run(cfg, data=graph)
    trust = record["privacy"]["trust"]
    assert trust["protocol"] == "plain" and trust["server_sees"] == "every client's upload in the clear"
    assert trust["dp"]["trusted_server"] is True and trust["dp"]["noise_source"] == "seeded" and "warning" in trust["dp"]


def test_crypten_names_the_dealer_of_compute_and_the_unsafe_rng_gives_nothing():
    block = trust_block(protocols.get_protocol("crypten"), None)
    assert "the server must not collude with the dealer" in block["compute"]
    assert "neither a client nor the server" in block["compute"] and "256-bit" in block["assumption"]
    client0 = trust_block(protocols.get_protocol("crypten", dealer="client0"), None)["compute"]
    assert "client 0" in client0 and "must not collude with client 0" in client0
    unsafe = trust_block(protocols.get_protocol("crypten", rng="torch-32bit-unsafe"), None)
    assert unsafe["assumption"].startswith("NONE") and "32" in unsafe["assumption"]
    assert "compute" not in trust_block(protocols.get_protocol("crypten", mode="multiprocess"), None)
