"""Hand replays of one real round (or phase) of the baselines against their papers' formulas.

Every setting an algorithm passes into a step is given a non-default value and the result of the real code is
compared with an independent re-computation: FedProx's ``mu`` (DFML A.3.2), FML's ``fml_alpha`` / ``fml_beta``
(DFML A.3.4, Shen et al.), UA-PDFL's client-wise dropout, layer-wise personalisation and auxiliary term
(papers/ua-pdfl.txt Eq. 6, 12, Algorithm 2), codistillation's regularised target (papers/codistillation.txt C.4)
and FedAvg's Eq. 5. The pools hold the BatchNorm ``resnet18_2_2_4_4`` (a tiny pre-activation ResNet18) so that
train vs eval mode and the averaging of running statistics matter.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from federations import tiny_federation
from torch import Tensor, nn

from lit_fl.algorithms import UAPDFL, DecentralizedFedProx, DecentralizedFML
from lit_fl.algorithms.fml import MEME
from lit_fl.algorithms.unit_representation import divergence
from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data import load_dataset
from lit_fl.data.batches import ClientBatches
from lit_fl.federation.builder import build_federation
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.state import Client, Federation
from lit_fl.models import create_model
from lit_fl.steps import StepRunner
from lit_fl.steps.aggregation import weighted_average
from lit_fl.steps.distillation import ServerCodistillation

BN_NET = "resnet18_2_2_4_4"
ATOL = 1e-6
State = dict[str, Tensor]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


@pytest.fixture(scope="module")
def runner() -> StepRunner:
    return StepRunner(accelerator="cpu")


# -- independent re-computations ------------------------------------------------------------------------------


def _ce(z: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy by hand: ``logsumexp(z) - z_y``, mean over the batch."""
    return (torch.logsumexp(z, dim=1) - z.gather(1, y[:, None])[:, 0]).mean()


def _wsm(z: Tensor, y: Tensor, beta: Tensor) -> Tensor:
    """DFML Eq. 2 by hand: ``-z_y + logsumexp_c(z_c + log beta_c)``, mean over the batch."""
    return (torch.logsumexp(z + beta.log(), dim=1) - z.gather(1, y[:, None])[:, 0]).mean()


def _kl(target: Tensor, student_logits: Tensor) -> Tensor:
    """``KL(target || softmax(student))`` = ``sum_c t_c (log t_c - log p_c)``, mean over the batch."""
    return (target * (target.log() - student_logits.log_softmax(dim=1))).sum(dim=1).mean()


def _sgd(models: list[nn.Module], loss: Tensor, lr: float) -> None:
    """One plain SGD step (momentum 0, weight decay 0) of ``loss`` over every parameter of ``models``."""
    params = [p for m in models for p in m.parameters()]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    with torch.no_grad():
        for p, g in zip(params, grads):
            if g is not None:
                p.sub_(lr * g)


def _batches(fed: Federation, client: Client, batch_size: int, state: Tensor) -> list[tuple[Tensor, Tensor]]:
    """The client's batches as drawn from ``rng.data_order`` in ``state`` (a private copy of the stream)."""
    generator = torch.Generator()
    generator.set_state(state)
    return list(ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, batch_size, generator))


def _after(fed: Federation, client: Client, batch_size: int, state: Tensor) -> Tensor:
    """The state of ``rng.data_order`` after the client's batch order is drawn from ``state``."""
    generator = torch.Generator()
    generator.set_state(state)
    ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, batch_size, generator).plan()
    return generator.get_state()


def _eq5(states: list[State], sizes: list[int]) -> State:
    """FedAvg Eq. 5 by hand: ``sum_n d_n W_n / sum_n d_n`` on float entries, integer counters of the first."""
    total = float(sum(sizes))
    return {
        k: sum(d * s[k].double() for s, d in zip(states, sizes)).div(total).float() if v.is_floating_point() else v
        for k, v in states[0].items()
    }


def _assert_state(got: State, expected: State, what: str) -> None:
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, atol=ATOL, rtol=0, msg=lambda m, k=key: f"{what} {k}: {m}")


def _perturb(model: nn.Module, scale: float, seed: int) -> None:
    """Add ``scale * N(0, 1)`` noise to every float entry (BatchNorm statistics included, variance kept > 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, value in model.state_dict().items():
            if value.is_floating_point():
                noise = scale * torch.randn(value.shape, generator=g)
                value.add_(noise.abs() if key.endswith("running_var") else noise)


def _federation(num_clients: int, pool: tuple[str, ...], side: int = 8) -> Federation:
    """``num_clients`` clients over 400 synthetic ``1 x side x side`` images of 4 classes (Dirichlet 0.5)."""
    options = {"num_classes": 4, "input_shape": (1, side, side), "num_train": 400, "num_test": 20}
    data = DataConfig(dataset="synthetic", num_clients=num_clients, partition="dirichlet", beta=0.5, options=options)
    return build_federation(load_dataset("synthetic", seed=0, **options), data, ModelsConfig(pool=list(pool)), 0)


# -- FedAvg Eq. 5 ----------------------------------------------------------------------------------------------


def test_weighted_average_normalises_by_the_sum_of_sample_counts() -> None:
    """FedAvg Eq. 5 (DFML A.3.1): ``W = sum_n d_n W_n / sum_n d_n`` with counts 30 and 10 (sum 40, not 1 or 2):
    weights, BatchNorm running statistics and all; the integer ``num_batches_tracked`` is the first one's."""
    torch.manual_seed(0)
    a, b = create_model(BN_NET, (1, 8, 8), 4), create_model(BN_NET, (1, 8, 8), 4)
    _perturb(b, 0.3, seed=1)
    sa, sb = a.state_dict(), b.state_dict()
    sb["features.norm.num_batches_tracked"].fill_(7)
    out = weighted_average([sa, sb], [30, 10])
    for key, value in sa.items():
        if value.is_floating_point():
            expected = (30.0 * value.double() + 10.0 * sb[key].double()) / 40.0
            torch.testing.assert_close(out[key].double(), expected, atol=ATOL, rtol=0)
        else:
            assert torch.equal(out[key], value)
    assert not torch.equal(out["features.norm.running_var"], sa["features.norm.running_var"])


# -- FedProx ------------------------------------------------------------------------------------------------------


def _replay_fedprox(
    start: nn.Module, beta: Tensor, batches: list[tuple[Tensor, Tensor]], lr: float, mu: float
) -> State:
    """FedProx local phase by hand: SGD on ``WSM + mu/2 ||W - W_start||^2``, ``W_start`` fixed at the phase start."""
    model = copy.deepcopy(start).train()
    anchor = [p.detach().clone() for p in model.parameters()]
    for x, y in batches:
        prox = sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))
        _sgd([model], _wsm(model(x), y, beta) + 0.5 * mu * prox, lr)
    return model.state_dict()


def test_fedprox_round_replays_half_mu_proximal_sgd_and_eq5(runner: StepRunner) -> None:
    """DFML A.3.2 / Li et al.: each participant runs SGD on ``WSM + mu/2 ||W - W~||^2`` with ``W~`` its model when
    local training started (mu = 3 given to the constructor, 3 batches), then Eq. 5 averages the two BatchNorm
    ResNets by train-set size. Replayed by hand to 1e-6."""
    mu, lr, batch = 3.0, 0.1, 64
    fed = tiny_federation(num_clients=2, pool=(BN_NET,))
    algo = DecentralizedFedProx(mu=mu, lr=lr, momentum=0.0, weight_decay=0.0, batch_size=batch)
    algo.setup(fed)
    start = {c.id: copy.deepcopy(c.model) for c in fed.clients}
    state = fed.rng.data_order.get_state()
    result = algo.run_round(1, fed, runner, CommunicationLedger())
    order = [result.aggregator, *result.senders]
    assert sorted(order) == [0, 1] and fed.clients[0].num_train != fed.clients[1].num_train
    generator = torch.Generator()
    generator.set_state(state)
    trained, plain = [], []
    for n in order:
        client = fed.clients[n]
        batches = list(ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, batch, generator))
        assert len(batches) >= 2  # the anchor must stay put over several steps
        trained.append(_replay_fedprox(start[n], client.class_proportions, batches, lr, mu))
        plain.append(_replay_fedprox(start[n], client.class_proportions, batches, lr, 0.0))
    sizes = [fed.clients[n].num_train for n in order]
    expected = _eq5(trained, sizes)
    for client in fed.clients:
        _assert_state(client.model.state_dict(), expected, f"client {client.id}")
    key = "classifier.weight"  # the proximal term must matter at this tolerance
    assert (expected[key] - _eq5(plain, sizes)[key]).abs().max() > 100 * ATOL


# -- FML ----------------------------------------------------------------------------------------------------------


def test_fml_round_replays_alpha_for_the_local_model_and_beta_for_the_meme(runner: StepRunner) -> None:
    """FML (Shen et al.; DFML A.3.4): ``L_local = alpha CE + (1 - alpha) KL(p_meme || p_local)`` and ``L_meme =
    beta CE + (1 - beta) KL(p_local || p_meme)``, both logits before either update, alpha = 0.2 and beta = 0.7
    (neither the default 0.5 nor equal); then the memes are averaged by train-set size (Eq. 5)."""
    alpha, beta, lr, batch = 0.2, 0.7, 0.1, 64
    fed = tiny_federation(num_clients=2, pool=(BN_NET, "cnn_8"))
    algo = DecentralizedFML(
        fml_alpha=alpha, fml_beta=beta, lr=lr, momentum=0.0, weight_decay=0.0, batch_size=batch, loss="ce"
    )
    algo.setup(fed)
    assert fed.clients[0].arch == BN_NET
    start = {c.id: (copy.deepcopy(c.model), copy.deepcopy(c.extras[MEME])) for c in fed.clients}
    state = fed.rng.data_order.get_state()
    result = algo.run_round(1, fed, runner, CommunicationLedger())
    order = [result.aggregator, *result.senders]
    assert sorted(order) == [0, 1]
    generator = torch.Generator()
    generator.set_state(state)
    memes = []
    for n in order:
        client = fed.clients[n]
        local, meme = (copy.deepcopy(m).train() for m in start[n])
        for x, y in ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, batch, generator):
            z_local, z_meme = local(x), meme(x)
            p_local, p_meme = z_local.detach().softmax(1), z_meme.detach().softmax(1)
            loss_local = alpha * _ce(z_local, y) + (1 - alpha) * _kl(p_meme, z_local)
            loss_meme = beta * _ce(z_meme, y) + (1 - beta) * _kl(p_local, z_meme)
            _sgd([local, meme], loss_local + loss_meme, lr)
        _assert_state(client.model.state_dict(), local.state_dict(), f"local model of client {n}")
        memes.append(meme.state_dict())
    expected = _eq5(memes, [fed.clients[n].num_train for n in order])
    for client in fed.clients:
        _assert_state(client.extras[MEME].state_dict(), expected, f"meme of client {client.id}")


# -- UA-PDFL --------------------------------------------------------------------------------------------------------


def _unit(model: nn.Module, side: int) -> tuple[Tensor, Tensor]:
    """``(I, I_aux)`` by hand (Eq. 5, 11): softmax of the eval-mode logits on ``X_unit = ones``, pooled features."""
    model = copy.deepcopy(model).eval()
    with torch.no_grad():
        features = model.features(torch.ones(1, 1, side, side))
        return model.classifier(features).softmax(1)[0].double(), features[0]


def _sym_div(p: Tensor, q: Tensor) -> float:
    """Eq. 6 by hand: ``0.5 sum p log(p/q) + 0.5 sum q log(q/p)``."""
    return 0.5 * sum(a * math.log(a / b) + b * math.log(b / a) for a, b in zip(p.tolist(), q.tolist()))


def test_divergence_is_the_symmetric_kl_of_eq6_on_asymmetric_inputs() -> None:
    """UA-PDFL Eq. 6: ``Div(i, j) = 0.5 KL(I_i || I_j) + 0.5 KL(I_j || I_i)`` for pairs whose two one-sided KLs
    differ: a fixed pair and the unit representations of two BatchNorm ResNets."""
    torch.manual_seed(0)
    a, b = create_model(BN_NET, (1, 8, 8), 4), create_model(BN_NET, (1, 8, 8), 4)
    pairs = [
        (torch.tensor([0.7, 0.2, 0.05, 0.05]), torch.tensor([0.1, 0.3, 0.3, 0.3])),
        (_unit(a, 8)[0], _unit(b, 8)[0]),
    ]
    for p, q in pairs:
        assert float(torch.minimum(p, q).min()) > 1e-4  # far from the eps clamp
        kl_pq = sum(x * math.log(x / y) for x, y in zip(p.tolist(), q.tolist()))
        kl_qp = sum(y * math.log(y / x) for x, y in zip(p.tolist(), q.tolist()))
        assert abs(kl_pq - kl_qp) > 1e-3 * kl_pq  # asymmetric: a one-sided KL would differ
        assert divergence(p, q) == pytest.approx(0.5 * kl_pq + 0.5 * kl_qp, rel=1e-9, abs=1e-12)
        assert divergence(q, p) == pytest.approx(0.5 * kl_pq + 0.5 * kl_qp, rel=1e-9, abs=1e-12)


def test_uapdfl_dropout_needs_every_peer_close_and_h_merges_close_peers_by_data_size(runner: StepRunner) -> None:
    """UA-PDFL sec. 3.3-3.4, Algorithm 2 l. 20-21: three BatchNorm ResNets, client 1 a near copy of client 0,
    client 2 far from both. Clients 0 and 1 have ONE close peer and one far one: no client-wise dropout; every
    ``g`` (BatchNorm statistics included) = data-size weighted mean over all three, ``h`` of clients 0 and 1 =
    weighted mean over {0, 1} (Div < th_I), ``h`` of client 2 its own. Train sizes differ, so uniform weights
    would be visible."""
    fed = tiny_federation(num_clients=3, pool=(BN_NET,))
    models = [c.model for c in fed.clients]
    _perturb(models[0], 0.3, seed=0)
    with torch.no_grad():
        for target in models[1:]:
            for dst, src in zip(target.state_dict().values(), models[0].state_dict().values()):
                dst.copy_(src)
    _perturb(models[1], 2e-3, seed=1)
    _perturb(models[2], 1.0, seed=2)
    reps = [_unit(m, 8)[0] for m in models]
    div = {(i, j): _sym_div(reps[i], reps[j]) for i in range(3) for j in range(3) if i != j}
    threshold = math.sqrt(div[0, 1] * min(div[0, 2], div[1, 2]))
    assert div[0, 1] < threshold / 10 and threshold * 10 < min(div[0, 2], div[1, 2])
    sizes = [c.num_train for c in fed.clients]
    assert len(set(sizes)) == 3
    before = [copy.deepcopy(m.state_dict()) for m in models]
    algo = UAPDFL(threshold=threshold, num_peers=2, local_epochs=0)
    algo.setup(fed)
    result = algo.run_round(1, fed, runner, CommunicationLedger())
    assert result.extra["client_dropouts"] == 0 and result.extra["merged_classifiers"] == 2
    assert result.extra["mean_divergence"] == pytest.approx(sum(div.values()) / 6, rel=1e-6)
    g_all = _eq5(before, sizes)
    for n, h_sources in ((0, [0, 1]), (1, [1, 0]), (2, [2])):
        h = _eq5([before[s] for s in h_sources], [sizes[s] for s in h_sources])
        expected = {
            k: (h if k.startswith("classifier.") else g_all)[k] if v.is_floating_point() else v
            for k, v in before[n].items()
        }
        _assert_state(fed.clients[n].model.state_dict(), expected, f"client {n}")


def test_uapdfl_local_training_replays_eq12_summed_eval_mode_aux_term(runner: StepRunner) -> None:
    """UA-PDFL Eq. 12 and Algorithm 2 l. 29-33: SGD on ``CE + mu ||g(X_unit) - I_aux_avg||_2^2`` (a SUM over
    features, mu = 0.5), ``I_aux_avg`` the mean of the round-start ``I_aux`` over the client AND its peers, own
    ``g(X_unit)`` recomputed per batch in eval mode (BatchNorm on running statistics, as the peers computed
    theirs) while CE trains in train mode. 16x16 inputs keep BatchNorm valid on one sample in both modes, so
    the mode changes the value."""
    side, mu, lr, batch = 16, 0.5, 0.05, 40  # no tiny last batch: BatchNorm on 2 samples amplifies rounding
    fed = _federation(3, (BN_NET,), side=side)
    for c in fed.clients:
        _perturb(c.model, 0.2, seed=10 + c.id)
    start_aux = [_unit(c.model, side)[1] for c in fed.clients]
    algo = UAPDFL(threshold=0.0, mu=mu, num_peers=1, lr=lr, momentum=0.0, batch_size=batch)
    algo.setup(fed)
    queues: dict[int, list[int]] = {}
    draw, make_work = algo.draw_queues, algo.work
    captured: dict[int, nn.Module] = {}
    data_order: list[Tensor] = []  # the stream before the phase draws its first batch order

    def spy_queues(federation: Federation, ledger: CommunicationLedger) -> dict[int, list[int]]:
        queues.update(draw(federation, ledger))
        return queues

    def spy(client: Client, step: nn.Module, federation: Federation, epochs: int):  # noqa: ANN202
        data_order[:] = data_order or [federation.rng.data_order.get_state()]
        captured[client.id] = copy.deepcopy(client.model)  # the model the phase starts from
        return make_work(client, step, federation, epochs)

    algo.draw_queues = spy_queues  # type: ignore[method-assign]
    algo.work = spy  # type: ignore[method-assign]
    algo.run_round(1, fed, runner, CommunicationLedger())
    x_unit = torch.ones(1, 1, side, side)
    stream = torch.Generator()
    stream.set_state(data_order[0])
    for client in fed.clients:  # the phase draws every client's batch order in client order
        peers = queues[client.id]
        assert len(peers) == 1 and peers[0] != client.id  # mean of self + peer differs from the peer's alone
        target = torch.stack([start_aux[n] for n in [client.id, *peers]]).mean(0)
        model = captured[client.id]
        model.train()
        batches = _batches(fed, client, batch, stream.get_state())
        stream.set_state(_after(fed, client, batch, stream.get_state()))
        assert len(batches) >= 2
        for x, y in batches:
            ce = _ce(model(x), y)
            model.eval()
            aux = model.features(x_unit)[0]
            model.train()
            _sgd([model], ce + mu * ((aux - target) ** 2).sum(), lr)
        _assert_state(client.model.state_dict(), model.state_dict(), f"client {client.id}")


# -- codistillation ------------------------------------------------------------------------------------------------


def test_codistillation_target_and_adam_steps_follow_c4(runner: StepRunner) -> None:
    """Codistillation C.4 / SPEC: student ``i`` minimises ``KL(t_i || softmax(student_i))`` with ``t_i = (1 - b)
    softmax(S_q(x) / T) + b softmax(S_i(x))``: the teacher snapshot at temperature T, the student's own start at
    temperature 1 (T = 2.5, b = 0.3). Targets checked by hand, then two Adam steps (one group per student) of a
    BatchNorm ResNet and a CNN replayed."""
    temperature, reg, lrs = 2.5, 0.3, [1e-3, 2e-3]
    torch.manual_seed(0)
    students = [create_model(BN_NET, (1, 8, 8), 4), create_model("cnn_8", (1, 8, 8), 4)]
    snapshots = [copy.deepcopy(s) for s in students]
    frozen = [copy.deepcopy(s).eval() for s in students]
    replay = [copy.deepcopy(s).train() for s in students]
    xs = [torch.randn(16, 1, 8, 8, generator=torch.Generator().manual_seed(k)) for k in range(2)]
    step = ServerCodistillation(students, snapshots, lrs, temperature, reg)
    with torch.no_grad():
        start = [s(xs[0]) for s in frozen]
    targets = step.targets(xs[0])
    for i, q in ((0, 1), (1, 0)):
        hand = (1 - reg) * (start[q] / temperature).softmax(1) + reg * start[i].softmax(1)
        torch.testing.assert_close(targets[i], hand, atol=ATOL, rtol=0)
    runner.run_server_step(step, [(x,) for x in xs])
    adam = torch.optim.Adam([{"params": list(m.parameters()), "lr": lr} for m, lr in zip(replay, lrs)])
    for x in xs:
        with torch.no_grad():
            z = [s(x) for s in frozen]
        loss = sum(
            _kl((1 - reg) * (z[q] / temperature).softmax(1) + reg * z[i].softmax(1), replay[i](x))
            for i, q in ((0, 1), (1, 0))
        )
        adam.zero_grad()
        loss.backward()
        adam.step()
    for i, (student, expected) in enumerate(zip(students, replay)):
        _assert_state(student.state_dict(), expected.state_dict(), f"student {i}")
