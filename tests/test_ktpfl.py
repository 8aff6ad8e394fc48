"""KT-pFL (Zhang et al., NeurIPS 2021, arXiv 2111.02862): the personalized targets, the coefficient loss's gradient
and the simplex projection on hand cases; one round replayed by hand in float64 (local CE SGD, soft predictions at
temperature T, the projected gradient step on C, the personalized targets, the distillation SGD); the ledger's
soft-prediction traffic; the shipped config; an exact resume, C included.

The replays write every formula out here; nothing of lit-fl's but the round under test computes the expectations."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_OPTIONS, run_cli, tiny_config, write_config
from test_resume import assert_resumed_run_equals_uninterrupted
from torch import Tensor, nn

from lit_fl.algorithms import KTpFL
from lit_fl.algorithms.ktpfl import personalized_targets, project_rows_to_simplex, update_coefficients
from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data import load_dataset
from lit_fl.federation.builder import build_federation
from lit_fl.federation.ledger import MB, CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.steps import StepRunner
from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]
#: float32 weights against a float64 replay of a few dozen SGD steps on weights of magnitude <= 1: float32's relative
#: precision (6e-8) times a few dozen rounded operations per weight, with a margin of 10
ATOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def public_federation(num_clients: int = 4, pool: tuple[str, ...] = ("cnn_4_8", "cnn_8")) -> Federation:
    """Synthetic 1x8x8 images, 20% of the train set held out as unlabeled public data."""
    data = DataConfig(dataset="synthetic", num_clients=num_clients, partition="dirichlet", beta=0.5,
                      options=dict(TINY_OPTIONS), server_fraction=0.2)
    return build_federation(load_dataset("synthetic", seed=0, **TINY_OPTIONS), data, ModelsConfig(pool=list(pool)), 0)


# -- the pure functions ---------------------------------------------------------------------------------------


def test_personalized_targets_are_rows_of_c_times_the_soft_predictions() -> None:
    """``t_n = sum_m c_nm s_m`` on a 2-client, 1-sample, 2-class case worked out by hand."""
    c = torch.tensor([[0.75, 0.25], [0.5, 0.5]], dtype=torch.float64)
    s = torch.tensor([[[1.0, 0.0]], [[0.2, 0.8]]], dtype=torch.float64)
    t = personalized_targets(c, s)
    assert torch.allclose(t, torch.tensor([[[0.8, 0.2]], [[0.6, 0.4]]], dtype=torch.float64), atol=1e-15)


def test_simplex_projection_by_hand() -> None:
    """Euclidean projection: a point of the simplex stays; ``(0.6, 0.6)`` -> ``(0.5, 0.5)``; ``(1.2, -0.4, 0.2)``
    -> ``tau = 0.2``: ``(1, 0, 0)``; ``(0.5, 0.4, 0.4)`` -> ``tau = 0.1``: ``(0.4, 0.3, 0.3)``."""
    assert torch.allclose(project_rows_to_simplex(torch.tensor([[0.6, 0.6]], dtype=torch.float64)),
                          torch.tensor([[0.5, 0.5]], dtype=torch.float64), atol=1e-15)
    v = torch.tensor([[1.2, -0.4, 0.2], [0.5, 0.4, 0.4], [0.2, 0.3, 0.5]], dtype=torch.float64)
    want = torch.tensor([[1.0, 0.0, 0.0], [0.4, 0.3, 0.3], [0.2, 0.3, 0.5]], dtype=torch.float64)
    assert torch.allclose(project_rows_to_simplex(v), want, atol=1e-15)


def hand_coefficient_step(c: Tensor, s: Tensor, lr: float, lam: float, rho: float) -> Tensor:
    """The gradient written out: ``d/dc_nm [lam mean_p KL(t_np || s_np)] = lam mean_p sum_k s_mpk (log t_npk - log
    s_npk + 1)`` and ``d/dc_nm rho ||c_n - 1/K||^2 = 2 rho (c_nm - 1/K)``; then the projection found by bisection on
    ``tau`` (``sum_m max(v_m - tau, 0) = 1``), independent of the sort-based one under test."""
    k = c.shape[0]
    t = torch.einsum("nm,mpc->npc", c, s)
    grad = torch.zeros_like(c)
    for n in range(k):
        for m in range(k):
            grad[n, m] = lam * (s[m] * (torch.log(t[n]) - torch.log(s[n]) + 1)).sum(1).mean() + 2 * rho * (
                c[n, m] - 1 / k)
    v = c - lr * grad
    out = torch.zeros_like(v)
    for n in range(k):
        lo, hi = float(v[n].min()) - 1, float(v[n].max())
        for _ in range(200):
            tau = (lo + hi) / 2
            lo, hi = (tau, hi) if float((v[n] - tau).clamp_min(0).sum()) > 1 else (lo, tau)
        out[n] = (v[n] - (lo + hi) / 2).clamp_min(0)
    return out


@pytest.mark.parametrize(("lr", "rho"), [(0.5, 0.7), (3.0, 0.0)])
def test_coefficient_update_is_the_projected_gradient_step_by_hand(lr: float, rho: float) -> None:
    """Three clients, five samples, four classes: :func:`update_coefficients` equals the gradient written out and a
    bisection projection; the large step without regulariser hits the simplex's boundary (a zero coefficient)."""
    g = torch.Generator().manual_seed(0)
    s = torch.softmax(3 * torch.randn(3, 5, 4, generator=g, dtype=torch.float64), dim=2)
    c = project_rows_to_simplex(torch.rand(3, 3, generator=g, dtype=torch.float64))
    got = update_coefficients(c, s, lr, 1.3, rho)
    want = hand_coefficient_step(c, s, lr, 1.3, rho)
    assert torch.allclose(got, want, atol=1e-12), (got, want)
    assert torch.allclose(got.sum(1), torch.ones(3, dtype=torch.float64), atol=1e-12)
    assert float((got - c).abs().max()) > 1e-3  # it moved
    if rho == 0.0:
        assert float(got.min()) == 0.0


# -- one round by hand -----------------------------------------------------------------------------------------


def hand_ce(z: Tensor, y: Tensor) -> Tensor:
    return (torch.logsumexp(z, dim=1) - z.gather(1, y[:, None])[:, 0]).mean()


def hand_kl(z: Tensor, t: Tensor, temperature: float) -> Tensor:
    """``T^2 mean_b sum_c t (log t - log softmax(z / T))``."""
    zt = z / temperature
    log_q = zt - torch.logsumexp(zt, dim=1, keepdim=True)
    return (t * (torch.log(t) - log_q)).sum(1).mean() * temperature**2


def plain_sgd(model: nn.Module, batches: list, loss_fn, lr: float) -> None:  # noqa: ANN001
    params = list(model.parameters())
    for x, y in batches:
        grads = torch.autograd.grad(loss_fn(model(x), y), params)
        with torch.no_grad():
            for p, gr in zip(params, grads):
                p -= lr * gr


def permuted(x: Tensor, y: Tensor, batch: int, epochs: int, generator: torch.Generator) -> list:
    out = []
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for i in range(0, len(x), batch):
            idx = order[i:i + batch]
            out.append((x[idx], y[idx]))
    return out


def test_round_is_local_training_coefficient_step_and_distillation_by_hand() -> None:
    """One round, ``|S| = 2`` of 4 clients, plain SGD (momentum 0), from a non-uniform C: by hand in float64, each
    selected client's CE SGD on its batches, ``s_n = softmax(f_n(x) / T)`` on the public inputs, the block ``a =
    C[S, S] / rowsum`` stepped by :func:`hand_coefficient_step`, ``C[S, S] = a' * rowsum`` (other entries kept), ``t_n
    = sum_m a'_nm s_m`` and ``lambda T^2 KL(t_n || softmax(f_n / T))`` SGD on public batches."""
    lr, lam, rho, coef_lr, temp, batch = 0.05, 0.8, 0.7, 2.0, 3.0, 32
    fed = public_federation()
    algo = KTpFL(client_fraction=0.5, kl_weight=lam, rho=rho, coef_lr=coef_lr, temperature=temp, local_epochs=1,
                 distill_epochs=1, lr=lr, momentum=0.0, batch_size=batch)
    algo.setup(fed)
    g = torch.Generator().manual_seed(5)
    start_c = project_rows_to_simplex(torch.rand(4, 4, generator=g, dtype=torch.float64))
    algo.load_state_dict({"coefficients": start_c})
    models = [copy.deepcopy(c.model).double() for c in fed.clients]
    selection = copy.deepcopy(fed.rng.selection.bit_generator.state)
    order = fed.rng.data_order.get_state()
    ledger = CommunicationLedger()
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), ledger)

    rng = np.random.default_rng()
    rng.bit_generator.state = selection
    chosen = sorted(int(n) for n in rng.choice(4, size=2, replace=False))
    assert list(result.senders) == chosen
    generator = torch.Generator()
    generator.set_state(order)
    x_all, y_all = fed.data.train_x.double(), fed.data.train_y
    for cid in chosen:  # the local phase draws every client's order in the works' order
        idx = fed.clients[cid].train_idx
        plain_sgd(models[cid], permuted(x_all[idx], y_all[idx], batch, 1, generator), hand_ce, lr)
    x_pub = fed.proxy.double()  # data.proxy: the held-out slice by default
    with torch.no_grad():
        soft = torch.stack([torch.softmax(models[cid](x_pub) / temp, dim=1) for cid in chosen])
    block = start_c[chosen][:, chosen]
    mass = block.sum(1, keepdim=True)
    a = hand_coefficient_step(block / mass, soft, coef_lr, lam, rho)
    want_c = start_c.clone()
    for i, n in enumerate(chosen):
        for j, m in enumerate(chosen):
            want_c[n, m] = a[i, j] * mass[i, 0]
    assert torch.allclose(algo.coefficients, want_c, atol=1e-6)  # soft predictions in float32
    assert float((a - block / mass).abs().max()) > 1e-3  # C moved
    targets = torch.einsum("nm,mpc->npc", a, soft)
    for k, cid in enumerate(chosen):
        batches = permuted(x_pub, targets[k], batch, 1, generator)
        plain_sgd(models[cid], batches, lambda z, t: lam * hand_kl(z, t, temp), lr)
    for cid in range(4):
        for key, value in models[cid].state_dict().items():
            torch.testing.assert_close(fed.clients[cid].model.state_dict()[key].double(), value, atol=ATOL, rtol=0,
                                       msg=lambda m, key=key, cid=cid: f"client {cid} {key}: {m}")


def test_ledger_records_soft_predictions_both_ways() -> None:
    """Per selected client: up ``s_n``, then down ``t_n``, each ``public_size x classes`` float32; no model moves."""
    fed = public_federation()
    algo = KTpFL(client_fraction=0.5, local_epochs=1)
    algo.setup(fed)
    ledger = CommunicationLedger()
    ledger.start_round()
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), ledger)
    mb = len(fed.proxy) * fed.num_classes * 4 / MB
    want = [(cid, -1) for cid in result.senders] + [(-1, cid) for cid in result.senders]
    assert [(s, t) for s, t, _ in ledger.transfers] == want
    assert all(m == pytest.approx(mb, rel=1e-12) for _, _, m in ledger.transfers)
    assert ledger.round_sent_mb == pytest.approx(2 * mb) and ledger.round_returned_mb == pytest.approx(2 * mb)


# -- the shipped config and resume ------------------------------------------------------------------------------


def test_shipped_config_learns_in_three_rounds(tmp_path: Path) -> None:
    """``lit-fl fit --config experiments/mnist5k/ktpfl.yaml --rounds 3``: the clients' mean accuracy (``global_acc``)
    is above chance (10 classes) and rises every round."""
    result = run_cli("fit", "--config", ROOT / "experiments" / "mnist5k" / "ktpfl.yaml", "--rounds", "3",
                     "--logger.wandb", "false", "--logger.progress", "false", "--run_dir", tmp_path, "--name", "k")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "k" / "metrics.csv")
    acc = [row["global_acc"] for row in rows]
    assert [row["round"] for row in rows] == [1, 2, 3]
    assert acc[0] > 0.1 and acc[0] < acc[1] < acc[2], acc
    assert all(row["num_participants"] == 3 for row in rows)  # 30% of 10 clients
    assert json.loads((tmp_path / "k" / "summary.json").read_text())["status"] == "completed"


def test_resume_equals_an_uninterrupted_run_coefficients_included(tmp_path: Path) -> None:
    """Stopped after 2 of 3 rounds and resumed: metrics, models and C equal an uninterrupted 3-round run exactly."""
    config = tiny_config("KTpFL", rounds=3)
    config["algorithm"]["init_args"] = {"client_fraction": 0.5, "local_epochs": 1, "lr": 0.05}
    config["data"]["server_fraction"] = 0.2
    cfg = write_config(tmp_path / "cfg.yaml", config)
    full, expected, full_state = assert_resumed_run_equals_uninterrupted(cfg, tmp_path / "runs")
    c = full_state["algorithm"]["coefficients"]
    assert float((c - 0.25).abs().max()) > 1e-4  # C moved from uniform
