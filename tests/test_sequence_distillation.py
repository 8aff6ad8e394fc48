"""The proxy-data distillation baselines on token sequences: per-token targets and losses with the positions whose
input is PAD left out, checked by hand on a padded batch (the shared target-distillation step, its fused form, and
FedDF's ensemble distillation), and two rounds of each enabled method on the StackOverflow fixture in FedJAX's
format (the public data: a held-out slice of the users' sequences)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import run_cli, write_config
from fedjax_files import stackoverflow_files

from lit_fl.steps.ensemble_distillation import EnsembleDistillation, kl_to_teacher
from lit_fl.steps.noise_distillation import batched_soft_cross_entropy
from lit_fl.steps.target_distillation import input_token_weights, target_loss
from lit_fl.tracking import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")
#: float64 unit roundoff (1.1e-16) amplified by a few hundred operations, far below any masking error (>= 1e-2)
RTOL = 1e-12
#: float32 unit roundoff (6e-8) amplified by the few operations of a softmax cross-entropy: NoiseDistillation's loss
#: (FedKEMF's fusion) runs in float32 whatever the inputs' precision
RTOL32 = 1e-6

#: inputs BOS word PAD / BOS PAD PAD: the distilled positions are (0, 0), (0, 1) and (1, 0)
X = torch.tensor([[1, 5, 0], [1, 0, 0]])
KEPT = [(0, 0), (0, 1), (1, 0)]
#: student and target logits over a vocabulary of 3; the PAD positions hold values that would dominate any loss
Z = torch.tensor([[[0.5, -1.0, 2.0], [1.5, 0.0, -0.5], [90.0, -90.0, 40.0]],
                  [[-0.3, 0.8, 0.1], [70.0, 0.0, -70.0], [-60.0, 60.0, 0.0]]], dtype=torch.float64)
TARGET = torch.tensor([[[1.0, 0.0, -1.0], [0.2, 0.4, 0.6], [-80.0, 80.0, 0.0]],
                       [[2.0, -2.0, 0.0], [0.0, 50.0, -50.0], [33.0, 0.0, 0.0]]], dtype=torch.float64)


def _softmax(v: list[float], t: float = 1.0) -> list[float]:
    e = [math.exp(a / t) for a in v]
    return [a / sum(e) for a in e]


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q))


def _rows(logits: torch.Tensor) -> list[list[float]]:
    return [logits[b, t].tolist() for b, t in KEPT]


@pytest.mark.parametrize("loss", ["l1", "mse", "kl", "ce"])
def test_target_loss_per_token_by_hand(loss: str) -> None:
    """Each loss of the target-distillation step over the 3 non-PAD positions only, at T = 2 for kl/ce (logit
    targets, softmax(t / T)) and T = 1 for the logit distances."""
    z, t = _rows(Z), _rows(TARGET)
    if loss == "l1":
        expected = sum(abs(a - b) for zr, tr in zip(z, t) for a, b in zip(zr, tr)) / 9
    elif loss == "mse":
        expected = sum((a - b) ** 2 for zr, tr in zip(z, t) for a, b in zip(zr, tr)) / 9
    else:
        temp = 2.0
        terms = [(_softmax(tr, temp), _softmax(zr, temp)) for zr, tr in zip(z, t)]
        per_row = [_kl(p, q) if loss == "kl" else -sum(a * math.log(b) for a, b in zip(p, q)) for p, q in terms]
        expected = temp * temp * sum(per_row) / 3
    temperature = 2.0 if loss in ("kl", "ce") else 1.0
    got = target_loss(Z, TARGET, loss, "logits", temperature, X)
    assert got.item() == pytest.approx(expected, rel=RTOL)


def test_target_loss_on_probability_targets_per_token() -> None:
    """DS-FL's and KT-pFL's setting: targets are soft labels per position (PAD rows garbage, never read)."""
    probs = torch.softmax(TARGET, dim=-1)
    expected = sum(_kl(_softmax(tr), _softmax(zr)) for zr, tr in zip(_rows(Z), _rows(TARGET))) / 3
    assert target_loss(Z, probs, "kl", "probabilities", 1.0, X).item() == pytest.approx(expected, rel=RTOL)


def test_fused_digest_weights_each_client_by_its_own_tokens() -> None:
    """The fused ce digest of two clients, client 1's second row padding (weight 0): each client's loss equals the
    step's own loss on its real rows (client 0: both rows, 3 positions; client 1: row 0 only, its 3 positions)."""
    x = torch.stack([X, torch.tensor([[1, 4, 6], [1, 5, 0]])])
    z = torch.stack([Z, Z.flip(0)])
    t = torch.stack([TARGET, TARGET.flip(2)])
    weight = torch.tensor([[0.5, 0.5], [1.0, 0.0]], dtype=torch.float64)
    flat = input_token_weights(x, weight)
    got = batched_soft_cross_entropy(t.flatten(1, 2), z.flatten(1, 2), flat, 2.0)
    expected = [target_loss(z[0], t[0], "ce", "logits", 2.0, x[0]),
                target_loss(z[1][:1], t[1][:1], "ce", "logits", 2.0, x[1][:1])]
    assert flat[1].tolist() == pytest.approx([1 / 3] * 3 + [0.0] * 3, rel=RTOL)
    assert got.tolist() == pytest.approx([e.item() for e in expected], rel=RTOL)


class Fixed(torch.nn.Module):
    """A language model whose logits are given (``logits[: len(x)]``) plus a trainable shift."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits
        self.shift = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits[: len(x)] + self.shift


def test_feddf_ensemble_distillation_per_token_by_hand() -> None:
    """FedDF's loss on a padded proxy batch: the KL from the mean of the teachers' logits, per non-PAD position,
    averaged over those positions (T = 2, no T^2 factor)."""
    teachers = [Fixed(TARGET), Fixed(2 * TARGET - 1)]
    ensemble = (TARGET + 2 * TARGET - 1) / 2
    expected = sum(_kl(_softmax(tr, 2.0), _softmax(zr, 2.0)) for zr, tr in zip(_rows(Z), _rows(ensemble))) / 3
    assert kl_to_teacher(Z, ensemble, 2.0, X).item() == pytest.approx(expected, rel=RTOL)
    step = EnsembleDistillation([Fixed(Z)], teachers, temperature=2.0, clip_norm=None)
    assert step.training_step(X, 0).item() == pytest.approx(expected, rel=RTOL)


def test_fedkemf_fusion_per_token_by_hand() -> None:
    """FedKEMF's server step on public sequences: sum_i w_i CE(softmax(teacher_i / T), student / T) T^2 per non-PAD
    position (weights 1:3, T = 2), averaged over those positions."""
    from lit_fl.steps.noise_distillation import NoiseDistillation

    teachers = [Fixed(TARGET), Fixed(-TARGET)]
    step = NoiseDistillation(Fixed(Z), teachers, [1.0, 3.0], bn_stats="running", student_running_stats="update",
                             temperature=2.0)
    expected = 0.0
    for zr, t1, t2 in zip(_rows(Z), _rows(TARGET), _rows(-TARGET)):
        q = _softmax(zr, 2.0)
        for w, tr in ((0.25, t1), (0.75, t2)):
            expected -= w * sum(p * math.log(b) for p, b in zip(_softmax(tr, 2.0), q))
    expected *= 4.0 / 3
    assert step.training_step((X, torch.zeros(2)), 0).item() == pytest.approx(expected, rel=RTOL32)


def test_ktpfl_coefficient_loss_per_token_by_hand() -> None:
    """KT-pFL's coefficient objective on public sequences: lambda sum_n mean over the non-PAD positions of
    KL(t_n || s_n), t_n = sum_m c_nm s_m, plus rho sum_n ||c_n - 1/K||^2 (lambda 0.5, rho 0.7)."""
    from lit_fl.algorithms.ktpfl import coefficient_loss, distilled_positions

    soft = torch.stack([torch.softmax(Z, dim=-1), torch.softmax(TARGET / 3, dim=-1)])
    c = torch.tensor([[0.5, 0.5], [0.25, 0.75]], dtype=torch.float64)
    rows = [[_softmax(r) for r in _rows(Z)], [_softmax(r, 3.0) for r in _rows(TARGET)]]
    kl = 0.0
    for n in range(2):
        for j in range(3):
            t = [c[n, 0].item() * a + c[n, 1].item() * b for a, b in zip(rows[0][j], rows[1][j])]
            kl += _kl(t, rows[n][j]) / 3
    expected = 0.5 * kl + 0.7 * ((c - 0.5) ** 2).sum().item()
    got = coefficient_loss(c, distilled_positions(soft, X), 0.5, 0.7)
    assert got.item() == pytest.approx(expected, rel=RTOL)


# -- lit-fl fit on the StackOverflow fixture ---------------------------------------------------------------------

POOL = ["lstm_6_5_1", "lstm_8_6_2"]
LOCAL = {"client_fraction": 0.7, "local_epochs": 1, "batch_size": 2}
METHODS = {
    "FedDF": {**LOCAL, "distill_steps": 2, "distill_batch_size": 2},
    "FedMD": {**LOCAL, "digest_epochs": 1},
    "DSFL": {**LOCAL, "distill_epochs": 1, "server_epochs": 1, "server_batch_size": 2},
    "KTpFL": {**LOCAL, "distill_epochs": 1},
    "FDmeta": {**LOCAL, "distill_epochs": 1, "server_epochs": 1, "server_batch_size": 2},
    "FedKEMF": {**LOCAL, "server_epochs": 1, "server_batch_size": 2},
}


def _config(root: Path, algorithm: str, args: dict[str, Any], pool: list[str]) -> dict[str, Any]:
    return {"seed": 0, "rounds": 2, "algorithm": {"class_path": f"lit_fl.algorithms.{algorithm}", "init_args": args},
            "data": {"dataset": "stackoverflow", "root": str(root), "partition": "natural", "num_clients": 3,
                     "server_fraction": 0.3, "options": {"vocab_size": 8, "max_length": 5}},
            "models": {"pool": pool}, "logger": {"wandb": False, "progress": False}, "run_dir": str(root / "runs")}


@pytest.mark.parametrize(("algorithm", "fuse"), [*((name, "auto") for name in METHODS), ("FDmeta", "on")])
def test_distillation_baseline_fits_two_rounds_on_stackoverflow(tmp_path: Path, algorithm: str, fuse: str) -> None:
    """Two rounds on a heterogeneous pool of LSTMs; FDmeta also with its digest fused (every client one LSTM)."""
    stackoverflow_files(tmp_path)
    args, pool = METHODS[algorithm], POOL
    if fuse == "on":
        args, pool = {**args, "client_fraction": 1.0}, POOL[:1]
    path = write_config(tmp_path / "c.yaml", _config(tmp_path, algorithm, args, pool))
    result = run_cli("fit", "--config", path, "--name", "run", "--trainer.fuse", fuse)
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "runs" / "run" / "metrics.csv")
    assert [int(r["round"]) for r in rows] == [1, 2]
    for row in rows:
        assert 0.0 <= row["global_acc"] <= 1.0 and math.isfinite(row["train_loss"])
        distilled = [v for k, v in row.items() if k.endswith(("kd_loss", "digest_loss", "distill_loss"))]
        assert distilled and all(math.isfinite(v) and v >= 0.0 for v in distilled), row
        assert all(0.0 <= v <= 1.0 for k, v in row.items() if k.startswith("server_acc/"))
