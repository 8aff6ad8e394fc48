"""Reader of the federated SQLite files of TFF/FedJAX (``federated_emnist_train.sqlite``,
``stackoverflow_test.sqlite``, ...), with sqlite3, zlib and msgpack only (no TensorFlow, no JAX).

The format (FedJAX ``fedjax/core/sqlite_federated_data.py`` and ``fedjax/core/serialization.py``)::

    CREATE TABLE federated_data (client_id BLOB NOT NULL PRIMARY KEY, data BLOB NOT NULL,
                                 num_examples INTEGER NOT NULL)

One row per client, in ``rowid`` order; ``data`` is ``zlib.compress(msgpack.packb({feature: array}))`` where every
array is a msgpack extension type: code 1 (a numeric ndarray) holds ``msgpack.packb((shape, dtype name, C-order
bytes))``, code 4 (an ndarray of byte strings) ``msgpack.packb((shape, [bytes, ...]))``, code 3 a numpy scalar
encoded like code 1. Every file error is one line naming the file and what was expected
(:class:`~lit_fl.errors.ConfigError`).
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

from lit_fl.errors import ConfigError

#: msgpack extension codes of FedJAX's serialization (``_MsgpackExtType``)
NDARRAY, NATIVE_COMPLEX, NPSCALAR, BYTES_NDARRAY = 1, 2, 3, 4
EXPECTED = "a TFF/FedJAX federated SQLite file (table federated_data(client_id, data, num_examples))"

Examples = dict[str, np.ndarray]


@dataclass(frozen=True)
class ClientRow:
    """One row of ``federated_data`` without its data: the client's id (decoded as UTF-8), its example count and
    its id as stored (the key to read its data)."""

    client_id: str
    num_examples: int
    key: bytes | str


def _ndarray(data: bytes) -> np.ndarray:
    shape, dtype_name, buffer = msgpack.unpackb(data, raw=True)
    return np.frombuffer(buffer, dtype=np.dtype(dtype_name.decode())).reshape(shape, order="C")


def _bytes_ndarray(data: bytes) -> np.ndarray:
    shape, flat = msgpack.unpackb(data, raw=True)
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(shape)


def _ext_hook(code: int, data: bytes) -> object:
    if code == NDARRAY:
        return _ndarray(data)
    if code == NPSCALAR:
        return _ndarray(data)[()]
    if code == BYTES_NDARRAY:
        return _bytes_ndarray(data)
    if code == NATIVE_COMPLEX:
        real, imag = msgpack.unpackb(data)
        return complex(real, imag)
    raise ValueError(f"unknown msgpack extension type {code}")


def decode_examples(blob: bytes) -> Examples:
    """A client's ``data`` blob as ``{feature: ndarray}`` (raises ``ValueError``/``zlib.error`` when damaged)."""
    examples = msgpack.unpackb(zlib.decompress(blob), ext_hook=_ext_hook, raw=False)
    if not isinstance(examples, dict):
        raise ValueError(f"data is a {type(examples).__name__}, not a map of feature name to array")
    return examples


class FederatedSQLite:
    """One federated SQLite file, opened read-only; clients are read in the file's ``rowid`` order."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ConfigError(f"{self.path}: no such file; expected {EXPECTED}")
        try:
            self._connection = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            columns = {row[1] for row in self._connection.execute("PRAGMA table_info(federated_data)")}
        except sqlite3.DatabaseError as err:
            raise ConfigError(f"{self.path}: not a SQLite database ({err}); expected {EXPECTED}") from None
        missing = {"client_id", "data", "num_examples"} - columns
        if missing:
            raise ConfigError(f"{self.path}: no table federated_data with columns {', '.join(sorted(missing))}; "
                              f"expected {EXPECTED}")

    def rows(self) -> list[ClientRow]:
        """Every client's id and example count, in file order."""
        query = "SELECT client_id, num_examples FROM federated_data ORDER BY rowid"
        return [ClientRow(_client_id(cid), int(n), cid) for cid, n in self._query(query)]

    def clients(self, rows: Sequence[ClientRow] | None = None) -> Iterator[tuple[str, Examples]]:
        """``(client id, examples)`` of every client in file order (``rows=None``, one pass over the table) or of
        ``rows`` in their order (one indexed look-up each: a few clients of a large file)."""
        if rows is None:
            pairs: Iterator[tuple] = self._query("SELECT client_id, data FROM federated_data ORDER BY rowid")
        else:
            pairs = ((row.key, blob) for row in rows
                     for (blob,) in self._query("SELECT data FROM federated_data WHERE client_id = ?", (row.key,)))
        for cid, blob in pairs:
            name = _client_id(cid)
            try:
                yield name, decode_examples(blob)
            except (ValueError, TypeError, zlib.error, msgpack.UnpackException) as err:
                raise ConfigError(f"{self.path}: client {name!r} has damaged data ({err}); expected zlib-compressed "
                                  "msgpack of feature name -> array (FedJAX serialization)") from None

    def _query(self, query: str, args: tuple = ()) -> Iterator[tuple]:
        try:
            cursor = self._connection.execute(query, args)
            while rows := cursor.fetchmany(64):  # the rows in hand before yielding: a reader stopped early leaves
                yield from rows                   # no cursor to resume on a closed connection
        except sqlite3.DatabaseError as err:
            raise ConfigError(f"{self.path}: damaged SQLite file ({err}); expected {EXPECTED}") from None

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> FederatedSQLite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _client_id(value: bytes | str) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def require_features(path: Path, client: str, examples: Examples, names: Sequence[str]) -> None:
    """Refuse, in one line naming the file, a client whose examples lack a feature the dataset needs."""
    missing = [n for n in names if n not in examples]
    if missing:
        raise ConfigError(f"{path}: client {client!r} has no feature {', '.join(missing)} (it has "
                          f"{', '.join(sorted(examples)) or 'none'}); expected the features {', '.join(names)}")
