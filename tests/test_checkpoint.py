"""The checkpoint's packed model states: the same numbers, and the previous formats still load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from federations import same_weights, snapshot, tiny_federation

from lit_fl.algorithms import DFML
from lit_fl.federation.checkpoint import Arena, load_checkpoint, read_checkpoint, save_checkpoint
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.io import atomic_torch_save


def _states() -> list[dict[str, torch.Tensor]]:
    return [
        {
            "conv": torch.randn(4, 3, 5, 5).contiguous(memory_format=torch.channels_last),
            "count": torch.tensor(7 + i, dtype=torch.int64),
            "half": torch.randn(3, dtype=torch.bfloat16),
            "bias": torch.randn(4),
            "empty": torch.zeros(0),
        }
        for i in range(3)
    ] + [{"other": torch.randn(2, 2)}]


def test_arena_packs_every_state_into_one_tensor_per_dtype_and_gives_them_back_bit_for_bit() -> None:
    states = _states()
    arena = Arena()
    packed = [arena.pack(state) for state in states]
    tensors = arena.tensors()
    assert sorted(tensors) == ["torch.bfloat16", "torch.float32", "torch.int64"]
    assert tensors["torch.float32"].numel() == sum(t.numel() for s in states for t in s.values()
                                                   if t.dtype == torch.float32)
    assert packed[0]["layout"] is packed[2]["layout"]  # one layout per architecture, pickled once
    reader = Arena(tensors)
    for state, entry in zip(states, packed):
        out = reader.unpack(entry)
        assert list(out) == list(state)
        for key in state:
            assert out[key].dtype == state[key].dtype and torch.equal(out[key], state[key]), key


def _format_2(state: dict[str, torch.Tensor]) -> dict:
    """A model state as format 2 wrote it: one flat tensor per dtype and state."""
    dtypes = [t.dtype for t in state.values()]
    flat = {str(d): torch.cat([t.reshape(-1) for t in state.values() if t.dtype == d]) for d in dict.fromkeys(dtypes)}
    return {"packed": True, "names": list(state), "shapes": [tuple(t.shape) for t in state.values()],
            "dtypes": [str(d) for d in dtypes], "flat": flat}


def test_a_checkpoint_holds_one_tensor_record_per_dtype_whatever_the_clients(tmp_path: Path) -> None:
    fed = tiny_federation(num_clients=5, pool=("cnn_4", "cnn_4_8"))
    algo = DFML(mutual_epochs=1)
    algo.setup(fed)
    save_checkpoint(tmp_path / "c.ckpt", fed, algo, CommunicationLedger())
    state = read_checkpoint(tmp_path / "c.ckpt")
    assert state["format_version"] == 3
    models = state["federation"]["clients"]
    assert all(not any(isinstance(v, torch.Tensor) for v in c["model"].values()) for c in models)
    assert list(state["arena"]) == ["torch.float32"]
    expected = sum(p.numel() for c in fed.clients for p in c.model.state_dict().values())
    assert state["arena"]["torch.float32"].numel() == expected  # DFML's peaks share their regular model


@pytest.mark.parametrize("version", [1, 2])
def test_an_older_format_still_resumes(tmp_path: Path, version: int) -> None:
    fed = tiny_federation(num_clients=3, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1)
    algo.setup(fed)
    with torch.no_grad():
        for c in fed.clients:
            next(c.model.parameters()).add_(float(c.id))
    saved = snapshot(fed)
    federation = fed.state_dict()
    if version == 2:
        for client in federation["clients"]:
            client["model"] = _format_2(client["model"])
            client["peak"] = None if client["peak"] is None else _format_2(client["peak"])
    old = {"format_version": version, "federation": federation, "algorithm": algo.state_dict(),
           "algorithm_name": "DFML", "ledger": CommunicationLedger().state_dict(), "extra": {}}
    atomic_torch_save(old, tmp_path / "old.ckpt")
    fresh = tiny_federation(num_clients=3, pool=("cnn_4",))
    load_checkpoint(tmp_path / "old.ckpt", fresh, DFML(mutual_epochs=1), CommunicationLedger())
    assert all(same_weights(c.model.state_dict(), s) for c, s in zip(fresh.clients, saved))

    save_checkpoint(tmp_path / "new.ckpt", fed, algo, CommunicationLedger())  # and the packed format round-trips
    again = tiny_federation(num_clients=3, pool=("cnn_4",))
    load_checkpoint(tmp_path / "new.ckpt", again, DFML(mutual_epochs=1), CommunicationLedger())
    assert all(same_weights(c.model.state_dict(), s) for c, s in zip(again.clients, saved))
