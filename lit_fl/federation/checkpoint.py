"""``last.ckpt``: the whole federation state, so that a resumed run equals an uninterrupted one.

Every model state (clients' models, peaks, extras, server models) is stored in one :class:`Arena`: all their
tensors concatenated into one flat tensor per dtype, and per state its layout (names, shapes, dtypes; one shared
object per architecture) and its offsets. The serializer's cost is per tensor record, not per byte: 1,000
client models write one record instead of a thousand (format 2, one flat tensor per model and dtype, and
format 1, plain state dicts, still load).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from lit_fl.errors import ConfigError
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.file_schema import FileSchema
from lit_fl.io import atomic_torch_save
from lit_fl.run_identity import RunIdentity

FORMAT_VERSION = 3  # 3: one arena for every model state; 2: one flat tensor per state and dtype; 1: state dicts
READABLE_VERSIONS = (1, 2, 3)
#: what ``--resume`` reads: torch's file of a dict of tensors and plain values whose ``format_version`` is readable
CHECKPOINT = FileSchema(f"a lit-fl checkpoint (format_version {', '.join(map(str, READABLE_VERSIONS))})",
                        key="--resume")

PackedState = dict[str, Any]


class Arena:
    """Packs state dicts into one flat tensor per dtype (:meth:`pack`, then :meth:`tensors`) and cuts them back
    (:meth:`unpack`, views into those tensors)."""

    def __init__(self, tensors: dict[str, torch.Tensor] | None = None) -> None:
        self._tensors = tensors
        self._parts: dict[str, list[torch.Tensor]] = defaultdict(list)
        self._sizes: dict[str, int] = defaultdict(int)
        self._layouts: dict[tuple, dict[str, list]] = {}

    def pack(self, state: dict[str, torch.Tensor]) -> PackedState:
        """``state`` as its layout and the offset of its first tensor of each dtype (its tensors of one dtype
        are consecutive in the arena, in ``state`` order)."""
        tensors = list(state.values())
        key = (tuple(state), *[(t.dtype, t.shape) for t in tensors])
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = {"names": list(state), "shapes": [tuple(t.shape) for t in tensors],
                                           "dtypes": [str(t.dtype) for t in tensors]}
        offsets: dict[str, int] = {}
        sizes, parts = self._sizes, self._parts
        for tensor, dtype in zip(tensors, layout["dtypes"]):
            if dtype not in offsets:
                offsets[dtype] = sizes[dtype]
            parts[dtype].append(tensor.reshape(-1))
            sizes[dtype] += tensor.numel()
        return {"layout": layout, "offsets": offsets}

    @torch.no_grad()
    def tensors(self) -> dict[str, torch.Tensor]:
        """The arena: every packed tensor of a dtype, concatenated."""
        return {dtype: torch.cat(parts) for dtype, parts in self._parts.items()}

    def unpack(self, packed: PackedState) -> dict[str, torch.Tensor]:
        """The state dict :meth:`pack` packed, as views into the arena this one was built with."""
        if self._tensors is None:
            raise RuntimeError("Arena.unpack needs the arena's tensors")
        return _cut(packed["layout"], self._tensors, dict(packed["offsets"]))


def unpack_state(packed: PackedState) -> dict[str, torch.Tensor]:
    """A format-2 model state (``{"packed": True, names, shapes, dtypes, flat}``) as its state dict."""
    layout = {key: packed[key] for key in ("names", "shapes", "dtypes")}
    return _cut(layout, packed["flat"], dict.fromkeys(packed["flat"], 0))


def _cut(layout: dict[str, list], flat: dict[str, torch.Tensor], offsets: dict[str, int]) -> dict[str, torch.Tensor]:
    state = {}
    for name, shape, dtype in zip(layout["names"], layout["shapes"], layout["dtypes"]):
        numel = math.prod(shape)
        state[name] = flat[dtype][offsets[dtype] : offsets[dtype] + numel].view(shape)
        offsets[dtype] += numel
    return state


def _map_models(federation_state: dict[str, Any], fn: Any) -> dict[str, Any]:
    """``federation_state`` with ``fn`` applied to every model state (clients' models, peaks, extras; server)."""
    def client(c: dict[str, Any]) -> dict[str, Any]:
        return {
            **c,
            "model": fn(c["model"]),
            "peak": None if c["peak"] is None else fn(c["peak"]),
            "extras": {name: fn(s) for name, s in c["extras"].items()},
        }

    return {
        **federation_state,
        "server": {name: fn(s) for name, s in federation_state["server"].items()},
        "clients": [client(c) for c in federation_state["clients"]],
    }


def save_checkpoint(
    path: str | Path,
    federation: Federation,
    algorithm: Any,
    ledger: CommunicationLedger,
    extra: dict[str, Any] | None = None,
) -> None:
    """Models, peaks, alpha_n, RNG streams, algorithm state and ledger after ``federation.round``; atomic."""
    arena = Arena()
    packed = _map_models(federation.state_dict(), arena.pack)
    state = {
        "format_version": FORMAT_VERSION,
        "federation": packed,
        "arena": arena.tensors(),
        "algorithm": algorithm.state_dict(),
        "algorithm_name": type(algorithm).__name__,
        "ledger": ledger.state_dict(),
        "extra": extra or {},
    }
    atomic_torch_save(state, path)


def read_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The checkpoint's contents, read with ``weights_only=True``: tensors and plain Python values only, so a
    checkpoint can never run code on load. A truncated, corrupt or foreign file is one :class:`ConfigError`
    line naming it (:data:`CHECKPOINT`)."""
    # torch raises many types for a bad file; all mean "not ours"
    with CHECKPOINT.reading(path, (Exception,), "cannot be read (truncated, corrupt or foreign)"):
        CHECKPOINT.regular(path, limit=None)  # a FIFO or a device is one line, never opened
        state = torch.load(path, map_location=device, weights_only=True)
    CHECKPOINT.require(path, isinstance(state, dict) and "format_version" in state, "no format_version")
    return state


def read_unpacked(path: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """The checkpoint (:func:`read_checkpoint`) with every model state as its state dict, whatever its format."""
    state = read_checkpoint(path, device)
    version = state["format_version"]
    CHECKPOINT.require(path, version in READABLE_VERSIONS, f"unsupported checkpoint format {version}")
    if version == 3:
        state["federation"] = _map_models(state["federation"], Arena(state.pop("arena")).unpack)
    elif version == 2:
        state["federation"] = _map_models(state["federation"], unpack_state)
    return state


def load_checkpoint(
    path: str | Path,
    federation: Federation,
    algorithm: Any,
    ledger: CommunicationLedger,
    identity: RunIdentity | None = None,
) -> dict[str, Any]:
    """Restore what :func:`save_checkpoint` wrote into freshly built objects; returns ``extra``. With ``identity``
    (the run's, from its config), a checkpoint written by another run is refused before anything is restored."""
    state = read_unpacked(path, federation.data.train_x.device)
    if identity is not None:
        check_identity(path, state["extra"].get("identity"), identity)
    if state["algorithm_name"] != type(algorithm).__name__:
        raise ConfigError(
            f"{path} was written by {state['algorithm_name']}, the config asks for {type(algorithm).__name__}"
        )
    federation.load_state_dict(state["federation"])
    algorithm.load_state_dict(state["algorithm"])
    ledger.load_state_dict(state["ledger"])
    return state["extra"]


def check_identity(path: str | Path, stored: Any, identity: RunIdentity) -> None:
    """A checkpoint's stored identity must be ``identity`` (a checkpoint from before identities passes)."""
    theirs = RunIdentity.from_dict(stored)
    if theirs is not None and theirs != identity:
        raise ConfigError(f"--resume: {path} belongs to another run ({theirs.describe()}), not to this run directory's "
                          f"config.yaml ({identity.describe()}); put back this run's checkpoint or start a new run")
