"""Dead-leaves images: the DeadLeaves noise of FedORION's Table 4 (left; papers/fedorion.txt sec. 5, "Effect of
Different Noise Samples"), after Baradad Jurjo et al. 2021 ("Learning to see by looking at noise").

The dead-leaves model (Matheron 1968; Lee, Mumford & Huang 2001) layers opaque random shapes ("leaves") until they
cover the image. Here the leaves are disks:

* centre uniform over the image;
* radius ``r * side`` (``side`` the shorter image side) with ``r`` power-law distributed,
  ``p(r) ∝ r^-sigma`` on ``[r_min, r_max]``; Baradad Jurjo et al.'s values ``sigma = 3`` (the scale-invariant
  model), ``r_min = 0.03``, ``r_max = 1``. (Their generator takes the radius from a 200-step table of
  ``r^-sigma - r_max^-sigma``; this draws the plain truncated power law by its inverse CDF.)
* colour uniform in ``[0, 1]`` per channel.

Leaves are placed front to back: a pixel shows the first leaf that covers it, and drawing stops once every pixel
of every image is covered, so each image is an exact sample of the (infinite) dead-leaves model, not one truncated
after a fixed number of shapes. Leaves are drawn in chunks of :data:`CHUNK`; each chunk is one vectorised test of
every pixel against every leaf (no loop over pixels or leaves).

The images are standardised with the moments of the uniform colour, ``(x - 1/2) / sqrt(1/12)``: every pixel then
has mean 0 and variance 1 like the ``z ~ N(0, I)`` they replace, on the scale of the normalised data the
teachers were trained on; values lie in ``[-sqrt(3), sqrt(3)]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

#: leaves drawn per vectorised step
CHUNK = 64
#: Baradad Jurjo et al. 2021's radius law: ``p(r) ∝ r^-SIGMA`` on ``[R_MIN, R_MAX]`` (fractions of the image side)
SIGMA, R_MIN, R_MAX = 3.0, 0.03, 1.0
#: mean and standard deviation of a colour channel uniform in [0, 1]
COLOUR_MEAN, COLOUR_STD = 0.5, math.sqrt(1.0 / 12.0)


def power_law_radii(u: Tensor, sigma: float = SIGMA, r_min: float = R_MIN, r_max: float = R_MAX) -> Tensor:
    """Radii with density ``∝ r^-sigma`` on ``[r_min, r_max]`` from uniforms ``u`` in [0, 1) (inverse CDF)."""
    if sigma == 1.0:
        return r_min * (r_max / r_min) ** u
    a, b = r_min ** (1.0 - sigma), r_max ** (1.0 - sigma)
    return (a + u * (b - a)) ** (1.0 / (1.0 - sigma))


def dead_leaves(batch_size: int, shape: Sequence[int], generator: torch.Generator) -> Tensor:
    """``batch_size`` standardised dead-leaves images of ``shape = (C, H, W)``, drawn on the CPU from ``generator``."""
    if len(shape) != 3:
        raise ValueError(f"dead-leaves images need an image shape (C, H, W), got {tuple(shape)}")
    c, h, w = (int(s) for s in shape)
    leaf = torch.full((batch_size * h * w,), -1, dtype=torch.long)  # the leaf each pixel shows, flat (B*H*W,)
    todo = torch.arange(batch_size * h * w)  # the pixels no leaf covers yet
    colours: list[Tensor] = []
    while len(todo):
        u = torch.rand((batch_size, CHUNK, 3 + c), generator=generator)
        centre_y, centre_x = u[..., 0] * h, u[..., 1] * w  # (B, CHUNK)
        radius = power_law_radii(u[..., 2]) * min(h, w)
        image, pixel = todo // (h * w), todo % (h * w)
        dy = (pixel // w).to(torch.float32).unsqueeze(1) + 0.5 - centre_y[image]  # (pixels, CHUNK)
        dx = (pixel % w).to(torch.float32).unsqueeze(1) + 0.5 - centre_x[image]
        covers = dy * dy + dx * dx <= (radius * radius)[image]
        hit = covers.any(dim=1)
        leaf[todo[hit]] = covers[hit].to(torch.uint8).argmax(dim=1) + len(colours) * CHUNK  # the first one
        todo = todo[~hit]
        colours.append(u[..., 3:])
    palette = torch.cat(colours, dim=1)  # (B, leaves, C)
    pixels = palette.gather(1, leaf.view(batch_size, h * w, 1).expand(-1, -1, c))  # (B, H*W, C)
    return (pixels.transpose(1, 2).reshape(batch_size, c, h, w) - COLOUR_MEAN) / COLOUR_STD
