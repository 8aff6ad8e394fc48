"""What the files lit-fl reads must hold, declared once per kind of file (:class:`FileSchema`: a dataset's files under
``data.root``, a run directory's ``metrics.csv``, ``summary.json`` and ``config.yaml``, a checkpoint, a YAML file),
and the one check that refuses a file that does not: one :class:`~lit_fl.errors.ConfigError` line naming the config
key the path came from, the path, what is wrong and what the schema expects.

A loader or reader declares its schema as data (the layout in words, the names a table, archive or client must
have, the dtype and shape of each array: :class:`Array`) and calls the schema's checks, never a hand-written
``raise``: :meth:`FileSchema.names` (every needed name is there), :meth:`FileSchema.arrays` (the arrays exist and
have their dtype, trailing shape, label range and one length), :meth:`FileSchema.reading` (the reader's own
exceptions, a file that cannot be decoded, become the file's one line), :meth:`FileSchema.read_text`,
:meth:`FileSchema.mapping` and :meth:`FileSchema.require` (any other rule of the schema, with what broke it).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from lit_fl.errors import ConfigError

#: the largest text file (YAML, JSON, CSV) lit-fl reads: a config, sweep, manifest or metrics file is far smaller
MAX_TEXT_BYTES = 64 * 1024 * 1024

@dataclass(frozen=True)
class Array:
    """What one array of a file must be: its ``dtype`` (None: any), its shape after the sample axis (``trailing``;
    None: any shape, a None entry: any size on that axis) and, for labels, values in ``0..classes - 1``, or for
    names, values among ``values`` (strings; byte strings are compared decoded)."""

    dtype: str | None = None
    trailing: tuple[int | None, ...] | None = None
    classes: int | None = None
    values: tuple[str, ...] | None = None

    def describe(self) -> str:
        dims = ", ".join("*" if d is None else str(d) for d in self.trailing or ())
        shape = f"(N{', ' if dims else ''}{dims})" if self.trailing is not None else ""
        labels = f"labels in 0..{self.classes - 1}" if self.classes is not None else ""
        names = f"values {' or '.join(self.values)}" if self.values is not None else ""
        return " ".join(part for part in (self.dtype or "", shape, labels, names) if part) or "an array"

    def problem(self, value: Any) -> str | None:
        """What ``value`` breaks of this declaration (None: nothing)."""
        import numpy as np

        array = np.asarray(value)
        trailing = tuple(array.shape[1:])
        if self.dtype is not None and array.dtype != np.dtype(self.dtype):
            return f"is {array.dtype} {tuple(array.shape)}"
        if self.trailing is not None and (len(trailing) != len(self.trailing) or any(
                want is not None and got != want for got, want in zip(trailing, self.trailing))):
            return f"has shape (N, {', '.join(map(str, trailing))})" if trailing else f"has shape {array.shape}"
        if self.classes is not None and array.size and (array.min() < 0 or array.max() >= self.classes):
            return f"has labels outside 0..{self.classes - 1}"
        if self.values is not None:
            found = {v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in array.reshape(-1)}
            if found - set(self.values):
                return f"has the value {sorted(found - set(self.values))[0]!r}"
        return None


@dataclass(frozen=True)
class FileSchema:
    """What one kind of file (or folder) must hold: ``expected`` says it in words (the layout of a dataset under
    ``data.root``); ``key`` is the config key or flag its path came from (``data.root``, ``--resume``; empty for
    none); ``written``: lit-fl writes the file itself, so one that breaks the schema is ``damaged`` and ``remedy``
    says what to do."""

    expected: str
    key: str = ""
    written: bool = False
    remedy: str = ""

    def refuse(self, path: str | Path, problem: str) -> NoReturn:
        """The one line of a file that breaks the schema: ``key: path: [damaged: ]problem; expected ...``."""
        key = f"{self.key}: " if self.key else ""
        damaged = "damaged: " if self.written else ""
        expected = f"; expected {self.expected}" if self.expected else ""
        remedy = f"; {self.remedy}" if self.remedy else ""
        raise ConfigError(f"{key}{path}: {damaged}{problem}{expected}{remedy}")

    def require(self, path: str | Path, holds: bool, problem: str) -> None:
        """A rule of the schema: refuse ``path`` with ``problem`` unless it ``holds``."""
        if not holds:
            self.refuse(path, problem)

    def names(self, path: str | Path, what: str, needed: Iterable[str], present: Iterable[str],
              where: str = "") -> None:
        """Every ``needed`` name (a table's columns, an archive's keys, a client's features, a header's columns) is
        among ``present``; ``what`` names them in the message (``column``, ``feature``), ``where`` the part of the
        file (``client 'f0000_14': ``)."""
        have = list(present)
        missing = [name for name in needed if name not in have]
        listed = ", ".join(map(str, sorted(have))) or "none"
        self.require(path, not missing, f"{where}no {what} {', '.join(missing)} (it has {listed})")

    def arrays(self, path: str | Path, arrays: Mapping[str, Any], declared: Mapping[str, Array], what: str = "array",
               where: str = "", same_length: bool = False) -> None:
        """The ``declared`` arrays are among ``arrays`` (a client's features, an ``.npz``'s keys), each as declared,
        all of one length when ``same_length``; ``what`` and ``where`` as for :meth:`names`."""
        self.names(path, what, declared, arrays, where)
        for name, array in declared.items():
            problem = array.problem(arrays[name])
            self.require(path, problem is None, f"{where}{name} {problem} (expected {array.describe()})")
        lengths = {name: len(arrays[name]) for name in declared}
        self.require(path, not same_length or len(set(lengths.values())) <= 1,
                     f"{where}the arrays differ in length ({', '.join(f'{k}: {v}' for k, v in lengths.items())})")

    def mapping(self, path: str | Path, value: Any) -> dict[str, Any]:
        """``value`` (the file's parsed content) is a mapping."""
        self.require(path, isinstance(value, dict), f"holds a {type(value).__name__}, not a mapping")
        return value

    @contextmanager
    def reading(self, path: str | Path, errors: tuple[type[BaseException], ...],
                what: str | Callable[[], str] = "cannot be read") -> Iterator[None]:
        """The block reads or decodes ``path``: any of ``errors`` it raises (the reader's own: a truncated archive,
        a damaged database, an image PIL cannot decode) is the file's one line, ``what (Type: reason)`` (``what``
        may be a function, asked when it fails: the line a parser was at). A :class:`ConfigError` of a check
        inside passes as it is."""
        try:
            yield
        except ConfigError:
            raise
        except errors as err:
            reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
            said = what() if callable(what) else what
            self.refuse(path, f"{said} ({type(err).__name__}{': ' if reason else ''}{reason})")

    @contextmanager
    def opening(self, path: str | Path, errors: tuple[type[BaseException], ...],
                what: str | Callable[[], str] = "cannot be read") -> Iterator[None]:
        """:meth:`reading` of a file the block opens with its own reader (PIL, NumPy, SQLite): checked to be a
        regular file first (:meth:`regular`, no size limit: a dataset file may be large), so a FIFO never blocks the
        reader and a device is never read to its end. A missing file is the reader's own error, one line."""
        try:
            self.regular(path, limit=None)
        except FileNotFoundError:
            pass
        with self.reading(path, errors, what):
            yield

    def read_text(self, path: str | Path, name: str | None = None, may_be_absent: bool = False) -> str:
        """The file's text (:meth:`read_bytes`); a file that is not UTF-8 is the file's one line."""
        data = self.read_bytes(path, name, may_be_absent)
        with self.reading(name or path, (UnicodeDecodeError,), "not a text file"):
            return data.decode()

    def read_bytes(self, path: str | Path, name: str | None = None, may_be_absent: bool = False) -> bytes:
        """The file's bytes; a file that cannot be read is the file's one line, naming it ``name`` (default: its
        path); ``may_be_absent``: a missing file raises :class:`FileNotFoundError` for the caller. Only a regular
        file of at most :data:`MAX_TEXT_BYTES` is read (:meth:`regular`), or the pipe of a process substitution
        (``--config <(cat tiny.yaml)``: ``/dev/fd/N``), read once and bounded the same way."""
        try:
            size = self.regular(path, name, pipe_ok=True)
            with open(path, "rb") as handle:  # a regular file or an anonymous pipe: opening never blocks
                data = handle.read(MAX_TEXT_BYTES + 1)
        except FileNotFoundError:
            if may_be_absent:
                raise
            self.refuse(name or path, "cannot be read (No such file or directory)")
        except OSError as err:
            self.refuse(name or path, f"cannot be read ({err.strerror or err})")
        self.require(name or path, len(data) <= MAX_TEXT_BYTES, _too_large(max(size, len(data))))
        return data

    def regular(self, path: str | Path, name: str | None = None, pipe_ok: bool = False,
                limit: int | None = MAX_TEXT_BYTES) -> int:
        """The size of ``path``, checked with ``os.stat`` before anything opens it: a FIFO (which would block the
        open), a device (``/dev/zero``: endless), a directory or a socket is the file's one line, and so is a file
        above ``limit`` bytes. ``pipe_ok``: the anonymous pipe of a process substitution passes (size 0). A missing
        file raises :class:`FileNotFoundError` for the caller."""
        try:
            info = os.stat(path)
        except FileNotFoundError:
            raise
        except OSError as err:  # a symlink loop (ELOOP), a path through a file (ENOTDIR), no permission
            self.refuse(name or path, f"cannot be read ({err.strerror or err})")
        mode = info.st_mode
        if stat.S_ISREG(mode):
            self.require(name or path, limit is None or info.st_size <= limit, _too_large(info.st_size, limit))
            return info.st_size
        if pipe_ok and stat.S_ISFIFO(mode) and _anonymous_pipe(path):
            return 0
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "not a file")
        self.refuse(name or path, f"is {kind}, not a regular file; lit-fl reads only regular files")


def _too_large(size: int, limit: int | None = MAX_TEXT_BYTES) -> str:
    return f"is {size / 2**20:.1f} MiB, larger than the limit of {(limit or 0) // 2**20} MiB for a file lit-fl reads"


def _anonymous_pipe(path: str | Path) -> bool:
    """``path`` is ``/dev/fd/N`` of an anonymous pipe, as bash's ``<(...)`` passes (or ``/dev/stdin`` of ``cat x |``;
    links followed to ``/proc/self/fd/N``, which names its pipe ``pipe:[inode]``): opening it never blocks (a named
    FIFO's open waits for a writer)."""
    link = str(path)
    for _ in range(8):
        try:
            target = os.readlink(link)
        except OSError:
            return False
        if target.startswith("pipe:"):
            return True
        link = os.path.join(os.path.dirname(link), target)
    return False
