"""Reader of the federated SQLite files of TFF/FedJAX (``federated_emnist_train.sqlite``,
``stackoverflow_test.sqlite``, ...), with sqlite3, zlib and msgpack only (no TensorFlow, no JAX).

The format (FedJAX ``fedjax/core/sqlite_federated_data.py`` and ``fedjax/core/serialization.py``)::

    CREATE TABLE federated_data (client_id BLOB NOT NULL PRIMARY KEY, data BLOB NOT NULL,
                                 num_examples INTEGER NOT NULL)

One row per client, in ``rowid`` order; ``data`` is ``zlib.compress(msgpack.packb({feature: array}))`` where every
array is a msgpack extension type: code 1 (a numeric ndarray) holds ``msgpack.packb((shape, dtype name, C-order
bytes))``, code 4 (an ndarray of byte strings) ``msgpack.packb((shape, [bytes, ...]))``, code 3 a numpy scalar
encoded like code 1. The format is declared once (:data:`SQLITE`, :data:`COLUMNS`); every file error is its one
line naming the file and what was expected (:class:`~lit_fl.file_schema.FileSchema`).
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

from lit_fl.file_schema import Array, FileSchema

#: msgpack extension codes of FedJAX's serialization (``_MsgpackExtType``)
NDARRAY, NATIVE_COMPLEX, NPSCALAR, BYTES_NDARRAY = 1, 2, 3, 4
#: the one table of the file and its columns
TABLE, COLUMNS = "federated_data", ("client_id", "data", "num_examples")
EXPECTED = (f"a TFF/FedJAX federated SQLite file (table {TABLE}({', '.join(COLUMNS)}), each client's data "
            "zlib-compressed msgpack of feature name -> array)")
#: a file under ``data.root`` of this format
SQLITE = FileSchema(EXPECTED, key="data.root")
#: the errors of a damaged database or a damaged client blob
DATABASE_ERRORS = (sqlite3.DatabaseError,)
BLOB_ERRORS = (ValueError, TypeError, zlib.error, msgpack.UnpackException)

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
        SQLITE.require(self.path, self.path.exists(), "no such file")
        with SQLITE.opening(self.path, DATABASE_ERRORS, "not a SQLite database"):
            self._connection = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            columns = {row[1] for row in self._connection.execute(f"PRAGMA table_info({TABLE})")}
        SQLITE.names(self.path, f"table {TABLE} with columns", COLUMNS, columns)

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
            with SQLITE.reading(self.path, BLOB_ERRORS, f"client {name!r} has damaged data"):
                examples = decode_examples(blob)
            yield name, examples

    def _query(self, query: str, args: tuple = ()) -> Iterator[tuple]:
        cursor = None
        while True:
            with SQLITE.reading(self.path, DATABASE_ERRORS, "damaged SQLite file"):
                cursor = cursor or self._connection.execute(query, args)
                rows = cursor.fetchmany(64)  # the rows in hand before yielding: a reader stopped early leaves
            if not rows:                     # no cursor to resume on a closed connection
                return
            yield from rows

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> FederatedSQLite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _client_id(value: bytes | str) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def check_examples(path: Path, client: str, examples: Examples, features: Mapping[str, Array]) -> None:
    """A client's examples hold every feature the dataset declares, each of its declared shape (one line naming
    the file, the client and the feature otherwise)."""
    SQLITE.arrays(path, examples, features, what="feature", where=f"client {client!r}: ")
