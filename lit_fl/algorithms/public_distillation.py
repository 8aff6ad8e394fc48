"""What FedMD and DS-FL share: a server that samples clients (:class:`~lit_fl.algorithms.server.ServerAlgorithm`'s
round), a public (unlabeled) dataset on which the clients' models are compared, and the transfer of per-sample class
scores through the ledger: up to :data:`~lit_fl.federation.endpoints.SERVER` (:meth:`PublicDistillation.upload`) and
back down (:meth:`PublicDistillation.send_targets`).

All access to the public data is :meth:`PublicDistillation.public_inputs`: ``data.proxy`` (a second dataset's
inputs, or by default the held-out, unlabeled slice of the train set, ``data.server_fraction > 0``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_fl.algorithms.requirements import PROXY_DATA
from lit_fl.algorithms.server import ServerAlgorithm
from lit_fl.algorithms.updates import ClientUpdate
from lit_fl.federation.endpoints import SERVER

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import Tensor

    from lit_fl.data.batches import ClientBatches
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner


class PublicDistillation(ServerAlgorithm):
    """Base of the server-based methods that exchange class scores on public data (not registered).

    Subclasses set ``client_fraction`` and ``public_size`` in their ``__init__``. No server model by default
    (:meth:`server_groups`: none; DS-FL creates its global model itself)."""

    requires = (*ServerAlgorithm.requires, PROXY_DATA)  # every sampled client talks to the server; public data on it
    paper_same_init = False  # each party designs and initialises its own model (FedMD sec. 1; FedORION sec. 4.1)
    public_size: int | None = None

    def server_groups(self, federation: Federation) -> list[str]:
        """None: the clients' models are not averaged into a server model."""
        return []

    def round_inputs(self, federation: Federation) -> Tensor:
        """This round's public subset ``x_1..x_P`` (:meth:`round_subset` of :meth:`public_inputs`)."""
        public = self.public_inputs(federation)
        return public[self.round_subset(federation, len(public)).to(public.device)]

    def upload(self, client: Client, scores: Tensor, ledger: CommunicationLedger) -> ClientUpdate | None:
        """``client`` sends its class scores on the public subset (``P x classes``) to the server; None when the
        upload fails."""
        from lit_fl.federation.ledger import Payload

        if not ledger.send(client.id, SERVER, Payload([scores])):
            return None
        return ClientUpdate(client.id, {"scores": scores})

    def send_targets(self, clients: Sequence[Client], target: Tensor | None,
                     ledger: CommunicationLedger) -> list[bool]:
        """The server sends ``target`` (the aggregated scores) to every one of ``clients``; whether each received
        it (none when no scores arrived: ``target`` None)."""
        from lit_fl.federation.ledger import Payload

        return [target is not None and ledger.give_back(SERVER, client.id, Payload([target])) for client in clients]

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
