"""The client-work contract (:mod:`lit_fl.steps.phase`): every built-in method's client phases go through the one
phase runner, and under ``trainer.fuse on`` every one of them runs fused; fused and unfused rounds give the same
weights and losses for every method, uneven client sizes included.

The equivalence runs in float64 (``torch.set_default_dtype``: data, models and losses): fused and unfused phases
sum in other orders, which float64 rounds about 1e-16 relative per operation; :data:`RTOL` leaves a factor 10^6 for
amplification over three rounds and stays 10^3 below the smallest float32 effect, so any difference in the math
fails (see ``test_fusion``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import TINY_OPTIONS

from lit_fl.algorithms import (
    DFML,
    DSFL,
    SCAFFOLD,
    UAPDFL,
    Combo,
    CriticalFL,
    DecentralizedFedAvg,
    DecentralizedFedProx,
    DecentralizedFML,
    DefKT,
    DFedAvgM,
    DisPFL,
    FDmeta,
    FedMD,
    FedNTD,
    FedORION,
    FedPer,
    FedRolex,
    HeteroFL,
    KTpFL,
    Local,
    MergedCodist,
    PeriodicCodist,
    ServerFedAvg,
    ServerFedProx,
)
from lit_fl.algorithms.base import Algorithm
from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data import load_dataset
from lit_fl.federation.builder import build_federation
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.steps import StepRunner, phase
from lit_fl.steps.gradient import GradientWork
from lit_fl.steps.predict import PredictWork

#: float64's unit roundoff (1.1e-16) x 10^6 of amplification (module docstring)
RTOL = 1e-10
ROUNDS = 3
CODIST = {"small_arch": "cnn_4_8", "large_arch": "cnn_8", "large_clients": [0, 2, 4], "clients_per_round": 3,
          "distill_steps": 2, "distill_batch_size": 16, "batch_size": 16}

#: every built-in method whose clients train, in a setting where each of its client phases has two clients of a
#: kind at least (so that every phase can fuse)
METHODS: dict[str, Callable[[], Algorithm]] = {
    "fedavg": lambda: DecentralizedFedAvg(sender_fraction=1.0, batch_size=16),
    "fedprox": lambda: DecentralizedFedProx(mu=1.0, sender_fraction=1.0, batch_size=16),
    "dfml": lambda: DFML(sender_fraction=1.0, batch_size=16),
    "dfml_noise": lambda: DFML(sender_fraction=1.0, batch_size=16, noise_batches=2, noise_batch_size=8),
    "heterofl": lambda: HeteroFL(sender_fraction=1.0, batch_size=16),
    "fedrolex": lambda: FedRolex(sender_fraction=1.0, batch_size=16),
    "fml": lambda: DecentralizedFML(sender_fraction=1.0, batch_size=16),
    "defkt": lambda: DefKT(sender_fraction=0.5, batch_size=16),
    "combo": lambda: Combo(sender_fraction=0.5, batch_size=16),
    "local": lambda: Local(batch_size=16),
    "fedper": lambda: FedPer(num_peers=2, batch_size=16),
    "uapdfl": lambda: UAPDFL(num_peers=2, batch_size=16),
    "dfedavgm": lambda: DFedAvgM(num_peers=2, batch_size=16),
    "criticalfl": lambda: CriticalFL(num_peers=2, batch_size=16),
    "fedorion": lambda: FedORION(client_fraction=1.0, local_epochs=2, batch_size=16, server_epochs=1,
                                 noise_batch_size=8),
    "fedorion_no_dml": lambda: FedORION(client_fraction=1.0, no_dml=[0, 2, 4], local_epochs=1, batch_size=16,
                                        server_epochs=1, noise_batch_size=8),
    "periodic_codist": lambda: PeriodicCodist(period=2, **CODIST),
    "merged_codist": lambda: MergedCodist(**CODIST),
    "server_fedavg": lambda: ServerFedAvg(client_fraction=1.0, local_epochs=1, batch_size=16),
    "server_fedprox": lambda: ServerFedProx(mu=1.0, client_fraction=1.0, local_epochs=1, batch_size=16),
    "fedntd": lambda: FedNTD(tau=2.0, beta=0.7, client_fraction=1.0, local_epochs=1, batch_size=16),
    "scaffold": lambda: SCAFFOLD(client_fraction=1.0, local_epochs=2, weight_decay=5e-4, batch_size=16),
    "dispfl": lambda: DisPFL(num_peers=2, density=0.5, weight_decay=5e-4, batch_size=16),
    "fdmeta": lambda: FDmeta(client_fraction=1.0, public_size=70, local_epochs=1, server_epochs=1, temperature=2.0,
                             batch_size=16, server_batch_size=16),  # 70 public samples: a short last digest batch
    # the public-data methods: their clients' scores on the public data are a predict phase (fused); their digests
    # (L1 or KL towards targets, :data:`UNFUSED_DIGEST`) run client by client
    "fedmd": lambda: FedMD(client_fraction=1.0, public_size=40, local_epochs=1, batch_size=16),
    "dsfl": lambda: DSFL(client_fraction=1.0, public_size=40, local_epochs=1, distill_epochs=1, server_epochs=1,
                         batch_size=16, server_batch_size=16),
    "ktpfl": lambda: KTpFL(client_fraction=1.0, public_size=40, local_epochs=1, batch_size=16),
}
RUN_GROUP = phase._run_group
COMPUTE = {kind: kind.compute for kind in (PredictWork, GradientWork)}
POOLS = {"heterofl": ("cnn_4_8", "cnn_8_16"), "fedrolex": ("cnn_4_8", "cnn_8_16"), "fdmeta": ("cnn_4_8", "cnn_8_16"),
         "fedmd": ("cnn_4_8", "cnn_8_16"), "dsfl": ("cnn_4_8", "cnn_8_16"), "ktpfl": ("cnn_4_8", "cnn_8_16")}
#: the methods whose digest step does not fuse (TargetDistillation fuses ``ce`` on logits only): only their other
#: phases must fuse
UNFUSED_DIGEST = ("fedmd", "dsfl", "ktpfl")
#: the methods that read public (proxy) data: a held-out fifth of the training set
PUBLIC = ("periodic_codist", "merged_codist", "fdmeta", "fedmd", "dsfl", "ktpfl")


#: float64 everywhere, PyTorch's own CPU convolutions on both sides (as a fused phase uses on a CPU)
pytestmark = pytest.mark.usefixtures("float64_native")


def federation(name: str) -> Federation:
    """Six clients of uneven sizes (Dirichlet(0.5)) over synthetic 1x8x8 images."""
    options = dict(TINY_OPTIONS)
    data = DataConfig(dataset="synthetic", num_clients=6, partition="dirichlet", beta=0.5, options=options,
                      server_fraction=0.2 if name in PUBLIC else 0.0)
    dataset = load_dataset("synthetic", seed=0, **options)
    pool = list(POOLS.get(name, ("cnn_4_8",)))
    return build_federation(dataset, data, ModelsConfig(pool=pool, same_init=False), seed=0)


def every_model(fed: Federation) -> list[torch.Tensor]:
    """Every client's models (extras included) and every server model, flattened per model."""
    models = [m for c in fed.clients for m in (c.model, *c.extras.values())] + list(fed.server.values())
    return [torch.cat([v.detach().double().flatten() for v in m.state_dict().values() if v.is_floating_point()])
            for m in models]


def run(name: str, fuse: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Federation, list[float], list[int]]:
    """``ROUNDS`` rounds of the method; its federation, train losses and the sizes of the groups the phase runner
    ran, value works (predictions, gradients) included (0: a work alone, unbatched; n: n works as one batched
    step)."""
    sizes: list[int] = []

    def spy(runner: StepRunner, jobs: list[Any], plans: list[Any], batched: bool, dp: Any) -> list[float]:
        sizes.append(len(jobs) if batched else 0)  # 0: a work run alone, unbatched
        return RUN_GROUP(runner, jobs, plans, batched, dp)

    def value_spy(compute: Any) -> classmethod:
        def counted(cls: type, runner: StepRunner, works: list[Any], fused: bool) -> list[Any]:
            sizes.append(len(works) if fused else 0)
            return compute(runner, works, fused)

        return classmethod(counted)

    monkeypatch.setattr(phase, "_run_group", spy)
    for kind, compute in COMPUTE.items():
        monkeypatch.setattr(kind, "compute", value_spy(compute))
    fed, algo = federation(name), METHODS[name]()
    algo.setup(fed)
    runner, ledger, losses = StepRunner("cpu", fuse=fuse), CommunicationLedger.of(fed), []
    for round_ in range(1, ROUNDS + 1):
        ledger.start_round()
        losses.append(algo.run_round(round_, fed, runner, ledger).train_loss)
    return fed, losses, sizes


@pytest.mark.parametrize("name", list(METHODS))
def test_every_client_phase_runs_fused_and_equals_the_unfused_one(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fused, fused_losses, fused_groups = run(name, "on", monkeypatch)
    unfused, unfused_losses, unfused_groups = run(name, "off", monkeypatch)
    fused_only = [size for size in fused_groups if size != 0] if name in UNFUSED_DIGEST else fused_groups
    assert fused_only and min(fused_only) >= 2, f"{name}: a client phase ran unfused: {fused_groups}"
    assert set(unfused_groups) == {0}
    torch.testing.assert_close(torch.tensor(fused_losses), torch.tensor(unfused_losses), rtol=RTOL, atol=0.0)
    moved = 0
    for n, (a, b) in enumerate(zip(every_model(fused), every_model(unfused), strict=True)):
        assert (a - b).norm() <= RTOL * b.norm(), f"{name}: model {n}: {float((a - b).norm() / b.norm()):.2e}"
        moved += 1
    assert moved >= 6


def test_a_step_without_fusion_runs_alone_and_a_none_work_reports_nan() -> None:
    fed = federation("local")
    algo = Local(batch_size=16)
    runner = StepRunner("cpu", fuse="on")
    works = [algo.local_work(c, fed) for c in fed.clients[:3]]
    assert all(w is not None for w in works)
    results = runner.run_phase([works[0], None, works[2]])
    assert results[1].loss != results[1].loss  # NaN
    assert all(r.loss == r.loss for r in (results[0], results[2]))


def test_load_weights_copies_every_entry_and_changes_the_stamp() -> None:
    """The one-kernel load is ``load_state_dict``: same values, and the evaluator's stamp sees the change."""
    from lit_fl.federation.fingerprint import stamp
    from lit_fl.models import create_model
    from lit_fl.steps import load_weights

    torch.manual_seed(0)
    model, source = create_model("resnet18_2_2_4_4", (1, 8, 8), 4), create_model("resnet18_2_2_4_4", (1, 8, 8), 4)
    source(torch.randn(4, 1, 8, 8))  # running statistics that differ from the fresh model's
    before = stamp(model)
    load_weights(model, source.state_dict())
    assert stamp(model) != before
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), source.state_dict().values()))
    with pytest.raises(RuntimeError, match="Missing key"):
        load_weights(model, {k: v for k, v in source.state_dict().items() if "classifier" not in k})


def test_num_participants_of_a_gossip_round_counts_every_client_that_moved_a_model() -> None:
    """A method that reports neither senders nor an aggregator (gossip) gets every client its transfers touched;
    the server (-1) is no client; a method's own count wins."""
    from lit_fl.federation.round import RoundResult

    ring = [(n, (n + 1) % 6, 0.1) for n in range(6)] + [(n, (n - 1) % 6, 0.1) for n in range(6)]
    assert RoundResult().participants(ring) == 6
    assert RoundResult(aggregator=0, senders=(1, 2)).participants([(1, 0, 1.0), (0, 1, 1.0)]) == 3
    assert RoundResult(senders=(3,)).participants([(3, -1, 1.0), (-1, 3, 1.0)]) == 1
    assert RoundResult(num_participants=10).participants(ring) == 10


def test_counting_kernels_keeps_the_version_counters_the_evaluator_reads() -> None:
    """Under a Python dispatch mode PyTorch leaves version counters alone for ``_foreach_*`` in-place ops (the SGD
    step, weight copies); the kernel counter bumps them itself, so a counted run evaluates what an uncounted run
    evaluates."""
    from lit_fl.federation.fingerprint import stamp
    from lit_fl.kernel_count import KernelCounter
    from lit_fl.steps import load_weights

    model, other = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    with KernelCounter() as counter:
        before = stamp(model)
        optimizer.step()
        after_step = stamp(model)
        load_weights(model, other.state_dict())
    assert before != after_step != stamp(model) and counter.total > 0
