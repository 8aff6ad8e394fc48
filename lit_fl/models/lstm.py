"""LSTM language models for next-token prediction (token sequences, :mod:`lit_fl.data.tokens`), as FedJAX builds
them with haiku, so their parameter counts are the papers':

* :func:`word_lstm` (``lstm_<embed>_<hidden>_<layers>``): FedJAX ``models/stackoverflow.create_lstm_model``, the
  model of Reddi et al. (2021) that the codistillation paper trains (App. E): an embedding, then per layer an LSTM,
  ``tanh`` and a linear projection back to the embedding size, then a linear layer to the vocabulary. At the
  StackOverflow vocabulary (10,000 words + PAD, BOS, EOS, OOV = 10,004 outputs) ``lstm_96_70_1`` has 1,984,348
  parameters and ``lstm_192_140_2`` 4,278,644: App. E's counts for its small and large models
  (``codist_lstm_small``, ``codist_lstm_large``); FedJAX's default is ``lstm_96_670_1``.
* :func:`char_lstm` (``char_lstm`` = ``char_lstm_8_256_2``): FedJAX ``models/shakespeare.create_lstm_model``, the
  LEAF/McMahan et al. (2017) character model: an embedding of 8, two LSTM layers of 256 each followed by ``tanh``,
  a linear layer to the 90 characters.

The LSTM cell is haiku's ``hk.LSTM``: one linear map of ``[x_t, h_{t-1}]`` to the four gates ``i, g, f, o`` (one
bias), ``c_t = sigmoid(f + 1) c_{t-1} + sigmoid(i) tanh(g)``, ``h_t = sigmoid(o) tanh(c_t)`` (forget-gate bias 1),
from zero states. Initialisation is haiku's: linear weights truncated normal with std ``1/sqrt(fan_in)``, biases 0,
embeddings truncated normal with std 1. PyTorch's ``nn.LSTM`` has two bias vectors per layer (4 x hidden more
parameters) and runs through cuDNN, which ``torch.func.vmap`` cannot batch; this cell is plain matmuls, so the
models fuse like every other model (``trainer.fuse``: ``vmap`` over stacked weights, :mod:`lit_fl.steps.fusion`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

#: ``(embed, hidden, layers)`` of the codistillation paper's language models (App. E)
CODIST_LSTMS: dict[str, tuple[int, int, int]] = {"codist_lstm_small": (96, 70, 1), "codist_lstm_large": (192, 140, 2)}
#: ``(embed, hidden, layers)`` of FedJAX's Shakespeare model
CHAR_LSTM = (8, 256, 2)


def _haiku_linear(layer: nn.Linear) -> nn.Linear:
    std = 1.0 / math.sqrt(layer.in_features)
    nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


class LSTMLayer(nn.Module):
    """haiku's ``hk.LSTM`` unrolled over a sequence: ``[B, T, in]`` -> hidden states ``[B, T, hidden]``."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.gates = _haiku_linear(nn.Linear(input_size + hidden_size, 4 * hidden_size))

    def forward(self, x: Tensor) -> Tensor:
        w = self.gates.weight
        from_input = torch.nn.functional.linear(x, w[:, : self.input_size], self.gates.bias)  # all steps at once
        w_hidden = w[:, self.input_size :]
        h = x.new_zeros(x.shape[0], self.hidden_size)
        c = torch.zeros_like(h)
        outputs = []
        for t in range(x.shape[1]):
            i, g, f, o = (from_input[:, t] + h @ w_hidden.t()).chunk(4, dim=-1)
            c = torch.sigmoid(f + 1.0) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=1)


class LSTMLanguageModel(nn.Module):
    """Token ids ``[B, T]`` -> next-token logits ``[B, T, vocab]``; ``projection`` adds FedJAX StackOverflow's
    linear map from every layer's ``tanh(h)`` back to the embedding size."""

    def __init__(self, vocab: int, embed: int, hidden: int, layers: int, projection: bool) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        nn.init.trunc_normal_(self.embedding.weight, std=1.0, a=-2.0, b=2.0)
        width = embed if projection else hidden
        self.lstms = nn.ModuleList(LSTMLayer(embed if n == 0 else width, hidden) for n in range(layers))
        self.projections = nn.ModuleList(_haiku_linear(nn.Linear(hidden, embed)) for _ in range(layers if projection
                                                                                                 else 0))
        self.head = _haiku_linear(nn.Linear(width, vocab))

    def forward(self, x: Tensor) -> Tensor:
        h = self.embedding(x)
        for n, lstm in enumerate(self.lstms):
            h = torch.tanh(lstm(h))
            if len(self.projections):
                h = self.projections[n](h)
        return self.head(h)


def word_lstm(arch: str, embed: int, hidden: int, layers: int, input_shape: tuple[int, ...],
              num_classes: int) -> LSTMLanguageModel:
    """FedJAX's StackOverflow model at ``num_classes`` tokens (vocabulary + PAD, BOS, EOS, OOV); registered as
    taking token sequences (:data:`lit_fl.models.registry.TOKENS`, checked by ``create_model``)."""
    return LSTMLanguageModel(num_classes, embed, hidden, layers, projection=True)


def char_lstm(arch: str, embed: int, hidden: int, layers: int, input_shape: tuple[int, ...],
              num_classes: int) -> LSTMLanguageModel:
    """FedJAX's (LEAF's) Shakespeare character model at ``num_classes`` tokens (token sequences, as registered)."""
    return LSTMLanguageModel(num_classes, embed, hidden, layers, projection=False)
