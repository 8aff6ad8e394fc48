"""The TFF/FedJAX federated SQLite datasets, read from tiny files written in the real format by the tests
(:mod:`fedjax_files`, FedJAX's own encoding), and ``data.partition: natural``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch
from fedjax_files import femnist_files, shakespeare_files, stackoverflow_files, write_file

from lit_fl.data.fedjax_sqlite import FederatedSQLite
from lit_fl.data.registry import load_dataset
from lit_fl.data.shakespeare import TABLE
from lit_fl.errors import ConfigError, DatasetNotFoundError


def test_reader_decodes_fedjax_encoding(tmp_path: Path) -> None:
    pixels = np.arange(2 * 3, dtype=np.float32).reshape(2, 3) / 7
    words = np.empty(2, dtype=object)
    words[:] = [b"x y", b""]
    write_file(tmp_path / "f.sqlite", [(b"b", {"pixels": pixels, "tokens": words}), (b"a", {"pixels": pixels[:1],
                                                                                           "tokens": words[:1]})])
    with FederatedSQLite(tmp_path / "f.sqlite") as db:
        assert [(r.client_id, r.num_examples) for r in db.rows()] == [("b", 2), ("a", 1)]  # file order, not sorted
        clients = dict(db.clients())
    np.testing.assert_array_equal(clients["b"]["pixels"], pixels)  # dtype, shape and bytes round-trip exactly
    assert clients["b"]["pixels"].dtype == np.float32
    assert list(clients["b"]["tokens"]) == [b"x y", b""]


def test_stackoverflow_tokens_as_fedjax(tmp_path: Path) -> None:
    """Vocabulary of the first 5 words (ids 3..7), OOV 8 = vocab_size + 3; BOS w.. EOS, x/y shifted, truncated to
    max_length and padded with 0 (FedJAX create_token_to_ids_fn)."""
    data = load_dataset("stackoverflow", stackoverflow_files(tmp_path), vocab_size=5, max_length=4)
    # the(3) to(4) a(5) i(6) is(7); client 0: "the a", "i is you", "zzz the"
    assert data.train_x[:3].tolist() == [[1, 3, 5, 0], [1, 6, 7, 8], [1, 8, 3, 0]]
    assert data.train_y[:3].tolist() == [[3, 5, 2, 0], [6, 7, 8, 2], [8, 3, 2, 0]]
    assert data.train_y[3].tolist() == [5, 5, 5, 5]  # "a a a a a a a": truncated, no EOS
    assert data.num_classes == 5 + 4
    assert [c.tolist() for c in data.clients] == [[0, 1, 2], [3], [4, 5]]
    assert data.client_ids == ("00000000", "00000001", "00000002")
    answers = load_dataset("stackoverflow", tmp_path, vocab_size=5, max_length=4, type="answer", test_type="question")
    assert [len(c) for c in answers.clients] == [2, 0, 1] and answers.test_y.tolist() == [[3, 4, 2, 0]]


def test_a_word_count_file_shorter_than_vocab_size_gives_its_words_as_fedjax(tmp_path: Path) -> None:
    """Issue 37: FedJAX's ``default_vocab`` takes ``islice(file, vocab_size)``, so a file of 8 words gives 8 words
    (ids 3..10) and the OOV id 11 follows them; lit-fl refused it."""
    stackoverflow_files(tmp_path)
    short = load_dataset("stackoverflow", tmp_path, vocab_size=100, max_length=4)
    exact = load_dataset("stackoverflow", tmp_path, vocab_size=8, max_length=4)
    assert short.num_classes == exact.num_classes == 8 + 4
    assert short.train_x.tolist() == exact.train_x.tolist() and short.train_y.tolist() == exact.train_y.tolist()
    assert int(short.train_x.max()) <= 8 + 3  # every id inside the model's outputs


def test_stackoverflow_refuses_missing_or_damaged_vocabulary(tmp_path: Path) -> None:
    stackoverflow_files(tmp_path)
    (tmp_path / "stackoverflow.word_count").write_text("")
    with pytest.raises(ConfigError, match="stackoverflow.word_count: holds no word"):
        load_dataset("stackoverflow", tmp_path, vocab_size=2)
    (tmp_path / "stackoverflow.word_count").write_text("the 10\nbroken\n")
    with pytest.raises(ConfigError, match="stackoverflow.word_count: line 2 .*expected one 'word count' line"):
        load_dataset("stackoverflow", tmp_path, vocab_size=2)
    (tmp_path / "stackoverflow.word_count").unlink()
    with pytest.raises(DatasetNotFoundError, match="stackoverflow.word_count not found"):
        load_dataset("stackoverflow", tmp_path)


def test_shakespeare_is_fedjax_preprocess_client(tmp_path: Path) -> None:
    """FedJAX's docstring example: [b'ABCD', b'E'] at length 3 is x [[BOS,A,B],[C,D,EOS],[BOS,E,PAD]],
    y [[A,B,C],[D,EOS,BOS],[E,EOS,PAD]]."""
    data = load_dataset("shakespeare", shakespeare_files(tmp_path), sequence_length=3)
    a, b, c, d, e = (int(TABLE[ord(ch)]) for ch in "ABCDE")
    assert data.train_x[:3].tolist() == [[1, a, b], [c, d, 2], [1, e, 0]]
    assert data.train_y[:3].tolist() == [[a, b, c], [d, 2, 1], [e, 2, 0]]
    assert data.num_classes == 90 and int(TABLE[ord("~")]) == 89  # 86 characters + PAD/BOS/EOS + OOV


def test_femnist_flips_pixels_and_keeps_writers(tmp_path: Path) -> None:
    femnist_files(tmp_path)
    data = load_dataset("femnist", tmp_path)
    with FederatedSQLite(tmp_path / "federated_emnist_train.sqlite") as db:
        first = next(db.clients())[1]
    torch.testing.assert_close(data.train_x[:3, 0], torch.from_numpy(1.0 - first["pixels"]), rtol=0, atol=0)
    assert data.input_shape == (1, 28, 28) and data.num_classes == 62 and len(data.test_y) == 6
    assert [len(c) for c in data.clients] == [3, 5, 1, 4]


def test_natural_partition_draws_clients_by_seed(tmp_path: Path) -> None:
    """A loader that reads only the drawn clients gives the clients the partition draws from all of them."""
    from lit_fl.config import DataConfig
    from lit_fl.federation.builder import client_splits

    femnist_files(tmp_path, sizes=(3, 5, 1, 4, 6, 2))
    every = load_dataset("femnist", tmp_path)
    drawn = load_dataset("femnist", tmp_path, num_clients=3, seed=4)
    config = DataConfig(dataset="femnist", root=str(tmp_path), partition="natural", num_clients=3)
    splits, _ = client_splits(every, config, seed=4)
    from_all = [every.train_y[np.sort(np.concatenate([s.train, s.val]))] for s in splits]
    assert [torch.equal(a, drawn.train_y[c]) for a, c in zip(from_all, drawn.clients)] == [True] * 3
    assert len(set(drawn.client_ids)) == 3 and set(drawn.client_ids) < set(every.client_ids)
    assert load_dataset("femnist", tmp_path, num_clients=3, seed=5).client_ids != drawn.client_ids  # the seed draws
    splits, _ = client_splits(drawn, config, seed=4)
    assert [len(s.train) + len(s.val) for s in splits] == [len(c) for c in drawn.clients]
    one = [s for s, c in zip(splits, drawn.clients) if len(c) == 1]
    assert all(len(s.val) == 0 for s in one)  # a one-sample writer has no validation split
    with pytest.raises(ConfigError, match=r"data.num_clients must be in \[1, 6\] \(.*has 6 clients; 6 takes all"):
        load_dataset("femnist", tmp_path, num_clients=7)


def test_natural_partition_needs_own_clients() -> None:
    from lit_fl.config import DataConfig
    from lit_fl.federation.builder import client_splits

    with pytest.raises(ConfigError, match="natural needs a federated dataset.*synthetic has none"):
        client_splits(load_dataset("synthetic"), DataConfig(dataset="synthetic", partition="natural"), 0)


def test_damaged_files_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "federated_emnist_train.sqlite"
    path.write_bytes(b"not a database at all" * 10)
    femnist_test = tmp_path / "federated_emnist_test.sqlite"
    write_file(femnist_test, [(b"w", {"label": np.zeros(1, np.int32), "pixels": np.zeros((1, 28, 28), np.float32)})])
    with pytest.raises(ConfigError, match="federated_emnist_train.sqlite: not a SQLite database"):
        load_dataset("femnist", tmp_path)
    path.unlink()
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE clients (id BLOB)")
    connection.close()
    with pytest.raises(ConfigError, match="no table federated_data with columns client_id, data, num_examples"):
        load_dataset("femnist", tmp_path)
    path.unlink()
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE federated_data (client_id BLOB, data BLOB, num_examples INTEGER)")
    connection.execute("INSERT INTO federated_data VALUES (?, ?, 1)", (b"w", b"\x78\x9c garbage"))
    connection.commit()
    connection.close()
    with pytest.raises(ConfigError, match="client 'w' has damaged data"):
        load_dataset("femnist", tmp_path)
    write_file(path.with_name("x.sqlite"), [(b"w", {"pixels": np.zeros((1, 32, 32), np.float32),
                                                    "label": np.zeros(1, np.int32)})])
    path.unlink()
    path.with_name("x.sqlite").rename(path)
    with pytest.raises(ConfigError, match=r"client 'w': pixels has shape \(N, 32, 32\) \(expected \(N, 28, 28\)\)"):
        load_dataset("femnist", tmp_path)
    with pytest.raises(DatasetNotFoundError, match="shakespeare_train.sqlite not found.*gresearch/fedjax"):
        load_dataset("shakespeare", tmp_path)
