"""Hand replays of FedORION (papers/fedorion.txt) and of the noise distillations, in plain torch.

Every test runs the real step or round with plain SGD (momentum 0, no weight decay) and recomputes it here
without lit_fl's losses, weights or BatchNorm helpers: the same noise ``z ~ N(0, I)`` (the generator's state
replayed), BatchNorm on the CURRENT batch statistics by hand (:class:`HandBatchNorm`), teacher weights
``n_i / sum n`` (Eq. 3) or ``Phi_q / sum_{u != n} Phi_u`` (DFML Eq. 3), the soft cross-entropy
``-sum_c p_c log q_c`` at temperature ``T`` times ``T^2``, the backward and ``W - lr * grad``. Pools include
BatchNorm models whose running statistics differ from the noise's, so BatchNorm matters.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest
import torch
import torch.nn.functional as F
from federations import full_state, tiny_federation
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from lit_fl.algorithms import DFML, FedORION
from lit_fl.algorithms.fedorion import GLOBAL
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.steps import MutualNoiseDistillation, NoiseBatches, NoiseDistillation, SGDConfig, StepRunner

ATOL = 1e-6


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def cpu() -> StepRunner:
    return StepRunner(accelerator="cpu")


def assert_states_close(actual: nn.Module, expected: nn.Module) -> None:
    """Every parameter and buffer of ``actual`` equals ``expected``'s (integers exactly)."""
    want = expected.state_dict()
    for key, value in actual.state_dict().items():
        if torch.is_floating_point(value):
            torch.testing.assert_close(value, want[key], atol=ATOL, rtol=0, msg=key)
        else:
            assert torch.equal(value, want[key]), key


def assert_bit_identical(model: nn.Module, before: dict[str, Tensor]) -> None:
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


class HandBatchNorm(nn.Module):
    """BatchNorm on the current batch, by hand: ``(x - mean) / sqrt(var + eps) * gamma + beta`` with the batch's
    mean and biased variance per channel. With ``update`` it also moves its running statistics as PyTorch's
    BatchNorm does: ``(1 - m) r + m * stat`` with the UNBIASED variance, and counts the batch."""

    def __init__(self, bn: _BatchNorm, update: bool) -> None:
        super().__init__()
        self.weight, self.bias = bn.weight, bn.bias
        self.eps, self.momentum, self.update = bn.eps, bn.momentum, update
        self.register_buffer("running_mean", bn.running_mean.detach().clone())
        self.register_buffer("running_var", bn.running_var.detach().clone())
        self.register_buffer("num_batches_tracked", bn.num_batches_tracked.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        dims = [d for d in range(x.dim()) if d != 1]
        mean = x.mean(dims, keepdim=True)
        var = ((x - mean) ** 2).mean(dims, keepdim=True)
        if self.update:
            count = x.numel() // x.shape[1]
            m = self.momentum
            with torch.no_grad():
                self.running_mean.mul_(1 - m).add_(m * mean.flatten())
                self.running_var.mul_(1 - m).add_(m * var.flatten() * count / (count - 1))
                self.num_batches_tracked += 1
        shape = [1, -1] + [1] * (x.dim() - 2)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight.view(shape) + self.bias.view(shape)


def by_hand(model: nn.Module, update_running: bool = False) -> nn.Module:
    """A copy of ``model`` whose BatchNorm layers are :class:`HandBatchNorm` (current batch statistics); the
    other layers in eval mode (the replays use models without dropout, so train and eval agree there)."""
    hand = copy.deepcopy(model)
    for name, module in list(hand.named_modules()):
        if isinstance(module, _BatchNorm):
            parent = hand.get_submodule(name.rpartition(".")[0]) if "." in name else hand
            setattr(parent, name.rpartition(".")[2], HandBatchNorm(module, update_running))
    return hand.eval()


def soft_ce(teacher_logits: Tensor, student_logits: Tensor, t: float) -> Tensor:
    """``T^2 * mean_b -sum_c softmax(teacher / T)_c log softmax(student / T)_c``, the teacher detached."""
    p = torch.exp(teacher_logits.detach() / t)
    p = p / p.sum(dim=1, keepdim=True)
    s = student_logits / t
    log_q = s - torch.logsumexp(s, dim=1, keepdim=True)
    return -(p * log_q).sum(dim=1).mean() * t * t


def sgd_step(models: Sequence[nn.Module], lrs: Sequence[float]) -> None:
    """Plain SGD: ``W <- W - lr * grad`` (parameters without a gradient stay)."""
    with torch.no_grad():
        for model, lr in zip(models, lrs):
            for p in model.parameters():
                if p.grad is not None:
                    p -= lr * p.grad
                    p.grad = None


def bn_mlp(hidden: Sequence[int], seed: int, shift: float = 0.0) -> nn.Sequential:
    """Linear -> ReLU -> BatchNorm1d per hidden layer, linear head (2 inputs, 3 classes); with ``shift`` its running
    statistics come from data ``shift + 2 N(0, I)`` (far from the noise's)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    previous = 2
    for width in hidden:
        layers += [nn.Linear(previous, width), nn.ReLU(), nn.BatchNorm1d(width)]
        previous = width
    model = nn.Sequential(*layers, nn.Linear(previous, 3))
    if shift:
        with torch.no_grad():
            for _ in range(5):
                model.train()(shift + 2.0 * torch.randn(64, 2))
    return model


# -- the noise ------------------------------------------------------------------------------------------------


def test_noise_batches_are_standard_gaussian() -> None:
    """FedORION sec. 3.3 / Algorithm 1: ``z ~ N(0, I)``, drawn from the given generator."""
    generator = torch.Generator().manual_seed(11)
    state = generator.get_state()
    batches = [z for z, _ in NoiseBatches((1, 8, 8), 512, 2, generator)]
    z = torch.cat(batches)
    assert z.shape == (1024, 1, 8, 8)
    assert abs(float(z.mean())) < 0.02 and abs(float(z.std()) - 1.0) < 0.02
    assert 0.48 < float((z < 0).float().mean()) < 0.52 and float(z.min()) < -3.0 and float(z.max()) > 3.0
    assert float((z**4).mean()) == pytest.approx(3.0, abs=0.15)  # Gaussian kurtosis (uniform noise: 1.8)
    generator.set_state(state)
    assert torch.equal(batches[0], torch.randn((512, 1, 8, 8), generator=generator))


# -- NoiseDistillation (Eq. 3) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("student_running_stats", ["keep", "update"])
def test_noise_distillation_two_steps_are_eq3_by_hand(student_running_stats: str) -> None:
    """Eq. 3 at T = 2: ``L = sum_i n_i / sum n * T^2 CE(softmax(t_i(z) / T), s(z) / T)`` with the teachers'
    BatchNorm on the current noise batch, their running statistics bit-identical afterwards; the student's are
    kept or updated on the noise per ``student_running_stats``."""
    teachers = [bn_mlp([8], 1, shift=3.0), bn_mlp([6, 5], 2, shift=-2.0)]
    student = bn_mlp([7], 3, shift=1.0)
    counts, t, lr = [10, 30], 2.0, 0.5
    teachers_before = [full_state(m) for m in teachers]
    hand_teachers = [by_hand(m) for m in teachers]
    hand_student = by_hand(student, update_running=student_running_stats == "update")
    generator = torch.Generator().manual_seed(5)
    state = generator.get_state()
    step = NoiseDistillation(student, teachers, counts, student_running_stats=student_running_stats,  # type: ignore[arg-type]
                             temperature=t, optimizer=SGDConfig(lr=lr, momentum=0.0, weight_decay=0.0))
    cpu().run_server_step(step, NoiseBatches((2,), 32, 2, generator))

    generator.set_state(state)
    losses = []
    for _ in range(2):
        z = torch.randn((32, 2), generator=generator)
        with torch.no_grad():
            targets = [m(z) for m in hand_teachers]
        logits = hand_student(z)
        loss = sum(n / sum(counts) * soft_ce(target, logits, t) for n, target in zip(counts, targets))
        loss.backward()
        sgd_step([hand_student], [lr])
        losses.append(float(loss.detach()))
    assert_states_close(student, hand_student)
    for teacher, before in zip(teachers, teachers_before):
        assert_bit_identical(teacher, before)
    assert float(step.loss_sum) / step.num_batches == pytest.approx(sum(losses) / 2, rel=1e-5)


# -- MutualNoiseDistillation (DFML Eq. 3 weights on noise) ---------------------------------------------------


def test_mutual_noise_distillation_step_is_weighted_soft_ce_by_hand() -> None:
    """``L_n = sum_{q != n} Phi_q / sum_{u != n} Phi_u * T^2 CE(softmax(z_q / T), z_n / T)`` at T = 3, every
    participant's BatchNorm on the current batch; the gradient reaches the student side only (teachers
    detached), a frozen participant does not move, no running statistics change."""
    models = [bn_mlp([8], 1, shift=3.0), bn_mlp([6, 5], 2, shift=-2.0), bn_mlp([4], 3, shift=1.0)]
    phi, trainable, t, lr = [100, 300, 50], [True, True, False], 3.0, 0.5
    before = [full_state(m) for m in models]
    hand = [by_hand(m) for m in models]
    generator = torch.Generator().manual_seed(9)
    state = generator.get_state()
    step = MutualNoiseDistillation(models, phi, trainable=trainable, temperature=t,
                                   optimizer=SGDConfig(lr=lr, momentum=0.0, weight_decay=0.0))
    cpu().run_server_step(step, NoiseBatches((2,), 32, 1, generator))

    generator.set_state(state)
    z = torch.randn((32, 2), generator=generator)
    logits = [m(z) for m in hand]
    total = torch.zeros(())
    for n in (0, 1):
        others = sum(phi[u] for u in range(3) if u != n)
        total = total + sum(phi[q] / others * soft_ce(logits[q], logits[n], t) for q in range(3) if q != n)
    total.backward()
    sgd_step(hand[:2], [lr, lr])
    for model, expected, state_before in zip(models, hand, before):
        assert_states_close(model, expected)
        buffers = {k: v for k, v in state_before.items() if "running" in k or "num_batches" in k}
        assert all(torch.equal(model.state_dict()[k], v) for k, v in buffers.items())
    assert_bit_identical(models[2], before[2])
    assert float(step.loss_sum) == pytest.approx(float(total.detach()), rel=1e-5)


# -- a FedORION round (Algorithm 1) -----------------------------------------------------------------------------


def bn_federation() -> Federation:
    """Three clients: two tiny PreAct ResNet18s (BatchNorm2d) with different data sizes, one LayerNorm CNN."""
    fed = tiny_federation(num_clients=3, pool=("resnet18_2_2_4_4", "cnn_4_8"))
    counts = [c.num_train for c in fed.clients]
    assert len(set(counts)) == 3, counts  # the sample-count weights differ from uniform ones
    return fed


@pytest.mark.parametrize("options", [{}, {"student_running_stats": "update"}], ids=["keep", "update"])
def test_fedorion_round_is_algorithm_1_by_hand(options: dict[str, str]) -> None:
    """One round, every client selected, replayed by hand:

    * client side (Eq. 1-2): ``L_CMi = CE(z_i, y) + w CE(p_gi, z_i)`` and ``L_GMi = CE(z_gi, y) + w CE(p_i, z_gi)``
      (peers detached, ``w = kl_weight = 0.5``); ``theta_i`` steps at eta_i = 0.05, ``theta_gi`` at eta_g = 0.01;
    * aggregation ``theta_g = sum_i n_i theta_gi / sum n`` (``aggregation="samples"``);
    * server side (Eq. 3): T_s = 2 epochs of 2 noise batches, teachers = the trained local models weighted by
      n_i with BatchNorm on the current batch (the DEFAULT ``bn_stats``), SGD at 0.1; the global model's running
      statistics kept (default) or updated on the noise.
    """
    fed = bn_federation()
    lr, global_lr, server_lr, kl_weight, epochs, steps_per_epoch, noise_batch = 0.05, 0.01, 0.1, 0.5, 2, 2, 16
    algo = FedORION(global_arch="resnet18_2_2_4_4", client_fraction=1.0, local_epochs=1, batch_size=1000, lr=lr,
                    global_lr=global_lr, momentum=0.0, kl_weight=kl_weight, aggregation="samples",
                    server_epochs=epochs, noise_steps=steps_per_epoch, noise_batch_size=noise_batch,
                    server_lr=server_lr, server_momentum=0.0, **options)  # type: ignore[arg-type]
    algo.setup(fed)
    server = fed.server[GLOBAL]
    locals_ = [copy.deepcopy(c.model) for c in fed.clients]
    server_start = copy.deepcopy(server)
    generator = fed.rng.data_order
    state = generator.get_state()
    algo.run_round(1, fed, cpu(), CommunicationLedger())
    after_round = generator.get_state()

    generator.set_state(state)
    copies = []
    for client, local in zip(fed.clients, locals_):  # every client does DML (no_dml is None)
        global_copy = copy.deepcopy(server_start)
        idx = client.train_idx[torch.randperm(len(client.train_idx), generator=generator)]
        x, y = fed.data.train_x[idx], fed.data.train_y[idx]
        local.train()
        global_copy.train()
        z_i, z_g = local(x), global_copy(x)
        loss_local = F.cross_entropy(z_i, y) + kl_weight * soft_ce(z_g, z_i, 1.0)
        loss_copy = F.cross_entropy(z_g, y) + kl_weight * soft_ce(z_i, z_g, 1.0)
        (loss_local + loss_copy).backward()
        sgd_step([local, global_copy], [lr, global_lr])
        copies.append(global_copy)
    counts = [c.num_train for c in fed.clients]
    aggregated = copy.deepcopy(server_start)
    with torch.no_grad():
        for key, value in aggregated.state_dict().items():
            if torch.is_floating_point(value):
                value.copy_(sum(n / sum(counts) * m.state_dict()[key].double() for n, m in zip(counts, copies)))
            else:
                value.copy_(copies[0].state_dict()[key])
    student = by_hand(aggregated, update_running=options.get("student_running_stats") == "update")
    teachers = [by_hand(m) for m in locals_]
    for _ in range(epochs * steps_per_epoch):
        z = torch.randn((noise_batch, *fed.data.input_shape), generator=generator)
        with torch.no_grad():
            targets = [m(z) for m in teachers]
        logits = student(z)
        sum(n / sum(counts) * soft_ce(target, logits, 1.0) for n, target in zip(counts, targets)).backward()
        sgd_step([student], [server_lr])

    for client, expected in zip(fed.clients, locals_):
        assert_states_close(client.model, expected)
    assert_states_close(server, student)
    assert torch.equal(generator.get_state(), after_round)  # the round drew exactly this data and noise


def test_fedorion_distill_leaves_the_teachers_bit_identical() -> None:
    """Sec. 3.3: FedORION's server step (defaults but a small noise batch: T_s = 5, bn_stats, student_running_stats)
    normalises the teachers by the current noise batch WITHOUT touching their running statistics, and keeps the
    global model's (they come from averaging the clients' copies, i.e. real data)."""
    fed = bn_federation()
    algo = FedORION(noise_batch_size=16)
    algo.setup(fed)
    before = [full_state(c.model) for c in fed.clients]
    server_before = full_state(fed.server[GLOBAL])
    algo.distill(fed.server[GLOBAL], list(fed.clients), fed, cpu())
    for client, state in zip(fed.clients, before):
        assert_bit_identical(client.model, state)
    buffers = {k: v for k, v in server_before.items() if "running" in k or "num_batches" in k}
    assert all(torch.equal(fed.server[GLOBAL].state_dict()[k], v) for k, v in buffers.items())  # default: keep


# -- DFML's data-free noise extension --------------------------------------------------------------------------


def test_dfml_noise_extension_is_mutual_noise_distillation_with_current_batchnorm() -> None:
    """DFML ``noise_batches`` (SPEC; FedORION sec. 3.3 on a DFML aggregator): every participant learns
    ``sum_{q != n} Phi_q / sum_{u != n} Phi_u * T^2 CE(softmax(z_q / T), z_n / T)`` on ``z ~ N(0, I)``, every
    model's BatchNorm on the current noise batch (the ResNets' running statistics come from real data)."""
    fed = bn_federation()
    t, lr = 2.0, 0.5
    algo = DFML(noise_batches=1, noise_batch_size=16, temperature=t, lr=lr, momentum=0.0, weight_decay=0.0)
    algo.setup(fed)
    clients = list(fed.clients)
    with torch.no_grad():  # running statistics from the clients' data, unlike the noise's
        for client in clients:
            client.model.train()(fed.data.train_x[client.train_idx])
    before = [full_state(c.model) for c in clients]
    hand = [by_hand(c.model) for c in clients]
    phi = [c.num_params for c in clients]
    generator = fed.rng.data_order
    state = generator.get_state()
    algo.noise_distillation(clients, fed, cpu())

    generator.set_state(state)
    z = torch.randn((16, *fed.data.input_shape), generator=generator)
    logits = [m(z) for m in hand]
    total = torch.zeros(())
    for n in range(3):
        others = sum(phi[u] for u in range(3) if u != n)
        total = total + sum(phi[q] / others * soft_ce(logits[q], logits[n], t) for q in range(3) if q != n)
    total.backward()
    sgd_step(hand, [lr] * 3)
    for client, expected, state_before in zip(clients, hand, before):
        assert_states_close(client.model, expected)
        buffers = {k: v for k, v in state_before.items() if "running" in k or "num_batches" in k}
        assert all(torch.equal(client.model.state_dict()[k], v) for k, v in buffers.items())
