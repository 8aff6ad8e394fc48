"""Dead-leaves noise (FedORION Table 4 left, "DL"; lit_fl/steps/dead_leaves.py): the radius law by hand, the
images against a painter's-algorithm reference on the same random stream (leaves occlude each other, the first
drawn on top), the value range, seeding, and a FedORION round distilling on it."""

from __future__ import annotations

import math

import pytest
import torch
from federations import same_weights, tiny_federation

from lit_fl.algorithms import FedORION
from lit_fl.algorithms.fedorion import GLOBAL
from lit_fl.errors import ConfigError
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.steps import NoiseBatches, StepRunner
from lit_fl.steps.dead_leaves import CHUNK, COLOUR_MEAN, COLOUR_STD, R_MAX, R_MIN, dead_leaves, power_law_radii

pytestmark = pytest.mark.usefixtures("one_thread")
EPS32 = torch.finfo(torch.float32).eps


def test_power_law_radii_by_hand() -> None:
    """p(r) ∝ r^-3 on [0.03, 1]: F(r) = (0.03^-2 - r^-2) / (0.03^-2 - 1), so u = 0 -> 0.03, u = 1 -> 1 and the
    median solves r^-2 = (0.03^-2 + 1) / 2 = 556.0556, r = 0.04240733; sigma = 1 is log-uniform, median sqrt(0.03)."""
    u = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    median = ((R_MIN**-2 + R_MAX**-2) / 2) ** -0.5
    assert median == pytest.approx(0.04240733, abs=5e-9)
    eps64 = torch.finfo(torch.float64).eps
    assert power_law_radii(u).tolist() == pytest.approx([R_MIN, median, R_MAX], rel=16 * eps64)
    assert power_law_radii(u, sigma=1.0).tolist() == pytest.approx([R_MIN, math.sqrt(R_MIN), R_MAX], rel=16 * eps64)


def painted(batch_size: int, shape: tuple[int, int, int], generator: torch.Generator) -> torch.Tensor:
    """The reference: the same chunks of leaves from the same stream, painted back to front one leaf at a time
    (the last drawn first, the first drawn on top), standardised; chunks drawn until every pixel is covered."""
    c, h, w = shape
    ys = torch.arange(h, dtype=torch.float32).view(h, 1) + 0.5
    xs = torch.arange(w, dtype=torch.float32).view(1, w) + 0.5
    leaves: list[torch.Tensor] = []
    covered = torch.zeros(batch_size, h, w, dtype=torch.bool)
    while not bool(covered.all()):
        u = torch.rand((batch_size, CHUNK, 3 + c), generator=generator)
        leaves.append(u)
        radii = power_law_radii(u[..., 2]) * min(h, w)
        for b in range(batch_size):
            for k in range(CHUNK):
                covered[b] |= disk(u[b, k], radii[b, k], ys, xs, h, w)
    image = torch.zeros(batch_size, c, h, w)
    for u in reversed(leaves):
        radii = power_law_radii(u[..., 2]) * min(h, w)
        for k in reversed(range(CHUNK)):
            for b in range(batch_size):
                image[b][:, disk(u[b, k], radii[b, k], ys, xs, h, w)] = u[b, k, 3:, None]
    return (image - COLOUR_MEAN) / COLOUR_STD


def disk(leaf: torch.Tensor, radius: torch.Tensor, ys: torch.Tensor, xs: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """The pixels whose centres lie in the leaf's disk (centre uniform over the image)."""
    dy, dx = ys - leaf[0] * h, xs - leaf[1] * w
    return dy * dy + dx * dx <= radius * radius


@pytest.mark.parametrize("shape", [(3, 12, 12), (1, 9, 14)])
def test_dead_leaves_equal_disks_painted_back_to_front(shape: tuple[int, int, int]) -> None:
    fast = dead_leaves(2, shape, torch.Generator().manual_seed(3))
    reference = painted(2, shape, torch.Generator().manual_seed(3))
    assert fast.shape == (2, *shape) and fast.dtype == torch.float32
    assert torch.equal(fast, reference)


def test_leaves_occlude_each_other_and_stay_in_the_colour_range() -> None:
    """A pixel shows one leaf in all channels: far fewer colours than pixels, more than one per image; colours
    uniform in [0, 1] standardised lie in [-sqrt(3), sqrt(3)] up to three float32 roundings (of 1/2 - c, of the
    standard deviation and of the quotient), each at most half an ulp: 2 eps relative."""
    x = dead_leaves(4, (3, 32, 32), torch.Generator().manual_seed(0))
    assert float(x.abs().max()) <= math.sqrt(3) * (1 + 2 * EPS32)
    for image in x:
        distinct = torch.unique(image.reshape(3, -1).T, dim=0)
        assert 1 < len(distinct) < 32 * 32 // 4  # piecewise constant: each leaf covers several pixels


def test_dead_leaves_are_seeded_and_the_stream_advances() -> None:
    a = [z for z, _ in NoiseBatches((3, 8, 8), 4, 2, torch.Generator().manual_seed(7), kind="dead_leaves")]
    b = [z for z, _ in NoiseBatches((3, 8, 8), 4, 2, torch.Generator().manual_seed(7), kind="dead_leaves")]
    c = [z for z, _ in NoiseBatches((3, 8, 8), 4, 2, torch.Generator().manual_seed(8), kind="dead_leaves")]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], a[1]) and not torch.equal(a[0], c[0])


def test_noise_batches_refuse_dead_leaves_without_an_image_shape() -> None:
    with pytest.raises(ValueError, match="dead_leaves noise needs image inputs"):
        NoiseBatches((2,), 4, 1, torch.Generator(), kind="dead_leaves")


def _round(noise: str) -> dict[str, torch.Tensor]:
    fed = tiny_federation(num_clients=4, pool=("cnn_4_8", "cnn_8"))
    algo = FedORION(client_fraction=0.5, local_epochs=1, server_epochs=2, noise_batch_size=8, noise=noise)
    algo.setup(fed)
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger())
    assert math.isfinite(result.extra["kd_loss"])
    return {k: v.detach().clone() for k, v in fed.server[GLOBAL].state_dict().items()}


def test_fedorion_distils_on_dead_leaves_reproducibly() -> None:
    """A round with ``noise: dead_leaves`` distils (finite L_KD), gives the same server model again from the same
    seed, and another than Gaussian noise from the same stream."""
    first = _round("dead_leaves")
    assert same_weights(first, _round("dead_leaves"))
    assert not same_weights(first, _round("gaussian"))


def test_fedorion_refuses_an_unknown_noise() -> None:
    with pytest.raises(ConfigError, match="^algorithm.noise: 'pink' is not allowed; allowed: gaussian, dead_leaves$"):
        FedORION(noise="pink")  # type: ignore[arg-type]
