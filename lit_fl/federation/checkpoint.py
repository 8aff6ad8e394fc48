"""``last.ckpt``: the whole federation state, so that a resumed run equals an uninterrupted one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from lit_fl.errors import ConfigError
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.io import atomic_torch_save

FORMAT_VERSION = 1


def save_checkpoint(
    path: str | Path,
    federation: Federation,
    algorithm: Any,
    ledger: CommunicationLedger,
    extra: dict[str, Any] | None = None,
) -> None:
    """Models, peaks, alpha_n, RNG streams, algorithm state and ledger after ``federation.round``; atomic."""
    state = {
        "format_version": FORMAT_VERSION,
        "federation": federation.state_dict(),
        "algorithm": algorithm.state_dict(),
        "algorithm_name": type(algorithm).__name__,
        "ledger": ledger.state_dict(),
        "extra": extra or {},
    }
    atomic_torch_save(state, path)


def read_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The checkpoint's contents, read with ``weights_only=True``: tensors and plain Python values only, so a
    checkpoint can never run code on load. A truncated, corrupt or foreign file is one :class:`ConfigError`
    line naming it."""
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises many types for a bad file; all mean "not ours"
        reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise ConfigError(f"--resume: {path} is not a readable lit-fl checkpoint (truncated, corrupt or foreign: "
                          f"{reason})") from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise ConfigError(f"--resume: {path} is not a lit-fl checkpoint (no format_version)")
    return state


def load_checkpoint(
    path: str | Path, federation: Federation, algorithm: Any, ledger: CommunicationLedger
) -> dict[str, Any]:
    """Restore what :func:`save_checkpoint` wrote into freshly built objects; returns ``extra``."""
    state = read_checkpoint(path, federation.data.train_x.device)
    if state.get("format_version") != FORMAT_VERSION:
        raise ConfigError(f"{path}: unsupported checkpoint format {state.get('format_version')}")
    if state["algorithm_name"] != type(algorithm).__name__:
        raise ConfigError(
            f"{path} was written by {state['algorithm_name']}, the config asks for {type(algorithm).__name__}"
        )
    federation.load_state_dict(state["federation"])
    algorithm.load_state_dict(state["algorithm"])
    ledger.load_state_dict(state["ledger"])
    return state["extra"]
