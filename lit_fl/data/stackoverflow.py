"""Federated StackOverflow (TFF, by user) as FedJAX prepares it: word-level next-token prediction from
``stackoverflow_{train,test}.sqlite`` and the vocabulary file ``stackoverflow.word_count`` under ``data.root``
(``fedjax/datasets/stackoverflow.py``).

* vocabulary: the first ``vocab_size`` (10,000) words of ``stackoverflow.word_count`` (lines ``word count``, most
  frequent first; FedJAX ``default_vocab``), or every word of a shorter file, as FedJAX reads it;
* ids (FedJAX ``DefaultWordTokenizer`` with one OOV bucket): PAD 0, BOS 1, EOS 2, word ``i`` of the vocabulary
  ``i + 3``, every other word OOV ``V + 3``; ``V + 4`` tokens in all (the models' outputs), ``V`` the words read;
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
from typing import Literal

import numpy as np
import torch

from lit_fl.constraints import PositiveInt
from lit_fl.data.dataset import ImageDataset
from lit_fl.data.domains import Domains
from lit_fl.data.federated import FEDJAX_URL, FederatedSplit, locate, read_split, sample_rows
from lit_fl.data.fedjax_sqlite import Examples
from lit_fl.data.registry import register_dataset
from lit_fl.data.tokens import BOS, EOS, PAD
from lit_fl.errors import ConfigError
from lit_fl.file_schema import Array, FileSchema

VOCAB_FILE = "stackoverflow.word_count"
NUM_RESERVED = 3  # PAD, BOS, EOS
PostType = Literal["question", "answer"]
TYPES: tuple[str, ...] = PostType.__args__
#: the word-count file: one ``word count`` line per word, most frequent first
VOCAB = FileSchema("one 'word count' line per word (FedJAX's stackoverflow.word_count)", key="data.root")
#: the features of a client's posts: ``type`` read only where a post type is kept, and where the types are the
#: domains every post's type one of :data:`TYPES`
FEATURES = {"tokens": Array()}
TYPED_FEATURES = {**FEATURES, "type": Array()}
DOMAIN_FEATURES = {**FEATURES, "type": Array(values=TYPES)}


def read_vocab(path: Path, vocab_size: int) -> dict[bytes, int]:
    """Word -> id (``index + 3``) of the first ``vocab_size`` words of the word-count file; a shorter file gives
    the words it has, as FedJAX's ``default_vocab`` (``itertools.islice``) does, the OOV id then following them."""
    vocab: dict[bytes, int] = {}
    VOCAB.regular(path, limit=None)  # a FIFO or a device is one line, never opened
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if len(vocab) == vocab_size:
                break
            fields = line.split()
            VOCAB.require(path, len(fields) == 2 and fields[1].isdigit(), f"line {number} is {line[:60]!r}")
            vocab.setdefault(fields[0], NUM_RESERVED + len(vocab))
    VOCAB.require(path, len(vocab) > 0, "holds no word")
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
        return x, y, _type_names(types)

    return preprocess


def _type_names(types: np.ndarray) -> np.ndarray:
    """The posts' ``type`` values (each one of :data:`TYPES`: :data:`DOMAIN_FEATURES`) as names."""
    return np.array([bytes(t).decode("utf-8", "replace") for t in types], dtype=object)


@register_dataset("stackoverflow")
def load_stackoverflow(root: Path, download: bool, seed: int, vocab_size: PositiveInt = 10_000,
                       max_length: PositiveInt = 20, test_max_length: PositiveInt | None = None,
                       type: PostType | None = None,  # noqa: A002 - FedJAX's name
                       test_type: PostType | None = None, test_size: PositiveInt | None = None,
                       domains: Literal["type"] | None = None, num_clients: int | None = None) -> ImageDataset:
    """StackOverflow's users as clients; ``num_clients`` of the train file's drawn by ``seed`` (None: all). The
    options' types are their rules (:func:`~lit_fl.data.options.check_options`)."""
    if domains is not None and (type, test_type) != (None, None):
        raise ConfigError(f"data.options.domains: type keeps both types as domains, but type is {type!r} and "
                          f"test_type {test_type!r}; allowed with it: type: null, test_type: null")
    split_types = domains is not None
    features = DOMAIN_FEATURES if split_types else FEATURES if type is None and test_type is None else TYPED_FEATURES
    vocab = read_vocab(locate(root, VOCAB_FILE, f"{FEDJAX_URL}/stackoverflow/{VOCAB_FILE}"), vocab_size)
    paths = [locate(root, f"stackoverflow_{s}.sqlite", f"{FEDJAX_URL}/stackoverflow/stackoverflow_{s}.sqlite")
             for s in ("train", "test")]
    train = read_split(paths[0], features, _preprocess(vocab, max_length, type, split_types), num_clients, seed)
    test = read_split(paths[1], features, _preprocess(vocab, test_max_length or max_length, test_type, split_types))
    return _sequences("stackoverflow", train, sample_rows(test, test_size, seed, "test_size"),
                      len(vocab) + NUM_RESERVED + 1)


def _sequences(name: str, train: FederatedSplit, test: FederatedSplit, num_tokens: int) -> ImageDataset:
    domains = None
    if train.domains is not None and test.domains is not None:
        domains = Domains.from_labels(TYPES, train.domains, test.domains)
    return ImageDataset(name, torch.from_numpy(train.x), torch.from_numpy(train.y), torch.from_numpy(test.x),
                        torch.from_numpy(test.y), num_tokens, clients=train.clients, client_ids=train.ids,
                        domains=domains)
