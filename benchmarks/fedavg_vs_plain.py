"""Full-participation FedAvg, lit-fl end to end against a plain-PyTorch loop doing the same work, in one process.

Both sides start from copies of one federation (mnist5k, ``cnn_8_16``, Dirichlet 0.5, N clients). Per round
every client trains one local epoch of WSM (batch 64, SGD 0.01/0.9/5e-4), the models are averaged weighted by
train-set size and every client receives the average; then the round is evaluated: global accuracy on the test
set and each client's accuracy on its own validation split.

* lit-fl runs what ``lit-fl fit`` runs: ``RoundLoop.run_round`` (selection, transport and ledger, the
  algorithm, evaluation), a metrics.csv row and a checkpoint every round.
* The plain loop is written out here with nothing from lit_fl: it knows every client holds the average, so it
  evaluates that one model on the test set and on all validation samples.

Rounds alternate between the sides so that machine noise hits both alike. Each repeat prints the end-to-end
ratio (lit-fl / plain) and the training and evaluation seconds per round of each side; the summary gives min and
median over repeats.

    python benchmarks/fedavg_vs_plain.py [--clients 10 100] [--rounds 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lit_fl.algorithms import DecentralizedFedAvg
from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data import load_dataset
from lit_fl.federation.builder import build_federation
from lit_fl.federation.callbacks import MetricsFile
from lit_fl.federation.checkpoint import save_checkpoint
from lit_fl.federation.evaluation import Evaluator
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.loop import RoundLoop
from lit_fl.federation.state import Federation
from lit_fl.steps import StepRunner
from lit_fl.tracking import MetricsCSV


# ---- the plain-PyTorch side -----------------------------------------------------------------------------
@dataclass
class PlainClient:
    model: torch.nn.Module
    train_idx: torch.Tensor
    val_idx: torch.Tensor
    beta: torch.Tensor


def plain_wsm(z: torch.Tensor, y: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    return (torch.logsumexp(z + torch.log(beta), dim=1) - z.gather(1, y[:, None]).squeeze(1)).mean()


def plain_train(clients: list[PlainClient], x: torch.Tensor, y: torch.Tensor, g: torch.Generator) -> None:
    for c in clients:
        opt = torch.optim.SGD(c.model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        order = c.train_idx[torch.randperm(len(c.train_idx), generator=g)]
        for s in range(0, len(order), 64):
            b = order[s : s + 64]
            loss = plain_wsm(c.model(x[b]), y[b], c.beta)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    states = [c.model.state_dict() for c in clients]
    weights = torch.tensor([float(len(c.train_idx)) for c in clients], dtype=torch.float64)
    weights /= weights.sum()
    average = {k: sum(w * s[k].double() for w, s in zip(weights, states)).to(states[0][k].dtype) for k in states[0]}
    for c in clients:
        c.model.load_state_dict(average)


@torch.inference_mode()
def plain_evaluate(clients: list[PlainClient], fed: Federation) -> tuple[float, float]:
    model, d = clients[0].model.eval(), fed.data  # every client holds the average
    test = torch.cat([model(d.test_x[i : i + 128]).argmax(1) for i in range(0, len(d.test_x), 128)]) == d.test_y
    idx = torch.cat([c.val_idx for c in clients])
    vx, vy = d.train_x[idx], d.train_y[idx]
    val = torch.cat([model(vx[i : i + 128]).argmax(1) for i in range(0, len(vx), 128)]) == vy
    model.train()
    return float(test.float().mean()), float(val.float().mean())


# ---- the benchmark --------------------------------------------------------------------------------------
@dataclass
class Times:
    train: list[float] = field(default_factory=list)
    evaluate: list[float] = field(default_factory=list)
    other: list[float] = field(default_factory=list)  # lit-fl: metrics.csv row + checkpoint

    def total(self) -> float:
        return sum(self.train) + sum(self.evaluate) + sum(self.other)


def one_repeat(num_clients: int, rounds: int, workdir: Path) -> tuple[Times, Times]:
    data = DataConfig(dataset="mnist5k", num_clients=num_clients, partition="dirichlet", beta=0.5)
    fed = build_federation(load_dataset("mnist5k"), data, ModelsConfig(pool=["cnn_8_16"]), seed=0)
    plain = [PlainClient(copy.deepcopy(c.model), c.train_idx, c.val_idx, c.class_proportions) for c in fed.clients]
    algorithm = DecentralizedFedAvg(sender_fraction=1.0)
    algorithm.setup(fed)
    runner, ledger, evaluator = StepRunner(accelerator="cpu"), CommunicationLedger(), Evaluator()
    csv = MetricsCSV(workdir / f"metrics-{num_clients}.csv")
    ckpt = workdir / f"last-{num_clients}.ckpt"
    loop = RoundLoop(fed, algorithm, runner, evaluator, ledger, rounds, callbacks=[MetricsFile(csv)])
    lit, ref = Times(), Times()
    g = torch.Generator().manual_seed(0)
    for round_ in range(1, rounds + 1):
        start = time.perf_counter()
        row = loop.run_round(round_)
        after_sinks = time.perf_counter()
        save_checkpoint(ckpt, fed, algorithm, ledger)
        assert row is not None
        lit.train.append(row["round_s"])
        lit.evaluate.append(row["eval_s"])
        lit.other.append(after_sinks - start - row["round_s"] - row["eval_s"] + time.perf_counter() - after_sinks)

        start = time.perf_counter()
        plain_train(plain, fed.data.train_x, fed.data.train_y, g)
        ref.train.append(time.perf_counter() - start)
        start = time.perf_counter()
        plain_evaluate(plain, fed)
        ref.evaluate.append(time.perf_counter() - start)
    return lit, ref


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for num_clients in args.clients:
            ratios = []
            for repeat in range(1, args.repeats + 1):
                lit, ref = one_repeat(num_clients, args.rounds, Path(tmp))
                ratios.append(lit.total() / ref.total())
                print(
                    f"fedavg {num_clients:>4} clients, repeat {repeat}: end-to-end ratio {ratios[-1]:.3f} | s/round "
                    f"lit-fl train {statistics.median(lit.train):.3f} eval {statistics.median(lit.evaluate):.3f} "
                    f"csv+ckpt {statistics.median(lit.other):.3f} | plain train {statistics.median(ref.train):.3f} "
                    f"eval {statistics.median(ref.evaluate):.3f}",
                    flush=True,
                )
            print(f"fedavg {num_clients:>4} clients: end-to-end ratio lit-fl / plain  min {min(ratios):.3f}  "
                  f"median {statistics.median(ratios):.3f}  ({args.repeats} repeats x {args.rounds} rounds)",
                  flush=True)


if __name__ == "__main__":
    main()
