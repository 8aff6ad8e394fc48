"""What FedMD and DS-FL share: a server that samples clients, a public (unlabeled) dataset on which the clients'
models are compared, and the transfer of per-sample class scores through the ledger.

All access to the public data is :meth:`PublicDistillation.public_inputs`: ``data.proxy`` (a second dataset's
inputs, or by default the held-out, unlabeled slice of the train set, ``data.server_fraction > 0``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_fl.algorithms.base import Algorithm
from lit_fl.algorithms.requirements import PROXY_DATA, SERVER_BASED
from lit_fl.federation.selection import select_fraction

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import Tensor

    from lit_fl.data.batches import ClientBatches
    from lit_fl.federation.state import Federation
    from lit_fl.steps.runner import StepRunner



class PublicDistillation(Algorithm):
    """Base of the server-based methods that exchange class scores on public data (not registered).

    Subclasses set ``client_fraction`` and ``public_size`` in their ``__init__``."""

    requires = (SERVER_BASED, PROXY_DATA)  # every sampled client talks to the server; public data on it
    paper_same_init = False  # each party designs and initialises its own model (FedMD sec. 1; FedORION sec. 4.1)
    client_fraction: float = 1.0
    public_size: int | None = None

    def select(self, federation: Federation) -> list[int]:
        """``round(client_fraction * N)`` distinct clients (at least one), sorted (``federation.rng.selection``)."""
        return select_fraction(federation, self.client_fraction)

    def public_inputs(self, federation: Federation) -> Tensor:
        """THE access to the public data: its inputs, ``P x C x H x W`` (``data.proxy``, ``federation.proxy``; by
        default the held-out slice of the train set, ``data.server_fraction``, whose labels are never read)."""
        return federation.proxy

    def public_scores(self, federation: Federation, runner: StepRunner, clients: Sequence[int],
                      x: Tensor) -> list[Tensor]:
        """Every one of ``clients``' class scores on the public inputs ``x`` (logits ``len(x) x classes``, float32),
        in eval mode without gradients: one predict phase (:class:`~lit_fl.steps.predict.PredictWork`)."""
        from lit_fl.steps.predict import PredictWork

        works = [PredictWork(cid, federation.clients[cid].model, x) for cid in clients]
        return [result.value.float() for result in runner.run_phase(works)]

    def round_subset(self, federation: Federation, size: int) -> Tensor:
        """The indices (into :meth:`public_inputs`) of this round's public subset: all ``size`` samples in order
        when ``public_size`` is None or not smaller, else ``public_size`` distinct ones drawn from
        ``federation.rng.algorithm`` (sorted)."""
        import torch

        if self.public_size is None or self.public_size >= size:
            return torch.arange(size)
        drawn = federation.rng.algorithm.choice(size, size=self.public_size, replace=False)
        return torch.as_tensor(sorted(int(i) for i in drawn), dtype=torch.long)

    def target_batches(self, federation: Federation, x: Tensor, targets: Tensor, batch_size: int,
                       epochs: int) -> ClientBatches:
        """``epochs`` shuffled passes over ``(x, targets)`` in batches of ``batch_size`` (order from
        ``federation.rng.data_order``, as every client batch; no augmentation)."""
        import torch

        from lit_fl.data.batches import ClientBatches

        return ClientBatches(x, targets.to(x.device), torch.arange(len(x)), batch_size, federation.rng.data_order,
                             epochs=epochs)
