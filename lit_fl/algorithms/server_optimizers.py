"""The server optimizer slot (Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2; Hsu et al. 2019 for
FedAvgM): how a server moves its model towards the round's aggregate.

The aggregate ``x_bar`` (the collected updates after the update transforms, :mod:`lit_fl.algorithms.updates`) gives
the pseudo-gradient ``g = x - x_bar`` (``-Delta_t`` of Reddi et al.), and every optimizer here takes one step on it
per round, parameter by parameter; buffers (BatchNorm statistics) are the aggregate's. :meth:`ServerOptimizer.apply`
is what a server method calls:

* :class:`ServerSGD` (``server_optimizer: sgd``): ``b = mu b + g; x -= server_lr b``. ``server_lr 1``,
  ``server_momentum 0`` is FedAvg exactly (the model becomes the aggregate, copied, no arithmetic); momentum > 0 is
  FedAvgM.
* :class:`FedAdam`, :class:`FedYogi`, :class:`FedAdagrad`: ``m = b1 m + (1 - b1) g`` and the second moment
  ``v = b2 v + (1 - b2) g^2`` (Adam), ``v = v - (1 - b2) g^2 sign(v - g^2)`` (Yogi), ``v = v + g^2`` (Adagrad),
  then ``x -= server_lr m / (sqrt(v) + eps)`` (``eps`` is Reddi et al.'s tau). Reddi et al. correct no bias and
  start ``v`` at ``tau^2`` (Yogi, Adagrad); :class:`FedAdam` as knowledge codistillation's server runs it (optax's
  Adam, papers/codistillation.txt C.3) corrects the bias and starts at 0: ``bias_correction`` chooses.

Moments and step counts are in :meth:`state_dict`, so a resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from lit_fl.constraints import HalfOpenUnitInterval, PositiveFloat, bounds_of, check_arguments

if TYPE_CHECKING:
    from torch import Tensor, nn

#: the range of each of the adaptive optimizers' ``betas``
BETA = bounds_of(HalfOpenUnitInterval)

#: the names of ``algorithm.server_optimizer``
ServerOptimizerName = Literal["sgd", "adam", "yogi", "adagrad"]


class ServerOptimizer:
    """One step per round from the model towards the aggregate (base of the slot)."""

    def apply(self, model: nn.Module, aggregate: Mapping[str, Tensor]) -> None:
        """Move ``model`` by one step on ``g = x - aggregate`` (parameters); buffers become the aggregate's."""
        import torch

        params = dict(model.named_parameters())
        grads = {name: p.detach() - aggregate[name].to(p.dtype) for name, p in params.items()}
        self.step(model, grads)
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(aggregate[name].to(buffer.dtype))

    def step(self, model: nn.Module, grads: Mapping[str, Tensor]) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


class ServerSGD(ServerOptimizer):
    """``b = momentum b + g; x -= lr b`` (FedAvgM with momentum > 0); ``lr 1, momentum 0``: FedAvg exactly."""

    def __init__(self, lr: float = 1.0, momentum: float = 0.0) -> None:
        self.lr, self.momentum = float(lr), float(momentum)
        self.velocity: dict[str, Tensor] = {}

    @property
    def is_average(self) -> bool:
        """Whether a step lands exactly on the aggregate (FedAvg)."""
        return self.lr == 1.0 and self.momentum == 0.0

    def apply(self, model: nn.Module, aggregate: Mapping[str, Tensor]) -> None:
        if self.is_average:  # x - (x - x_bar) is x_bar: copy it, bit for bit the FedAvg average
            from lit_fl.steps.aggregation import load_weights

            own = model.state_dict()
            load_weights(model, {k: aggregate[k].to(v.dtype) for k, v in own.items()})
            return
        super().apply(model, aggregate)

    def step(self, model: nn.Module, grads: Mapping[str, Tensor]) -> None:
        import torch

        params = dict(model.named_parameters())
        with torch.no_grad():
            for name, g in grads.items():
                b = self.velocity.get(name)
                b = g.clone() if b is None else b.mul_(self.momentum).add_(g)
                if self.momentum > 0:
                    self.velocity[name] = b
                params[name].add_(b, alpha=-self.lr)

    def state_dict(self) -> dict[str, Any]:
        return {"velocity": {k: v.clone() for k, v in self.velocity.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.velocity = {k: v.clone() for k, v in state.get("velocity", {}).items()}


class AdaptiveServerOptimizer(ServerOptimizer):
    """Reddi et al.'s adaptive server optimizers over a model's named parameters, driven by explicit
    pseudo-gradients; a subclass says how the second moment ``v`` moves (:meth:`second_moment`).

    Args:
        lr: the server learning rate eta (a step may pass its own, e.g. a decayed one).
        betas: ``(b1, b2)``.
        eps: tau, added to ``sqrt(v_hat)``.
        bias_correction: divide the moments by ``1 - b^t`` (optax / torch Adam); False: Reddi et al.
        initial_accumulator: ``v``'s start (Reddi et al.: ``v_{-1} >= tau^2``).
        key: how errors name the settings: ``{key}lr``, ``{key}betas``, ``{key}eps`` (the method's keys).
    """

    def __init__(
        self,
        lr: PositiveFloat = 0.01,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: PositiveFloat = 1e-5,
        bias_correction: bool = True,
        initial_accumulator: float = 0.0,
        key: str = "",
    ) -> None:
        check_arguments(AdaptiveServerOptimizer.__init__, {"lr": lr, "eps": eps}, key)
        b1, b2 = (float(b) for b in betas)
        for beta in (b1, b2):
            BETA.check(f"{key}betas", beta)
        self.lr, self.betas, self.eps, self.bias_correction = float(lr), (b1, b2), float(eps), bool(bias_correction)
        self.initial_accumulator = float(initial_accumulator)
        self.steps = 0
        self.exp_avg: dict[str, Tensor] = {}
        self.exp_avg_sq: dict[str, Tensor] = {}

    def second_moment(self, v: list[Tensor], g: list[Tensor]) -> None:
        """Update the second moments ``v`` in place from the pseudo-gradients ``g``."""
        raise NotImplementedError

    def step(self, model: nn.Module, grads: Mapping[str, Tensor], lr: float | None = None) -> None:
        """One step on ``model``'s parameters named in ``grads`` (every other parameter stays)."""
        import torch

        lr = self.lr if lr is None else float(lr)
        b1, b2 = self.betas
        self.steps += 1
        c1 = 1.0 - b1**self.steps if self.bias_correction else 1.0
        c2 = 1.0 - b2**self.steps if self.bias_correction else 1.0
        params = dict(model.named_parameters())
        names = list(grads)
        with torch.no_grad():
            p = [params[name] for name in names]
            g = [grads[name].to(device=q.device, dtype=q.dtype) for name, q in zip(names, p)]
            m = [self.exp_avg.setdefault(n, torch.zeros_like(q, memory_format=torch.preserve_format))
                 for n, q in zip(names, p)]
            v = [self.exp_avg_sq.setdefault(n, torch.full_like(q, self.initial_accumulator,
                                                               memory_format=torch.preserve_format))
                 for n, q in zip(names, p)]
            # every parameter at once (multi-tensor kernels), element by element the arithmetic of
            # m = b1 m + (1 - b1) g;  v: second_moment;  p -= lr (m / c1) / (sqrt(v / c2) + eps)
            torch._foreach_mul_(m, b1)
            torch._foreach_add_(m, g, alpha=1.0 - b1)
            self.second_moment(v, g)
            denom = torch._foreach_div(v, c2)
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, self.eps)
            torch._foreach_addcdiv_(p, torch._foreach_div(m, c1), denom, value=-lr)

    def reset(self) -> None:
        """Forget the moments and the step count (a fresh optimiser)."""
        self.steps = 0
        self.exp_avg, self.exp_avg_sq = {}, {}

    def state_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "exp_avg": {k: v.clone() for k, v in self.exp_avg.items()},
            "exp_avg_sq": {k: v.clone() for k, v in self.exp_avg_sq.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.steps = int(state["steps"])
        self.exp_avg = {k: v.clone() for k, v in state["exp_avg"].items()}
        self.exp_avg_sq = {k: v.clone() for k, v in state["exp_avg_sq"].items()}


class FedAdam(AdaptiveServerOptimizer):
    """Adam's second moment: ``v = b2 v + (1 - b2) g^2``."""

    def second_moment(self, v: list[Tensor], g: list[Tensor]) -> None:
        import torch

        torch._foreach_mul_(v, self.betas[1])
        torch._foreach_addcmul_(v, g, g, value=1.0 - self.betas[1])


class FedYogi(AdaptiveServerOptimizer):
    """Yogi's second moment (Reddi et al. Algorithm 2): ``v = v - (1 - b2) g^2 sign(v - g^2)``."""

    def second_moment(self, v: list[Tensor], g: list[Tensor]) -> None:
        import torch

        g2 = torch._foreach_mul(g, g)
        sign = [torch.sign(vv - gg) for vv, gg in zip(v, g2)]
        torch._foreach_addcmul_(v, g2, sign, value=-(1.0 - self.betas[1]))


class FedAdagrad(AdaptiveServerOptimizer):
    """Adagrad's second moment (Reddi et al. Algorithm 2): ``v = v + g^2``."""

    def second_moment(self, v: list[Tensor], g: list[Tensor]) -> None:
        import torch

        torch._foreach_addcmul_(v, g, g)


def build_server_optimizer(name: ServerOptimizerName, lr: float, momentum: float, betas: tuple[float, float],
                           eps: float, key: str = "") -> ServerOptimizer:
    """The slot's optimizer by name, with Reddi et al.'s conventions for the adaptive ones (no bias correction,
    ``v`` from ``eps^2``); ``key`` names the settings in errors."""
    if name == "sgd":
        return ServerSGD(lr, momentum)
    adaptive = {"adam": FedAdam, "yogi": FedYogi, "adagrad": FedAdagrad}[name]
    return adaptive(lr, betas, eps, bias_correction=False, initial_accumulator=eps**2, key=key)
