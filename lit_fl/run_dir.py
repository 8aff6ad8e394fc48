"""``RunDir``: the one place that knows a run directory's layout (../shared/DESIGN.md, "Run directory contract"):
``config.yaml`` (the fully resolved config), ``metrics.csv`` (a row per evaluated round), ``summary.json`` (final and
best values, status, wall time), ``checkpoints/last.ckpt`` (the whole federation) and ``wandb/`` when W&B is on.
``fit`` writes it, ``sweep`` reads its status, ``compare`` reads its config and metrics; all through this class.
One process writes a run directory at a time: :meth:`RunDir.lock` (``.lock``, an exclusive ``flock`` that the
operating system releases when its holder exits, however it exits: a dead holder's lock is simply free)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lit_fl.errors import ConfigError
from lit_fl.file_schema import FileSchema

LOCK = ".lock"
#: the names a run writes first, before its first checkpoint (a folder holding only these started here)
FIRST_WRITES = frozenset({"config.yaml", "checkpoints", "metrics.csv", "wandb", LOCK})
#: what ``summary.json`` says of a run that ended (a run still going, or killed, has none)
STATUSES = ("completed", "interrupted", "failed")
#: the files the run writes and this class reads back (``metrics.csv``: :mod:`lit_fl.tracking.csv_metrics`)
CONFIG_YAML = FileSchema("a mapping of config keys", written=True)
SUMMARY_JSON = FileSchema(f"a JSON mapping whose status is {', '.join(STATUSES)}", written=True)


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.csv"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def checkpoint(self) -> Path:
        """The last checkpoint, which ``--resume`` continues from."""
        return self.checkpoints / "last.ckpt"

    @property
    def wandb(self) -> Path:
        return self.path / "wandb"

    @contextmanager
    def lock(self, fresh: bool) -> Iterator[None]:
        """Hold the run directory's writer lock for the block (:func:`writer_lock`). ``fresh`` (a new run, not
        ``--resume``): the folder must hold nothing else, checked under the lock, so two runs started with one name
        never write into one folder."""
        with writer_lock(self.path, "run directory"):
            if fresh and any(p.name != LOCK for p in self.path.iterdir()):
                raise ConfigError(f"run directory {self.path} exists; choose another --name or continue it with "
                                  f"--resume {self.path}")
            yield

    def has_checkpoint(self) -> bool:
        return self.checkpoint.is_file()

    def has_metrics(self) -> bool:
        return self.metrics.is_file()

    def started_here(self) -> bool:
        """A run directory killed before its first checkpoint: it holds nothing but what a run writes first (and
        the temporary file of an atomic config write)."""
        names = {p.name for p in self.path.iterdir()}
        return all(n in FIRST_WRITES or n.startswith(".config.yaml.") for n in names)

    def read_config(self) -> dict[str, Any]:
        """The stored config (empty when there is none); a damaged one is a :class:`ConfigError` naming it."""
        from lit_fl.strict_yaml import load_yaml

        if not self.config.is_file():
            return {}
        return CONFIG_YAML.mapping(self.config, load_yaml(self.config, str(self.config)) or {})

    def read_summary(self) -> dict[str, Any] | None:
        """The summary, None when there is none (the run is still running, or was killed); a damaged one (not JSON,
        not a mapping, a status that is none of :data:`STATUSES`) is a :class:`ConfigError` naming it
        (:data:`SUMMARY_JSON`)."""
        try:
            text = SUMMARY_JSON.read_text(self.summary, may_be_absent=True)
        except FileNotFoundError:
            return None
        with SUMMARY_JSON.reading(self.summary, (ValueError,), "not JSON"):
            summary = SUMMARY_JSON.mapping(self.summary, json.loads(text))
        SUMMARY_JSON.require(self.summary, summary.get("status") in STATUSES, f"status {summary.get('status')!r}")
        return summary

    def status(self) -> str | None:
        """The summary's status (one of :data:`STATUSES`), None without a summary."""
        summary = self.read_summary()
        return summary["status"] if summary is not None else None


def printable(path: str | Path) -> str:
    """``path`` as text that any terminal and UTF-8 file takes: a name that is not valid UTF-8 (bytes copied from
    another machine's file system, which Python holds as surrogates) shows its bytes as ``\\xff`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


@contextmanager
def writer_lock(folder: Path, what: str, hint: str = "choose another --name") -> Iterator[None]:
    """Hold ``folder``'s exclusive writer lock (``folder/.lock``, created with the folder if needed) for the block;
    another holder: a ConfigError naming ``what`` and the holder's PID. The lock is an ``flock``: the operating
    system releases it when the holder exits in any way, so a stale lock of a dead process is simply free."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise ConfigError(f"{what} {folder} is being written by another lit-fl process (PID {holder}); wait "
                              f"for it to end, or {hint}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the flock
