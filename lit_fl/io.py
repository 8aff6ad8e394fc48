"""Atomic file writes: a crash or Ctrl-C mid-write never leaves a torn config, summary or checkpoint."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from lit_fl.faultpoints import fault_point


class _Writes:
    """A file handle that keeps the :class:`OSError` of a failed write: ``torch.save`` turns it into a
    ``RuntimeError`` (``unexpected pos``) that no longer says the disk is full."""

    def __init__(self, handle: Any) -> None:
        self.handle, self.error = handle, None

    def write(self, data: Any) -> int:
        try:
            return self.handle.write(data)
        except OSError as err:
            self.error = err
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)


def _atomic(path: Path, write: Any) -> None:
    """Write through a temporary file beside ``path`` and an atomic rename; a failed write leaves ``path`` as it
    was, and a failed write of the disk (full, over quota) is an :class:`OSError` naming ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    writes = None
    try:
        with os.fdopen(fd, "wb") as handle:
            writes = _Writes(handle)
            write(writes)
            handle.flush()
            os.fsync(handle.fileno())
        fault_point(f"write:{path.name}")  # tests: kill -9 inside the write of this file
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the mode a plain open() would
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        cause = writes.error if writes is not None and writes.error is not None else err
        if isinstance(cause, OSError) and cause.errno is not None and cause.filename is None:
            kept = f" (the previous {path.name} is kept)" if path.exists() else ""
            raise OSError(cause.errno, f"{os.strerror(cause.errno)}{kept}", str(path)) from err
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
