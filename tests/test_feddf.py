"""FedDF (Lin et al., NeurIPS 2020, arXiv 2006.07242), Algorithm 1 with one server model per architecture: the
server step of one round replayed by hand in float64 (per-architecture sample-weighted average, then the ensemble
distillation steps: averaged teacher logits, KL, gradient clipping, Adam on a cosine), the ensemble metric
``server_acc/global`` on a hand case, the ledger's traffic, a CLI run of the shipped config and an exact resume.

The replays write every formula out here; nothing of lit-fl's but the round under test computes the expectations."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from test_resume import assert_resumed_run_equals_uninterrupted
from torch import Tensor, nn

import lit_fl.data.proxy as proxy_module
from lit_fl.algorithms import FedDF
from lit_fl.algorithms.feddf import GLOBAL
from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data import load_dataset
from lit_fl.data.dataset import ImageDataset
from lit_fl.federation.builder import build_federation
from lit_fl.federation.evaluation import Evaluator
from lit_fl.federation.ledger import MB, CommunicationLedger
from lit_fl.federation.state import Client, Federation
from lit_fl.steps import StepRunner
from lit_fl.steps.ensemble_distillation import ServerEnsemble
from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]
POOL = ("cnn_bn_4_8", "cnn_bn_8")  # two architectures with BatchNorm (running statistics in the average)
OPTIONS = {"num_classes": 4, "input_shape": (1, 8, 8), "num_train": 400, "num_test": 100}

pytestmark = pytest.mark.usefixtures("one_thread")


def federation(num_clients: int = 6, server_fraction: float = 0.2, proxy: dict | None = None) -> Federation:
    data = DataConfig(dataset="synthetic", num_clients=num_clients, server_fraction=server_fraction,
                      options=dict(OPTIONS), proxy=proxy or {})  # type: ignore[arg-type]
    return build_federation(load_dataset("synthetic", seed=0, **OPTIONS), data, ModelsConfig(pool=list(POOL)), 0)


def cpu() -> StepRunner:
    return StepRunner(accelerator="cpu")


# -- (a) one round's server step by hand ----------------------------------------------------------------------


def test_server_step_is_per_architecture_average_then_ensemble_distillation_by_hand(monkeypatch) -> None:
    """4 of 6 clients of two BatchNorm CNNs; then, in float64 from the clients' trained models: each architecture's
    ``x = sum_k n_k x_k / sum_k n_k`` (buffers too), and 4 steps on proxy batches of 16 (the permutation drawn from
    the round's data-order stream) of ``L = KL(softmax(mean_k f(x_k, d) / T) || softmax(f(x, d) / T))`` with every
    received model a teacher (eval mode) and the student in train mode, ``g <- g min(1, c / (||g|| + 1e-6))`` per
    student, Adam (0.9, 0.999, 1e-8) at ``lr (1 + cos(pi j / 4)) / 2`` at step j."""
    lr, temperature, clip, num_steps, batch = 0.01, 2.0, 0.5, 4, 16
    fed = federation()
    algo = FedDF(client_fraction=4 / 6, distill_steps=num_steps, distill_batch_size=batch, distill_lr=lr,
                 temperature=temperature, clip_norm=clip, local_epochs=1, batch_size=32, lr=0.05)
    algo.setup(fed)
    seen: dict = {}
    original = proxy_module.proxy_batches

    def recording(inputs: Tensor, batch_size: int, steps: int, generator: torch.Generator):
        seen["order"] = generator.get_state()
        seen["students"] = {a: copy.deepcopy(fed.server[a]) for a in algo.archs}
        return original(inputs, batch_size, steps, generator)

    monkeypatch.setattr(proxy_module, "proxy_batches", recording)
    result = algo.run_round(1, fed, cpu(), CommunicationLedger())
    senders = list(result.senders)
    assert len(senders) == 4 and {fed.clients[c].arch for c in senders} == set(POOL)

    teachers = [copy.deepcopy(fed.clients[c].model).double() for c in senders]
    students = {}
    distinct_counts: list[bool] = []
    for arch in POOL:
        members = [c for c in senders if fed.clients[c].arch == arch]
        counts = [fed.clients[c].num_train for c in members]
        distinct_counts.append(len(set(counts)) > 1)
        states = [fed.clients[c].model.state_dict() for c in members]
        want = {}
        for key, value in states[0].items():
            if value.is_floating_point():
                want[key] = sum(n * s[key].double() for n, s in zip(counts, states)) / sum(counts)
            else:
                want[key] = value  # num_batches_tracked: the first client's
        for key, value in want.items():
            torch.testing.assert_close(seen["students"][arch].state_dict()[key].double(), value.double(), atol=1e-6,
                                       rtol=0, msg=lambda m, k=key, a=arch: f"average {a} {k}: {m}")
        student = copy.deepcopy(seen["students"][arch]).double()
        student.load_state_dict(want)
        students[arch] = student

    assert any(distinct_counts)  # somewhere the sample weights differ from uniform ones
    generator = torch.Generator()
    generator.set_state(seen["order"])
    order = torch.randperm(len(fed.proxy), generator=generator)
    proxy = fed.proxy.double()
    state = {arch: {"m": None, "v": None} for arch in POOL}
    for j in range(num_steps):
        d = proxy[order[j * batch:(j + 1) * batch]]
        for t in teachers:
            t.eval()
        with torch.no_grad():
            target = torch.softmax(sum(t(d) for t in teachers) / len(teachers) / temperature, dim=1)
        step_lr = lr * (1 + math.cos(math.pi * j / num_steps)) / 2
        for arch, student in students.items():
            student.train()
            log_q = torch.log_softmax(student(d) / temperature, dim=1)
            loss = (target * (target.log() - log_q)).sum() / len(d)
            params = list(student.parameters())
            grads = torch.autograd.grad(loss, params)
            norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
            grads = [g * min(1.0, clip / (float(norm) + 1e-6)) for g in grads]
            s = state[arch]
            if s["m"] is None:
                s["m"] = [torch.zeros_like(p) for p in params]
                s["v"] = [torch.zeros_like(p) for p in params]
            with torch.no_grad():
                for k, (p, g) in enumerate(zip(params, grads)):
                    s["m"][k] = 0.9 * s["m"][k] + 0.1 * g
                    s["v"][k] = 0.999 * s["v"][k] + 0.001 * g * g
                    m_hat = s["m"][k] / (1 - 0.9 ** (j + 1))
                    v_hat = s["v"][k] / (1 - 0.999 ** (j + 1))
                    p -= step_lr * m_hat / (v_hat.sqrt() + 1e-8)
    for arch, student in students.items():
        moved = max(float((p.detach() - q.detach().double()).abs().max())
                    for p, q in zip(student.parameters(), seen["students"][arch].parameters()))
        assert moved > 0.5 * lr  # the distillation moved the weights visibly
        for key, value in student.state_dict().items():
            got = fed.server[arch].state_dict()[key]
            if not value.is_floating_point():  # num_batches_tracked: counted, one per distillation batch
                assert int(got) == int(value) == int(seen["students"][arch].state_dict()[key]) + num_steps
                continue
            # Adam's step is ~lr per entry whatever the gradient's size, so float32 rounding of a gradient entry
            # becomes a relative error of the step: 4 steps x lr x float32's 1e-7 relative precision amplified by
            # the gradient's condition (entries ~1e-3 of the largest): 4 * 0.01 * 1e-7 * 1e3 = 4e-6
            torch.testing.assert_close(got.double(), value, atol=4e-6, rtol=0,
                                       msg=lambda m, k=key, a=arch: f"distilled {a} {k}: {m}")
    assert result.extra["distilled_archs"] == 2.0


# -- (b) the ensemble metric on a hand case --------------------------------------------------------------------


def test_server_acc_global_is_the_ensemble_of_the_server_models_by_averaged_logits() -> None:
    """Two linear server models on 1x1x2 inputs ``(a, b)``, logits ``(4a, b)`` and ``(b, a + 6)``, on the points
    (0, 5) -> 1, (5, 0) -> 0, (0, 0) -> 1, (1, 1) -> 1: the first is right on the first two (ties go to class 0),
    the second on all but (5, 0); their averaged logits ``((4a + b) / 2, (a + b + 6) / 2)`` = (2.5, 5.5), (10, 5.5),
    (0, 3), (2.5, 4) are right on all four: ``server_acc/global`` = 1 beside 0.5 and 0.75."""
    x = torch.tensor([[0.0, 5.0], [5.0, 0.0], [0.0, 0.0], [1.0, 1.0]]).reshape(4, 1, 1, 2)
    y = torch.tensor([1, 0, 1, 1])
    m1 = linear([[4.0, 0.0], [0.0, 1.0]], [0.0, 0.0])
    m2 = linear([[0.0, 1.0], [1.0, 0.0]], [0.0, 6.0])
    ens = ServerEnsemble([m1, m2])
    data = ImageDataset("hand", x, y, x, y, num_classes=2)
    client = Client(0, "lin", copy.deepcopy(m1), torch.arange(4), torch.empty(0, dtype=torch.long),
                    torch.tensor([0.25, 0.75]))
    fed = Federation([client], data, seed=0)
    fed.server = {"m1": m1, "m2": m2, GLOBAL: ens}
    evaluator = Evaluator()
    metrics = evaluator.evaluate(fed)
    assert (metrics["server_acc/m1"], metrics["server_acc/m2"], metrics["server_acc/global"]) == (0.5, 0.75, 1.0)
    with torch.no_grad():
        torch.testing.assert_close(ens(x), (m1(x) + m2(x)) / 2, atol=0, rtol=0)
        m2[1].bias.copy_(torch.tensor([0.0, 0.0]))  # a member changes: the ensemble is evaluated anew
    # logits (b, a): (5, 0), (0, 5), ties, ties: right nowhere; ensemble ((4a + b) / 2, (a + b) / 2) = (2.5, 2.5) -> 0
    # wrong, (10, 2.5) right, (0, 0) -> 0 wrong, (2.5, 1) wrong: 0.25
    metrics = evaluator.evaluate(fed)
    assert (metrics["server_acc/m2"], metrics["server_acc/global"]) == (0.0, 0.25)
    assert ens.state_dict() == {}  # the members are checkpointed under their own names


def linear(weight: list[list[float]], bias: list[float]) -> nn.Module:
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 2))
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor(weight))
        model[1].bias.copy_(torch.tensor(bias))
    return model


# -- (c) the ledger ---------------------------------------------------------------------------------------------


def test_ledger_records_the_architecture_model_down_and_the_trained_model_up() -> None:
    """Per sampled client one transfer server -> client of its architecture's server model and one back of its
    trained model (parameters and buffers): FedAvg's traffic, nothing for the distillation (the proxy is the
    server's)."""
    fed = federation()
    algo = FedDF(client_fraction=0.5, distill_steps=2, distill_batch_size=16, local_epochs=1)
    algo.setup(fed)
    ledger = CommunicationLedger()
    ledger.start_round()
    result = algo.run_round(1, fed, cpu(), ledger)
    assert len(result.senders) == 3

    def mb(arch: str) -> float:
        m = fed.server[arch]
        return sum(t.numel() * t.element_size() for t in (*m.parameters(), *m.buffers())) / MB

    expected = [(-1, c, mb(fed.clients[c].arch)) for c in result.senders]
    expected += [(c, -1, mb(fed.clients[c].arch)) for c in result.senders]
    assert [(s, t) for s, t, _ in ledger.transfers] == [(s, t) for s, t, _ in expected]
    for (_, _, got), (_, _, want) in zip(ledger.transfers, expected):
        assert got == pytest.approx(want, rel=1e-12)
    assert ledger.round_sent_mb == pytest.approx(ledger.round_returned_mb, rel=1e-12)


# -- (d) the shipped config ------------------------------------------------------------------------------------


def test_shipped_config_learns_in_three_rounds(tmp_path: Path) -> None:
    """``lit-fl fit --config experiments/mnist5k/feddf.yaml --rounds 3`` with 1 local epoch and 20 distillation steps
    (the shipped 10 epochs and 100 steps take minutes): the ensemble of the server models (``server_acc/global``) is
    far above chance (10 classes) and rises every round."""
    result = run_cli("fit", "--config", ROOT / "experiments" / "mnist5k" / "feddf.yaml", "--rounds", "3",
                     "--algorithm.init_args.local_epochs", "1", "--algorithm.init_args.distill_steps", "20",
                     "--logger.wandb", "false", "--logger.progress", "false", "--run_dir", tmp_path, "--name", "f")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "f" / "metrics.csv")
    acc = [row["server_acc/global"] for row in rows]
    assert [row["round"] for row in rows] == [1, 2, 3]
    assert acc[0] > 0.3 and acc[0] < acc[1] < acc[2], acc
    assert all(f"server_acc/{arch}" in rows[0] for arch in ("cnn_bn_32_64", "cnn_bn_16_32", "cnn_bn_8_16"))
    assert all(row["num_participants"] == 3 for row in rows)  # 30% of 10 clients
    assert json.loads((tmp_path / "f" / "summary.json").read_text())["status"] == "completed"


# -- (e) resume -------------------------------------------------------------------------------------------------


def test_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """Stopped after 2 of 3 rounds and resumed: metrics, clients, every server model and the streams equal an
    uninterrupted 3-round run exactly."""
    config = tiny_config("FedDF", rounds=3)
    config["algorithm"]["init_args"] = {"client_fraction": 0.5, "local_epochs": 1, "distill_steps": 5,
                                        "distill_batch_size": 16}
    config["models"]["pool"] = list(POOL)
    config["data"]["server_fraction"] = 0.2
    config["data"]["proxy"] = {"size": 50}
    cfg = write_config(tmp_path / "cfg.yaml", config)
    full, expected, full_state = assert_resumed_run_equals_uninterrupted(cfg, tmp_path / "runs")
    assert set(full_state["federation"]["server"]) == {*POOL, GLOBAL}
    assert all(not math.isnan(r["kd_loss"]) for r in expected)


def test_the_clipped_cosine_adam_is_torch_adam_with_clipping_and_the_cosine_in_float64() -> None:
    """The server's Adam runs torch's fused kernel (it reads nothing back from the device per parameter and step);
    in float64 it equals torch's reference Adam (foreach) with the gradient clipped per group and the cosine rate
    applied by hand, step for step: the same math, only float32 rounding may differ."""
    import copy
    import math

    from lit_fl.steps.ensemble_distillation import ClippedCosineAdam

    torch.manual_seed(0)
    students = [torch.nn.Linear(6, 3).double(), torch.nn.Linear(6, 3).double()]
    reference = copy.deepcopy(students)
    fused = ClippedCosineAdam([{"params": list(s.parameters()), "lr": 0.05} for s in students], 0.1, 4)
    plain = torch.optim.Adam([{"params": list(s.parameters()), "lr": 0.05} for s in reference], foreach=True)
    assert fused.defaults["fused"] and not plain.defaults["fused"]
    x = torch.randn(8, 6, dtype=torch.float64)
    for step in range(4):
        for models, optimizer in ((students, fused), (reference, plain)):
            sum(m(x).pow(2).sum() for m in models).backward()
            if optimizer is plain:
                for group in plain.param_groups:
                    torch.nn.utils.clip_grad_norm_(group["params"], 0.1)
                    group["lr"] = 0.05 * (1 + math.cos(math.pi * step / 4)) / 2
            optimizer.step()
            optimizer.zero_grad()
    for a, b in zip(students, reference):
        for p, q in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-13, atol=0.0)  # float64: ~100 ulps over 4 steps of ~30 ops
