"""SCAFFOLD: stochastic controlled averaging (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, ICML 2020,
arXiv 1910.06378), Algorithm 1 with option II control variates; docs/baselines.md "SCAFFOLD".

Server based: the server holds the model ``x`` (``federation.server["global"]``, evaluated as ``server_acc/global``)
and the server control variate ``c``; every client ``i`` holds a control variate ``c_i`` (0 until it first takes
part). Each round (Algorithm 1):

1. ``S``: ``round(client_fraction * N)`` clients drawn from ``federation.rng.selection`` (line 3).
2. The server sends ``(x, c)`` to every client of ``S`` (line 5): the ledger carries the model and ``c`` (a
   :class:`~lit_fl.federation.ledger.Payload` of the parameters' shapes) from its ``SERVER`` endpoint.
3. Client ``i``: ``y_i <- x`` (line 6); ``K`` local steps (lines 7-10)
   ``y_i <- y_i - eta_l (g_i(y_i) - c_i + c)``; ``K`` = ``local_epochs`` epochs of batches of ``batch_size``,
   ``eta_l`` = ``lr``. The correction ``c - c_i`` is added to the mini-batch gradient before the optimizer step, so
   SGD's momentum and weight decay act on the corrected gradient (FL-bench's choice;
   :class:`~lit_fl.steps.ScaffoldTraining`).
4. Option II (line 12, Eq. 4 (ii)): ``c_i+ = c_i - c + (x - y_i) / (K eta_l)`` (:func:`option_ii_control`). With
   momentum ``m`` the local steps move ``lr / (1 - m)`` per unit of gradient, not ``lr``: by default
   (``control_step: effective``) eta_l here is ``lr / (1 - m)``, which is the paper's formula for plain SGD (m = 0);
   ``control_step: lr`` divides by ``lr`` as written (FL-bench's choice), which with m = 0.9 makes ``c_i`` ten times
   the mean gradient and the controls diverge (on mnist5k: ||c|| ~ 3e4 and the loss ~ 4e4 after 10 rounds).
5. The client sends ``(Delta y_i, Delta c_i) = (y_i - x, c_i+ - c_i)`` (line 13; the ledger carries the model and
   ``Delta c_i`` to ``SERVER``) and keeps ``c_i <- c_i+`` (line 14).
6. Server (lines 16-17, :func:`server_update`): ``x <- x + eta_g / |S| sum_i Delta y_i``,
   ``c <- c + 1 / N sum_i Delta c_i`` (= ``|S| / N`` times the mean of the ``Delta c_i``).

Steps 1-3 and 5's transfers are :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s round; this class writes what the
paper adds: ``c`` travelling with ``x`` (:meth:`SCAFFOLD.broadcast`), the corrected local steps, option II and
``Delta c_i`` (:meth:`SCAFFOLD.collect`), and the server's two updates (:meth:`SCAFFOLD.server_update`).

``x`` includes the model's buffers (BatchNorm running statistics): they take the mean of the clients' buffers, as
FedAvg averages them (integer counters: the first client's); control variates exist for parameters only. A client
without training data, or whose transfer failed (``faults.*``), sends nothing and keeps its ``c_i``; ``|S|`` counts
the clients whose updates arrived.

Defaults: FedORION's shared setting (papers/fedorion.txt sec. 4.1 and appendix D, where SCAFFOLD is a homogeneous
baseline): SGD momentum 0.9, no weight decay, client lr 0.01, batch 32, 10 local epochs, 30% of the clients per round
(sec. 4.2.1); ``eta_g = 1`` (SCAFFOLD's experiments, sec. 7, as recalled: docs/baselines.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from lit_fl import steps
from lit_fl.algorithms.norms import l2_norms
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ONE_ARCHITECTURE
from lit_fl.algorithms.server import GLOBAL, ServerAlgorithm, check_checkpoint, model_state
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.algorithms.updates import ClientUpdate, average_updates
from lit_fl.constraints import Fraction, PositiveFloat
from lit_fl.federation.endpoints import SERVER

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner

#: the eta_l of option II: ``lr`` (the paper's plain SGD) or ``effective`` (``lr / (1 - momentum)``)
ControlStep = Literal["effective", "lr"]

Tensors = list["Tensor"]


def option_ii_control(c_i: Sequence[Tensor], c: Sequence[Tensor], x: Sequence[Tensor], y: Sequence[Tensor],
                      num_steps: int, lr: float) -> Tensors:
    """SCAFFOLD Eq. 4 option II: ``c_i+ = c_i - c + (x - y_i) / (K eta_l)``, per parameter (computed in float64,
    returned in ``c_i``'s dtype)."""
    if num_steps <= 0:
        raise ValueError(f"option II needs at least one local step, got K = {num_steps}")
    scale = 1.0 / (num_steps * lr)
    return [(ci.double() - cc.double() + (xx.double() - yy.double()) * scale).to(ci.dtype)
            for ci, cc, xx, yy in zip(c_i, c, x, y, strict=True)]


def server_update(x: Sequence[Tensor], delta_ys: Sequence[Sequence[Tensor]], c: Sequence[Tensor],
                  delta_cs: Sequence[Sequence[Tensor]], num_clients: int, global_lr: float) -> tuple[Tensors, Tensors]:
    """SCAFFOLD Algorithm 1, lines 16-17: ``x + eta_g / |S| sum_i Delta y_i`` and ``c + |S| / N * (1 / |S|) sum_i
    Delta c_i`` (= ``c + 1 / N sum_i Delta c_i``), ``|S| = len(delta_ys)``; per parameter, accumulated in float64 and
    returned in the dtypes of ``x`` and ``c``."""
    size = len(delta_ys)
    if size == 0 or len(delta_cs) != size:
        raise ValueError("server_update needs one Delta y and one Delta c per client, at least one client")
    new_x = [(xx.double() + global_lr * sum(d[k].double() for d in delta_ys) / size).to(xx.dtype)
             for k, xx in enumerate(x)]
    new_c = [(cc.double() + size / num_clients * (sum(d[k].double() for d in delta_cs) / size)).to(cc.dtype)
             for k, cc in enumerate(c)]
    return new_x, new_c


@register_algorithm
class SCAFFOLD(ServerAlgorithm):
    """SCAFFOLD (Karimireddy et al. 2020, Algorithm 1, option II) with a central server; every client of one
    architecture starts from the same initialisation (Algorithm 1 starts every ``y_i`` at the server's ``x``).

    Args:
        client_fraction: share of the clients sampled each round, ``|S| = round(f * N)`` (at least 1). FedORION's
            shared setting: 0.3 (sec. 4.2.1).
        global_lr: eta_g, the server's step size on the mean model update (1: ``x`` = the mean of the ``y_i``).
        control_step: the eta_l that option II divides by: ``effective`` = ``lr / (1 - momentum)``, the step of
            heavy-ball SGD per unit of gradient (default; equals ``lr`` without momentum), or ``lr`` (the literal
            formula, which with momentum 0.9 overestimates ``c_i`` tenfold and diverges on mnist5k).
        **kwargs: the clients' SGD (:mod:`lit_fl.algorithms.settings`), FedORION's shared setting by default (sec.
            4.1, 4.2.1): ``local_epochs`` 10 (K = epochs x batches per epoch), ``lr`` 0.01 (eta_l, also option II's),
            ``momentum`` 0.9 (applied to the corrected gradient), no ``weight_decay``, ``batch_size`` 32.
    """

    #: FedORION App. D (Table 3): the server's global model on the test set
    reports = "server_acc/global"
    client_defaults = FEDORION_CLIENTS
    requires = (*ServerAlgorithm.requires, ONE_ARCHITECTURE)
    #: user-level DP (docs/privacy.md): a client's (Delta y_i, Delta c_i) is one vector, clipped to C together and
    #: noised in both sums, so the accountant charges one Gaussian mechanism per round for the pair
    user_level_dp = True
    private_extra = "delta_c"

    def __init__(
        self,
        client_fraction: Fraction = 0.3,
        global_lr: PositiveFloat = 1.0,
        control_step: ControlStep = "effective",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.client_fraction = client_fraction
        self.global_lr = float(global_lr)
        self.control_step: ControlStep = control_step
        #: c, per parameter of the server model
        self.server_control: Tensors = []
        #: c_i of every client that has taken part (absent: 0)
        self.client_controls: dict[int, Tensors] = {}

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """The server model ``x`` (:class:`ServerAlgorithm`: one architecture, from the clients' initialisation) and
        ``c = 0``."""
        import torch

        super().setup(federation)
        self.server_control = [torch.zeros_like(p.detach()) for p in federation.server[GLOBAL].parameters()]
        self.client_controls = {}

    # -- round -------------------------------------------------------------------------------------------

    def control_lr(self) -> float:
        """The eta_l of option II: ``lr``, or with ``control_step: effective`` SGD momentum's effective step
        ``lr / (1 - momentum)`` (what a step of K steps of heavy-ball SGD moves per unit gradient)."""
        if self.control_step == "lr":
            return self.optimizer.lr
        return self.optimizer.lr / (1.0 - self.optimizer.momentum)

    def client_control(self, cid: int) -> Tensors:
        """``c_i`` (zeros before client ``cid`` first takes part)."""
        import torch

        saved = self.client_controls.get(cid)
        return saved if saved is not None else [torch.zeros_like(c) for c in self.server_control]

    def local_work(self, client: Client, federation: Federation) -> ClientWork | None:
        """``local_epochs`` of SGD on ``g_i(y_i) - c_i + c`` over the client's train split (Algorithm 1, line 10)."""
        correction = [c - ci for c, ci in zip(self.server_control, self.client_control(client.id), strict=True)]
        step = steps.ScaffoldTraining(client.model, client.class_proportions, correction, self.loss, self.optimizer)
        return self.work(client, step, federation, self.local_epochs)

    def broadcast(self, client: Client, starts: dict[str, dict[str, Any]], federation: Federation,
                  ledger: CommunicationLedger) -> ClientWork | None:
        """Line 5: ``(x, c)`` to the client (both must arrive); line 6: ``y_i <- x``; lines 7-10: its local steps."""
        from lit_fl.federation.ledger import Payload

        got_model = ledger.give_back(SERVER, client.id, federation.server[GLOBAL])
        got_control = ledger.give_back(SERVER, client.id, Payload(self.server_control))
        if not (got_model and got_control):
            return None
        client.set_weights(starts[GLOBAL])
        return self.local_work(client, federation)

    def collect(self, client: Client, work: ClientWork, federation: Federation,
                ledger: CommunicationLedger) -> ClientUpdate | None:
        """Line 12: option II's ``c_i+``; line 13: ``(Delta y_i, Delta c_i)`` to the server (the model carries
        ``y_i``, the server subtracts ``x``); line 14: ``c_i <- c_i+`` once they left."""
        from lit_fl.federation.ledger import Payload

        x = [p.detach() for p in federation.server[GLOBAL].parameters()]
        y = [p.detach() for p in client.model.parameters()]
        c_i = self.client_control(client.id)
        c_plus = option_ii_control(c_i, self.server_control, x, y, len(work.batches), self.control_lr())
        delta_c = [new - old for new, old in zip(c_plus, c_i)]
        if not ledger.send(client.id, SERVER, client.model):
            return None
        ledger.send(client.id, SERVER, Payload(delta_c))
        self.client_controls[client.id] = c_plus
        return ClientUpdate(client.id, model_state(client.model), extra={"delta_c": delta_c})

    def private_extra_like(self) -> Tensors:
        """``Delta c``'s shapes: ``c``'s."""
        return self.server_control

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Lines 16-17 (:func:`server_update`) over the arrived updates; buffers take the clients' mean. Under
        user-level DP the updates arrive clipped and noised (:mod:`lit_fl.privacy.user_level`): their mean model
        delta is the noised sum over the expected cohort ``E``, and their ``Delta c`` sum is the noised clipped sum
        (line 17 divides it by N)."""
        if updates:
            server = federation.server[GLOBAL]
            names = [name for name, _ in server.named_parameters()]
            x = [p.detach() for _, p in server.named_parameters()]
            delta_ys = [[u.values[name] - xx for name, xx in zip(names, x)] for u in updates]
            new_x, self.server_control = server_update(x, delta_ys, self.server_control,
                                                       [u.extra["delta_c"] for u in updates],
                                                       federation.num_clients, self.global_lr)
            state = average_updates(updates)[GLOBAL]  # buffers: FedAvg's mean (weights 1)
            state.update(zip(names, new_x))
            steps.load_weights(server, {k: state[k].to(v.dtype) for k, v in server.state_dict().items()})
        return {"control_norm": control_norm(self.server_control)}

    # -- checkpoint --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "server_control": [t.clone() for t in self.server_control],
            "client_controls": {cid: [t.clone() for t in self.client_controls[cid]]
                                for cid in sorted(self.client_controls)},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = list(state["server_control"])
        check_checkpoint("SCAFFOLD's control variates have the shapes", [tuple(t.shape) for t in saved],
                         [tuple(t.shape) for t in self.server_control])
        device = self.server_control[0].device if self.server_control else None
        self.server_control = [t.to(device) for t in saved]
        self.client_controls = {int(cid): [t.to(device) for t in ts]
                                for cid, ts in sorted(state["client_controls"].items())}


def control_norm(control: Sequence[Tensor]) -> float:
    """``||c||_2`` over every parameter (a metric: it grows from 0 as the clients' drifts are learned)."""
    return l2_norms([control])[0]
