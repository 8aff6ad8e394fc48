"""The checkpoint's packed model states: the same numbers, and the previous format still loads."""

from __future__ import annotations

from pathlib import Path

import torch
from federations import same_weights, snapshot, tiny_federation

from lit_fl.algorithms import DFML
from lit_fl.federation.checkpoint import load_checkpoint, pack_state, save_checkpoint, unpack_state
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.io import atomic_torch_save


def test_pack_and_unpack_give_back_every_tensor_bit_for_bit() -> None:
    state = {
        "conv": torch.randn(4, 3, 5, 5).contiguous(memory_format=torch.channels_last),
        "count": torch.tensor(7, dtype=torch.int64),
        "half": torch.randn(3, dtype=torch.bfloat16),
        "bias": torch.randn(4),
        "empty": torch.zeros(0),
    }
    packed = pack_state(state)
    assert sorted(packed["flat"]) == ["torch.bfloat16", "torch.float32", "torch.int64"]
    out = unpack_state(packed)
    assert list(out) == list(state)
    for key in state:
        assert out[key].dtype == state[key].dtype and torch.equal(out[key], state[key]), key


def test_a_format_1_checkpoint_still_resumes(tmp_path: Path) -> None:
    fed = tiny_federation(num_clients=3, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1)
    algo.setup(fed)
    with torch.no_grad():
        for c in fed.clients:
            next(c.model.parameters()).add_(float(c.id))
    saved = snapshot(fed)
    old = {"format_version": 1, "federation": fed.state_dict(), "algorithm": algo.state_dict(),
           "algorithm_name": "DFML", "ledger": CommunicationLedger().state_dict(), "extra": {}}
    atomic_torch_save(old, tmp_path / "old.ckpt")
    fresh = tiny_federation(num_clients=3, pool=("cnn_4",))
    load_checkpoint(tmp_path / "old.ckpt", fresh, DFML(mutual_epochs=1), CommunicationLedger())
    assert all(same_weights(c.model.state_dict(), s) for c, s in zip(fresh.clients, saved))

    save_checkpoint(tmp_path / "new.ckpt", fed, algo, CommunicationLedger())  # and the packed format round-trips
    again = tiny_federation(num_clients=3, pool=("cnn_4",))
    load_checkpoint(tmp_path / "new.ckpt", again, DFML(mutual_epochs=1), CommunicationLedger())
    assert all(same_weights(c.model.state_dict(), s) for c, s in zip(again.clients, saved))
