"""A model of your own for ``models.pool``: ``module:factory`` names ``factory(input_shape, num_classes)``.

    lit-fl fit --config gossip.yaml --models.pool '[tiny_models:mlp]'
"""

from __future__ import annotations

from torch import nn


def mlp(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """A two-layer perceptron on the flattened image."""
    channels, height, width = input_shape
    hidden = 128
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, hidden), nn.ReLU(),
                         nn.Linear(hidden, num_classes))
