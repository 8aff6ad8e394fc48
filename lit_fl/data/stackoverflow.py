"""Federated StackOverflow (TFF, by user) as FedJAX prepares it: word-level next-token prediction from
``stackoverflow_{train,test}.sqlite`` and the vocabulary file ``stackoverflow.word_count`` under ``data.root``
(``fedjax/datasets/stackoverflow.py``).

* vocabulary: the first ``vocab_size`` (10,000) words of ``stackoverflow.word_count`` (lines ``word count``, most
  frequent first; FedJAX ``default_vocab``);
* ids (FedJAX ``DefaultWordTokenizer`` with one OOV bucket): PAD 0, BOS 1, EOS 2, word ``i`` of the vocabulary
  ``i + 3``, every other word OOV ``vocab_size + 3``; ``vocab_size + 4`` tokens in all (the models' outputs);
* a post's ``tokens`` (space-separated) become ``BOS w1 .. wn EOS``; ``x`` is all but the last id, ``y`` all but
  the first, both truncated to ``max_length`` (20) and padded with PAD (FedJAX ``create_token_to_ids_fn``);
* ``type`` (``question`` or ``answer``) keeps only the posts of that type, ``test_type`` only the test posts of that
  type;
* ``domains: type`` keeps every post and its type as its domain (:mod:`lit_fl.data.domains`): the codistillation
  paper's Table 2 trains one pool on questions and the other on answers (``algorithm.pool_domains``), distils on the
  mixed held-out posts and evaluates on the whole test set and on each type's part of it
  (``server_acc/<model>/question``, ``server_acc/<model>/answer``);
* ``test_size`` draws that many test posts by the seed (the paper: 100,000 of ~16M, Table 3; null: all).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from lit_fl.data.dataset import ImageDataset
from lit_fl.data.domains import Domains
from lit_fl.data.federated import FEDJAX_URL, FederatedSplit, locate, read_split, sample_rows
from lit_fl.data.fedjax_sqlite import Examples
from lit_fl.data.registry import register_dataset
from lit_fl.data.tokens import BOS, EOS, PAD
from lit_fl.errors import ConfigError

VOCAB_FILE = "stackoverflow.word_count"
NUM_RESERVED = 3  # PAD, BOS, EOS
TYPES = ("question", "answer")


def read_vocab(path: Path, vocab_size: int) -> dict[bytes, int]:
    """Word -> id (``index + 3``) of the first ``vocab_size`` words of the word-count file."""
    vocab: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if len(vocab) == vocab_size:
                break
            fields = line.split()
            if len(fields) != 2 or not fields[1].isdigit():
                raise ConfigError(f"{path}: line {number} is {line[:60]!r}; expected 'word count'")
            vocab.setdefault(fields[0], NUM_RESERVED + len(vocab))
    if len(vocab) < vocab_size:
        raise ConfigError(f"data.options.vocab_size: {vocab_size} words asked, {path} has {len(vocab)}; allowed: "
                          f"1..{len(vocab)}")
    return vocab


def encode(tokens: bytes, vocab: dict[bytes, int], oov: int, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of one post, each ``max_length`` ids (FedJAX ``create_token_to_ids_fn``)."""
    ids = [BOS, *(vocab.get(word, oov) for word in tokens.split(b" ")), EOS]
    x = np.full(max_length, PAD, dtype=np.int64)
    y = np.full(max_length, PAD, dtype=np.int64)
    inputs, targets = ids[:-1][:max_length], ids[1:][:max_length]
    x[: len(inputs)], y[: len(targets)] = inputs, targets
    return x, y


def _preprocess(vocab: dict[bytes, int], max_length: int, kind: str | None, domains: bool):  # noqa: ANN202
    """A client's posts (those of type ``kind``, or all) as ``(x, y)``, with their types when ``domains``."""
    oov = NUM_RESERVED + len(vocab)

    def preprocess(client: str, examples: Examples) -> tuple[np.ndarray, ...]:
        posts = examples["tokens"]
        types = np.asarray(examples["type"]) if kind is not None or domains else None
        if kind is not None:
            keep = types == kind.encode()
            posts, types = posts[keep], types[keep]
        pairs = [encode(bytes(t), vocab, oov, max_length) for t in posts]
        empty = np.zeros((0, max_length), dtype=np.int64)
        x = np.stack([p[0] for p in pairs]) if pairs else empty
        y = np.stack([p[1] for p in pairs]) if pairs else empty
        if not domains:
            return x, y
        return x, y, _type_names(types, client)

    return preprocess


def _type_names(types: np.ndarray, client: str) -> np.ndarray:
    """The posts' ``type`` values as names (one of :data:`TYPES`); one line for any other value."""
    names = np.array([bytes(t).decode("utf-8", "replace") for t in types], dtype=object)
    unknown = sorted(set(names) - set(TYPES))
    if unknown:
        raise ConfigError(f"stackoverflow: client {client!r} has posts of type {unknown[0]!r}; expected "
                          f"{' or '.join(TYPES)}")
    return names


def _check(key: str, value: object, allowed: str, ok: bool) -> None:
    if not ok:
        raise ConfigError(f"data.options.{key}: {value!r} is not allowed; allowed: {allowed}")


@register_dataset("stackoverflow")
def load_stackoverflow(root: Path, download: bool, seed: int, vocab_size: int = 10_000, max_length: int = 20,
                       test_max_length: int | None = None, type: str | None = None,  # noqa: A002 - FedJAX's name
                       test_type: str | None = None, test_size: int | None = None, domains: str | None = None,
                       num_clients: int | None = None) -> ImageDataset:
    """StackOverflow's users as clients; ``num_clients`` of the train file's drawn by ``seed`` (None: all)."""
    for key, value in (("vocab_size", vocab_size), ("max_length", max_length)):
        _check(key, value, "an integer >= 1", isinstance(value, int) and value >= 1)
    _check("test_max_length", test_max_length, "an integer >= 1 or null",
           test_max_length is None or (isinstance(test_max_length, int) and test_max_length >= 1))
    for key, value in (("type", type), ("test_type", test_type)):
        _check(key, value, "question, answer or null", value is None or value in TYPES)
    _check("domains", domains, "type or null", domains in (None, "type"))
    if domains is not None and (type, test_type) != (None, None):
        raise ConfigError(f"data.options.domains: type keeps both types as domains, but type is {type!r} and "
                          f"test_type {test_type!r}; allowed with it: type: null, test_type: null")
    split_types = domains is not None
    features = ("tokens",) if type is None and test_type is None and not split_types else ("tokens", "type")
    vocab = read_vocab(locate(root, VOCAB_FILE, f"{FEDJAX_URL}/stackoverflow/{VOCAB_FILE}"), vocab_size)
    paths = [locate(root, f"stackoverflow_{s}.sqlite", f"{FEDJAX_URL}/stackoverflow/stackoverflow_{s}.sqlite")
             for s in ("train", "test")]
    train = read_split(paths[0], features, _preprocess(vocab, max_length, type, split_types), num_clients, seed)
    test = read_split(paths[1], features, _preprocess(vocab, test_max_length or max_length, test_type, split_types))
    return _sequences("stackoverflow", train, sample_rows(test, test_size, seed, "test_size"),
                      vocab_size + NUM_RESERVED + 1)


def _sequences(name: str, train: FederatedSplit, test: FederatedSplit, num_tokens: int) -> ImageDataset:
    domains = None
    if train.domains is not None and test.domains is not None:
        domains = Domains.from_labels(TYPES, train.domains, test.domains)
    return ImageDataset(name, torch.from_numpy(train.x), torch.from_numpy(train.y), torch.from_numpy(test.x),
                        torch.from_numpy(test.y), num_tokens, clients=train.clients, client_ids=train.ids,
                        domains=domains)
