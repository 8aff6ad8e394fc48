"""Federated Shakespeare (LEAF/TFF, by speaking role) as FedJAX prepares it, from ``shakespeare_{train,test}.sqlite``
under ``data.root``: character-level next-token prediction (``fedjax/datasets/shakespeare.py``).

Every byte of a snippet maps through FedJAX's table: PAD 0, BOS 1, EOS 2, the 86 characters of :data:`CHARACTERS`
from 3, every other byte to OOV 89 (:data:`VOCAB_SIZE` 90 tokens in all). All snippets of a client are joined, each
as ``BOS chars EOS``, and cut into ``sequence_length`` (80) pairs of inputs and next tokens, the last one padded
(FedJAX ``shakespeare.preprocess_client``): ``[b'ABCD', b'E']`` at length 3 gives ``x = [[BOS,A,B],[C,D,EOS],
[BOS,E,PAD]]``, ``y = [[A,B,C],[D,EOS,BOS],[E,EOS,PAD]]``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from lit_fl.constraints import PositiveInt
from lit_fl.data.dataset import ImageDataset
from lit_fl.data.federated import FEDJAX_URL, locate, read_split
from lit_fl.data.fedjax_sqlite import Examples
from lit_fl.data.registry import register_dataset
from lit_fl.data.tokens import BOS, EOS, PAD
from lit_fl.file_schema import Array

#: FedJAX's vocabulary, in label order from 3 (``shakespeare._build_look_up_table``)
CHARACTERS = b'dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#\'/37;?bfjnrvzBFJNRVZ"&*.26:\naeimquyAEIMQUY]!%)-159\r'
NUM_RESERVED = 3
OOV = NUM_RESERVED + len(CHARACTERS)
VOCAB_SIZE = OOV + 1
#: the one feature of a speaking role's examples: its lines
FEATURES = {"snippets": Array()}


def _table() -> np.ndarray:
    table = np.full(256, OOV, dtype=np.int64)
    for i, c in enumerate(CHARACTERS):
        table[c] = NUM_RESERVED + i
    return table


TABLE = _table()


def client_sequences(snippets: np.ndarray, sequence_length: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of one client's snippets (FedJAX ``shakespeare.preprocess_client``)."""
    pieces = [np.concatenate([[BOS], TABLE[np.frombuffer(bytes(s), dtype=np.uint8)], [EOS]]) for s in snippets]
    joined = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    n = len(joined) - 1
    if n <= 0:
        return np.zeros((0, sequence_length), dtype=np.int64), np.zeros((0, sequence_length), dtype=np.int64)
    padded = -(-n // sequence_length) * sequence_length
    x = np.full(padded, PAD, dtype=np.int64)
    y = np.full(padded, PAD, dtype=np.int64)
    x[:n], y[:n] = joined[:-1], joined[1:]
    return x.reshape(-1, sequence_length), y.reshape(-1, sequence_length)


@register_dataset("shakespeare")
def load_shakespeare(root: Path, download: bool, seed: int, sequence_length: PositiveInt = 80,
                     num_clients: int | None = None) -> ImageDataset:
    """Shakespeare's speaking roles as clients; ``num_clients`` of the train file's drawn by ``seed`` (None: all)."""

    def preprocess(client: str, examples: Examples) -> tuple[np.ndarray, np.ndarray]:
        return client_sequences(examples["snippets"], sequence_length)

    paths = [locate(root, f"shakespeare_{s}.sqlite", f"{FEDJAX_URL}/shakespeare/shakespeare_{s}.sqlite")
             for s in ("train", "test")]
    train = read_split(paths[0], FEATURES, preprocess, num_clients, seed)
    test = read_split(paths[1], FEATURES, preprocess)
    return ImageDataset("shakespeare", torch.from_numpy(train.x), torch.from_numpy(train.y), torch.from_numpy(test.x),
                        torch.from_numpy(test.y), VOCAB_SIZE, clients=train.clients, client_ids=train.ids)
