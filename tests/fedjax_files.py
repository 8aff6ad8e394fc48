"""Tiny federated SQLite files written the way FedJAX writes them (``fedjax/core/serialization.py``,
``SQLiteFederatedDataBuilder``), independently of lit-fl's reader: the tests' fixtures of the real format.

``msgpack.packb(examples, default=ext_pack, strict_types=True)`` with numeric ndarrays as extension type 1
(``packb((shape, dtype name, C bytes), use_bin_type=True)``) and byte-string ndarrays as type 4
(``packb((shape, flat list of bytes))``), zlib-compressed, one row per client in
``federated_data(client_id BLOB NOT NULL PRIMARY KEY, data BLOB NOT NULL, num_examples INTEGER NOT NULL)``.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Sequence
from pathlib import Path

import msgpack
import numpy as np


def ext_pack(x: object) -> msgpack.ExtType:
    if isinstance(x, np.ndarray) and x.dtype.hasobject:
        return msgpack.ExtType(4, msgpack.packb((x.shape, list(x.flatten())), use_bin_type=True))
    if isinstance(x, np.ndarray):
        return msgpack.ExtType(1, msgpack.packb((x.shape, x.dtype.name, x.tobytes("C")), use_bin_type=True))
    if isinstance(x, np.generic):
        y = np.asarray(x)
        return msgpack.ExtType(3, msgpack.packb((y.shape, y.dtype.name, y.tobytes("C")), use_bin_type=True))
    raise TypeError(f"cannot serialize {type(x)}")


def encode(examples: dict[str, np.ndarray]) -> bytes:
    return zlib.compress(msgpack.packb(examples, default=ext_pack, strict_types=True))


def write_file(path: Path, clients: Sequence[tuple[bytes, dict[str, np.ndarray]]]) -> Path:
    """A federated SQLite file of ``clients`` (``(client id, examples)``), in that order."""
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE federated_data (client_id BLOB NOT NULL PRIMARY KEY, data BLOB NOT NULL, "
                       "num_examples INTEGER NOT NULL);")
    rows = [(cid, encode(ex), len(next(iter(ex.values())))) for cid, ex in clients]
    connection.executemany("INSERT INTO federated_data VALUES (?, ?, ?);", rows)
    connection.commit()
    connection.close()
    return path


def byte_strings(values: Sequence[bytes]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def femnist_files(root: Path, sizes: Sequence[int] = (3, 5, 1, 4), test_size: int = 6, seed: int = 0) -> Path:
    """``federated_emnist_{train,test}.sqlite``: one writer per size, random pixels and labels < 62."""
    rng = np.random.default_rng(seed)

    def client(n: int) -> dict[str, np.ndarray]:
        return {"label": rng.integers(0, 62, n).astype(np.int32),
                "pixels": rng.random((n, 28, 28), dtype=np.float32)}

    write_file(root / "federated_emnist_train.sqlite", [(f"f{k:04d}_00".encode(), client(n)) for k, n in
                                                         enumerate(sizes)])
    write_file(root / "federated_emnist_test.sqlite", [(b"f0000_00", client(test_size))])
    return root


#: a word-count file's first lines (word, count), most frequent first
WORDS = [b"the", b"to", b"a", b"i", b"is", b"and", b"in", b"you"]
POSTS = [
    [(b"the a", b"question"), (b"i is you", b"answer"), (b"zzz the", b"answer")],
    [(b"a a a a a a a", b"question")],
    [(b"you", b"answer"), (b"to and in the a i is you", b"question")],
]
TEST_POSTS = [[(b"the to", b"question"), (b"qq a", b"answer")]]


def stackoverflow_files(root: Path, posts: Sequence = POSTS, test_posts: Sequence = TEST_POSTS) -> Path:
    """``stackoverflow_{train,test}.sqlite`` and ``stackoverflow.word_count`` (features of FedJAX's files)."""
    (root / "stackoverflow.word_count").write_bytes(b"".join(w + b" " + str(1000 - i).encode() + b"\n"
                                                             for i, w in enumerate(WORDS)))

    def client(items: Sequence[tuple[bytes, bytes]]) -> dict[str, np.ndarray]:
        n = len(items)
        return {"creation_date": byte_strings([b"2018-02-28 19:06:18.34 UTC"] * n),
                "score": np.arange(n, dtype=np.int64), "tags": byte_strings([b"python"] * n),
                "title": byte_strings([b""] * n), "tokens": byte_strings([t for t, _ in items]),
                "type": byte_strings([k for _, k in items])}

    write_file(root / "stackoverflow_train.sqlite", [(f"{k:08d}".encode(), client(p)) for k, p in enumerate(posts)])
    write_file(root / "stackoverflow_test.sqlite", [(f"{k:08d}".encode(), client(p)) for k, p in
                                                    enumerate(test_posts)])
    return root


def shakespeare_files(root: Path, train: Sequence[Sequence[bytes]] = ((b"ABCD", b"E"), (b"to be",)),
                      test: Sequence[Sequence[bytes]] = ((b"or not",),)) -> Path:
    """``shakespeare_{train,test}.sqlite``: one speaking role per entry, its snippets."""
    for split, roles in (("train", train), ("test", test)):
        write_file(root / f"shakespeare_{split}.sqlite", [(f"ROLE_{k}".encode(), {"snippets": byte_strings(s)})
                                                           for k, s in enumerate(roles)])
    return root
