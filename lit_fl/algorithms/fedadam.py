"""FedAdam: the server optimiser of knowledge codistillation (papers/codistillation.txt C.3; Reddi et al. 2021).

The server treats the pseudo-gradient ``g = W_server - sum_n d_n W_n / sum_n d_n`` (sample-weighted mean of
the returned client weights) as a gradient and takes one Adam step per round::

    t += 1;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    W_server -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

Defaults b1 0.9, b2 0.999, eps 1e-5 (paper C.3). The paper runs FedJax, whose server optimisers are optax's:
optax's Adam corrects the moments' bias, as above (and as ``torch.optim.Adam``); Reddi et al.'s FedAdam
leaves them uncorrected, available as ``bias_correction=False``. The moments and the step count are part of
:meth:`FedAdam.state_dict`, so a resumed run continues exactly; :meth:`FedAdam.reset` starts them afresh
(PeriodicCodist after each codistillation round, paper C.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lit_fl.errors import ConfigError

if TYPE_CHECKING:
    from torch import Tensor, nn


class FedAdam:
    """Adam over a model's named parameters, driven by explicit (pseudo-)gradients.

    Args:
        lr: server learning rate (a step may pass its own, e.g. a decayed one).
        betas: ``(b1, b2)``.
        eps: added to ``sqrt(v_hat)``.
        bias_correction: divide the moments by ``1 - b^t`` (optax / torch Adam; False = Reddi et al.).
    """

    def __init__(
        self,
        lr: float = 0.01,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-5,
        bias_correction: bool = True,
    ) -> None:
        if lr <= 0:
            raise ConfigError(f"FedAdam: lr must be > 0, got {lr}")
        b1, b2 = (float(b) for b in betas)
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ConfigError(f"FedAdam: betas must be in [0, 1), got {tuple(betas)}")
        if eps <= 0:
            raise ConfigError(f"FedAdam: eps must be > 0, got {eps}")
        self.lr, self.betas, self.eps, self.bias_correction = float(lr), (b1, b2), float(eps), bool(bias_correction)
        self.steps = 0
        self.exp_avg: dict[str, Tensor] = {}
        self.exp_avg_sq: dict[str, Tensor] = {}

    def step(self, model: nn.Module, grads: Mapping[str, Tensor], lr: float | None = None) -> None:
        """One Adam step on ``model``'s parameters named in ``grads`` (every other parameter stays)."""
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
            v = [self.exp_avg_sq.setdefault(n, torch.zeros_like(q, memory_format=torch.preserve_format))
                 for n, q in zip(names, p)]
            # every parameter at once (multi-tensor kernels), element by element the arithmetic of
            # m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  p -= lr (m / c1) / (sqrt(v / c2) + eps)
            torch._foreach_mul_(m, b1)
            torch._foreach_add_(m, g, alpha=1.0 - b1)
            torch._foreach_mul_(v, b2)
            torch._foreach_addcmul_(v, g, g, value=1.0 - b2)
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
