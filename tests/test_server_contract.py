"""The server round contract (lit_fl/algorithms/server.py) and its server optimizer slot: the slot's optimizers equal
Reddi et al.'s Algorithm 2 computed by hand, ``sgd`` at rate 1 is FedAvg's average bit for bit, the update transforms
decide what the server sees, a user's FedAdam (examples/fedadam.py: one small class) equals the slot's, and a
resumed run with a stateful server optimizer equals an uninterrupted one."""

from __future__ import annotations

import copy
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from federations import full_state, tiny_federation
from test_resume import assert_runs_equal
from torch import nn

from lit_fl.algorithms import ServerFedAvg
from lit_fl.algorithms.server_optimizers import FedAdagrad, FedAdam, FedYogi, ServerSGD, build_server_optimizer
from lit_fl.algorithms.updates import GLOBAL, ClientUpdate, average_updates
from lit_fl.federation.ledger import SERVER, CommunicationLedger
from lit_fl.steps import StepRunner, weighted_average

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_thread")


def scalar_model(value: float) -> nn.Module:
    model = nn.Linear(1, 1, bias=False).double()
    with torch.no_grad():
        model.weight.fill_(value)
    return model


def weight(model: nn.Module) -> float:
    return float(model.weight.detach())


# -- the slot, by hand ----------------------------------------------------------------------------------------

def test_sgd_at_rate_one_is_the_weighted_average_bit_for_bit() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    states = [{k: torch.randn_like(v) if v.is_floating_point() else v + i for k, v in model.state_dict().items()}
              for i in range(3)]
    expected = weighted_average(states, [1.0, 2.0, 5.0])
    ServerSGD(lr=1.0, momentum=0.0).apply(model, expected)
    assert all(torch.equal(model.state_dict()[k], expected[k]) for k in expected)


def test_fedavgm_by_hand() -> None:
    """``b = mu b + g; x -= lr b`` with ``g = x - average``: x 1, averages 0.5 then 0.2, lr 0.5, mu 0.9."""
    model, opt = scalar_model(1.0), ServerSGD(lr=0.5, momentum=0.9)
    opt.apply(model, {"weight": torch.tensor([[0.5]], dtype=torch.float64)})
    assert weight(model) == pytest.approx(0.75, rel=1e-15)  # g 0.5, b 0.5
    opt.apply(model, {"weight": torch.tensor([[0.2]], dtype=torch.float64)})
    assert weight(model) == pytest.approx(0.25, rel=1e-15)  # g 0.55, b 0.45 + 0.55 = 1.0


@pytest.mark.parametrize("name", ["adam", "yogi", "adagrad"])
def test_adaptive_optimizers_follow_reddi_et_al_algorithm_2(name: str) -> None:
    """x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau) with Delta_t = average - x_t, v_{-1} = tau^2, no bias
    correction, over 4 rounds of given averages, against the formulas in Python floats (float64 model: the two
    differ by rounding only, a few ulps of x)."""
    eta, b1, b2, tau = 0.1, 0.9, 0.99, 1e-3
    model = scalar_model(1.0)
    opt = build_server_optimizer(name, eta, 0.0, (b1, b2), tau)
    assert isinstance(opt, {"adam": FedAdam, "yogi": FedYogi, "adagrad": FedAdagrad}[name])
    x, m, v = 1.0, 0.0, tau**2
    for average in (0.3, -0.2, 0.8, 0.1):
        delta = average - x
        m = b1 * m + (1 - b1) * delta
        if name == "adam":
            v = b2 * v + (1 - b2) * delta**2
        elif name == "yogi":
            v = v - (1 - b2) * delta**2 * math.copysign(1.0, v - delta**2)
        else:
            v = v + delta**2
        x = x + eta * m / (math.sqrt(v) + tau)
        opt.apply(model, {"weight": torch.tensor([[average]], dtype=torch.float64)})
        assert weight(model) == pytest.approx(x, rel=1e-13, abs=1e-15)


def test_a_users_fedadam_equals_the_slots() -> None:
    """examples/fedadam.py (a class that overrides ServerFedAvg.server_update alone) and ``server_optimizer: adam``
    move a float64 server model alike over 3 rounds of weighted updates."""
    example = load_example("fedadam")
    fed = tiny_federation(num_clients=3, pool=("cnn_4_8",))
    user = example.FedAdamServer(eta=0.05, beta1=0.9, beta2=0.99, tau=1e-3)
    slot = ServerFedAvg(server_optimizer="adam", server_lr=0.05, server_betas=(0.9, 0.99), server_eps=1e-3)
    user.setup(fed)
    server = fed.server[GLOBAL].double()
    fed_slot = copy.copy(fed)
    fed_slot.server = {GLOBAL: copy.deepcopy(server)}
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        updates = [ClientUpdate(k, {n: t + 0.1 * torch.randn(t.shape, generator=generator, dtype=t.dtype)
                                    for n, t in server.state_dict().items()}, weight=float(k + 1)) for k in range(3)]
        user.server_update(updates, fed, None)
        slot.server_update(updates, fed_slot, None)
        for (name, a), b in zip(server.state_dict().items(), fed_slot.server[GLOBAL].state_dict().values()):
            scale = float(a.abs().max()) + 1e-3
            assert torch.allclose(a, b, rtol=0, atol=1e-12 * scale), name


# -- the round ------------------------------------------------------------------------------------------------

def test_the_server_sees_only_what_the_transforms_pass() -> None:
    """An update transform that keeps client k's update alone: the server model becomes k's trained model exactly,
    the senders name k alone, and the clients outside the round keep their weights."""
    fed = tiny_federation(num_clients=6, pool=("cnn_4_8",))

    class KeepFirst(ServerFedAvg):
        def update_transforms(self):  # noqa: ANN202 - the hook's signature
            return (lambda updates: list(updates[:1]),)

    algorithm = KeepFirst(client_fraction=0.5, local_epochs=1)
    algorithm.setup(fed)
    before = [full_state(c.model) for c in fed.clients]
    result = algorithm.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger.of(fed))
    assert len(result.senders) == 1
    kept = fed.clients[result.senders[0]].model.state_dict()
    assert all(torch.equal(fed.server[GLOBAL].state_dict()[k], v) for k, v in kept.items())
    changed = {c.id for c, b in zip(fed.clients, before)
               if not all(torch.equal(c.model.state_dict()[k], b[k]) for k in b)}
    assert len(changed) == 3 and result.senders[0] in changed  # round(0.5 * 6) sampled clients trained


def test_every_transfer_goes_to_or_from_the_server() -> None:
    fed = tiny_federation(num_clients=4, pool=("cnn_4_8",))
    algorithm = ServerFedAvg(client_fraction=1.0, local_epochs=1)
    algorithm.setup(fed)
    ledger = CommunicationLedger.of(fed)
    ledger.start_round()
    algorithm.run_round(1, fed, StepRunner(accelerator="cpu"), ledger)
    assert {(s, t) for s, t, _ in ledger.transfers} == {*((SERVER, k) for k in range(4)),
                                                         *((k, SERVER) for k in range(4))}


def test_average_updates_groups_and_weights() -> None:
    a, b, c = (torch.full((2,), v) for v in (1.0, 3.0, 10.0))
    out = average_updates([ClientUpdate(0, {"w": a}, 1.0, "x"), ClientUpdate(1, {"w": b}, 3.0, "x"),
                           ClientUpdate(2, {"w": c}, 7.0, "y")])
    assert list(out) == ["x", "y"]
    assert torch.equal(out["x"]["w"], torch.full((2,), 2.5)) and torch.equal(out["y"]["w"], c)


# -- end to end -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("optimizer", ["yogi", "sgd"])
def test_resume_with_a_stateful_server_optimizer_equals_uninterrupted(optimizer: str, tmp_path: Path) -> None:
    config = tiny_config("ServerFedAvg", rounds=4)
    config["algorithm"]["init_args"] = {"server_optimizer": optimizer, "server_lr": 0.5, "server_momentum":
                                        0.9 if optimizer == "sgd" else 0.0, "local_epochs": 1}
    config["models"]["pool"] = ["cnn_4_8"]
    cfg = write_config(tmp_path / "cfg.yaml", config)
    base = ("fit", "--config", cfg, "--run_dir", tmp_path / "runs")
    for argv in (("--name", "full"), ("--name", "part", "--rounds", "2"),
                 ("--resume", tmp_path / "runs" / "part", "--rounds", "4")):
        result = run_cli(*base, *argv)
        assert result.rc == 0, result.err
    assert_runs_equal(tmp_path / "runs" / "part", tmp_path / "runs" / "full")


def test_the_examples_fedadam_runs_from_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guide's command for the example (examples/fedadam.yaml, fewer rounds) fits and moves the server model."""
    monkeypatch.chdir(ROOT / "examples")
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    result = run_cli("fit", "--config", "fedadam.yaml", "--rounds", "2", "--run_dir", tmp_path, "--name", "fa",
                     "--algorithm.init_args.local_epochs", "1")
    assert result.rc == 0, result.err
    rows = (tmp_path / "fa" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    accs = [float(r.split(",")[header.index("server_acc/global")]) for r in rows[1:]]
    assert len(accs) == 2 and accs[1] != accs[0]


def load_example(name: str):  # noqa: ANN201 - a module
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"lit_fl_example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_guides_fedadam_is_the_examples() -> None:
    """docs/extending.md's FedAdam block is examples/fedadam.py's class, its lines in order (the example's docstring
    and checkpoint methods left out), so the guide cannot rot."""
    guide = (ROOT / "docs" / "extending.md").read_text()
    section = guide[guide.index("## Server methods"):guide.index("## Your own model")]
    block = [line for line in section.split("```python\n", 1)[1].split("```", 1)[0].splitlines() if line.strip()]
    example = iter((ROOT / "examples" / "fedadam.py").read_text().splitlines())
    assert len(block) > 10 and all(line in example for line in block)  # a subsequence: `in` consumes the iterator
