"""Atomic file writes: a crash or Ctrl-C mid-write never leaves a torn config, summary or checkpoint."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from lit_fl.faultpoints import fault_point


def _atomic(path: Path, write: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        fault_point(f"write:{path.name}")  # tests: kill -9 inside the write of this file
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the mode a plain open() would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename."""
    _atomic(Path(path), lambda handle: handle.write(text.encode()))


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` through a temporary file and an atomic rename."""
    import torch  # the other writers here serve the command line, which never imports torch

    _atomic(Path(path), lambda handle: torch.save(obj, handle))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def strict_json(value: Any) -> str:
    """``value`` as strict JSON that any parser reads: NaN and infinities become ``null``."""
    return json.dumps(_finite(value), indent=2, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
