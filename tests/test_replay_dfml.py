"""A real DFML round against a hand replay of DFML Algorithm 1 and Eq. 1-3, for every setting DFML passes into its
mutual-learning step: ``loss`` (WSM / CE), ``weighted_kl`` (A.4.7), ``temperature``, ``mutual_epochs`` (K > 1) and
``mutual`` (A.4.8, vanilla knowledge transfer), on a pool with a BatchNorm model.

The expected weights are computed here from the formulas with plain torch (own WSM, CE, KL and teacher weights),
never with lit-fl's losses, so a wrong formula or a setting that does not reach the step fails the test.
"""

from __future__ import annotations

import copy

import pytest
import torch
from federations import same_weights, snapshot, tiny_federation
from torch import Tensor, nn

from lit_fl.algorithms import DFML
from lit_fl.data.batches import ClientBatches
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.steps import StepRunner

#: Two GroupNorm CNNs and a PreAct ResNet18 with BatchNorm2d, all of different sizes (so Eq. 3's weights differ).
POOL = ("cnn_4_8", "resnet18_2_2_4_4", "cnn_8")
LR, MOMENTUM, WEIGHT_DECAY, BATCH = 0.05, 0.5, 1e-3, 48


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


# -- the paper's formulas, written out ----------------------------------------------------------------------


def wsm(z: Tensor, y: Tensor, beta: Tensor) -> Tensor:
    """DFML Eq. 2, batch mean: ``-z_y + log sum_c beta_c exp(z_c)`` (classes with ``beta_c = 0`` drop out)."""
    seen = beta > 0
    normaliser = torch.log((beta[seen] * z[:, seen].exp()).sum(dim=1))
    return (normaliser - z[torch.arange(len(y)), y]).mean()


def ce(z: Tensor, y: Tensor, beta: Tensor) -> Tensor:
    """Cross-entropy ``-log softmax(z)_y``, batch mean."""
    return (z.exp().sum(dim=1).log() - z[torch.arange(len(y)), y]).mean()


def kl(teacher: Tensor, student: Tensor, temperature: float) -> Tensor:
    """``T^2 KL(p_teacher || p_student)`` at temperature T: ``sum_c p_c (log p_c - log q_c)``, batch mean."""
    p = torch.softmax(teacher / temperature, dim=1)
    q = torch.softmax(student / temperature, dim=1)
    return (p * (p.log() - q.log())).sum(dim=1).mean() * temperature**2


def eq3_weights(models: list[nn.Module], student: int, weighted: bool) -> list[float]:
    """``Phi_q / sum_{u != n} Phi_u`` (or ``1 / (|P| - 1)`` for vanilla KL), 0 for the student itself."""
    phi = [sum(p.numel() for p in m.parameters() if p.requires_grad) for m in models]
    others = [q for q in range(len(models)) if q != student]
    return [0.0 if q == student else (phi[q] / sum(phi[u] for u in others) if weighted else 1 / len(others))
            for q in range(len(models))]


def replay_mutual_learning(
    models: list[nn.Module], batches: ClientBatches, beta: Tensor, alpha: float, *, loss: str, weighted: bool,
    temperature: float, mutual: bool,
) -> list[nn.Module]:
    """Algorithm 1's aggregator: per batch every participant's logits, then one SGD step of
    ``L_n = (1 - alpha) sup(z_n) + alpha sum_q w_{q|n} KL(p_q || p_n)`` for every learning participant."""
    models = [copy.deepcopy(m).train() for m in models]
    learns = [True] * len(models) if mutual else [True] + [False] * (len(models) - 1)
    params = [p for m, t in zip(models, learns) if t for p in m.parameters()]
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    supervised = wsm if loss == "wsm" else ce
    weights = [eq3_weights(models, n, weighted) for n in range(len(models))]
    for x, y in batches:
        logits = []
        for model, learning in zip(models, learns):
            if learning:
                logits.append(model(x))
            else:  # a teacher that does not learn: eval mode, running statistics untouched
                model.eval()
                with torch.no_grad():
                    logits.append(model(x))
                model.train()
        total = torch.zeros(())
        for n in (n for n in range(len(models)) if learns[n]):
            distill = sum(w * kl(logits[q].detach(), logits[n], temperature)
                          for q, w in enumerate(weights[n]) if q != n)
            total = total + (1 - alpha) * supervised(logits[n], y, beta) + alpha * distill
        opt.zero_grad()
        total.backward()
        opt.step()
    return models


# -- the test -----------------------------------------------------------------------------------------------

CASES = {
    "paper defaults, K=3": {"loss": "wsm", "weighted_kl": True, "temperature": 1.0, "mutual_epochs": 3},
    "ce, vanilla KL, T=2, K=2": {"loss": "ce", "weighted_kl": False, "temperature": 2.0, "mutual_epochs": 2},
    "vanilla transfer, T=3": {"loss": "wsm", "weighted_kl": True, "temperature": 3.0, "mutual_epochs": 2,
                              "mutual": False},
}


@pytest.mark.parametrize("case", list(CASES))
def test_dfml_round_equals_a_hand_replay_of_eq1_to_eq3(case: str) -> None:
    settings = {"mutual": True, **CASES[case]}
    fed = tiny_federation(num_clients=4, pool=POOL, beta=0.3)
    algo = DFML(local_epochs=0, sender_fraction=1.0, alpha_schedule="fixed", alpha_max=0.8, lr=LR,
                momentum=MOMENTUM, weight_decay=WEIGHT_DECAY, batch_size=BATCH, **settings)
    algo.setup(fed)
    before = snapshot(fed)
    seen = {}
    original = algo.mutual_learning

    def spy(clients, alpha, federation, runner):  # noqa: ANN001, ANN202
        seen.update(ids=[c.id for c in clients], alpha=alpha, models=[copy.deepcopy(c.model) for c in clients],
                    order=federation.rng.data_order.get_state(), beta=clients[0].class_proportions.clone(),
                    idx=clients[0].train_idx)
        return original(clients, alpha, federation, runner)

    algo.mutual_learning = spy  # type: ignore[method-assign]
    algo.run_round(1, fed, StepRunner("cpu"), CommunicationLedger())

    assert seen["alpha"] == pytest.approx(0.8) and len(seen["ids"]) == 4
    generator = torch.Generator().manual_seed(0)
    generator.set_state(seen["order"])
    batches = ClientBatches(fed.data.train_x, fed.data.train_y, seen["idx"], BATCH, generator,
                            epochs=settings["mutual_epochs"])
    assert len(batches) >= 2 * settings["mutual_epochs"]  # several steps per epoch, K epochs
    expected = replay_mutual_learning(
        seen["models"], batches, seen["beta"], 0.8, loss=settings["loss"], weighted=settings["weighted_kl"],
        temperature=settings["temperature"], mutual=settings["mutual"],
    )
    for cid, model in zip(seen["ids"], expected):
        got = fed.clients[cid].model.state_dict()
        for key, value in model.state_dict().items():  # parameters AND BatchNorm buffers
            torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6, msg=f"client {cid}: {key}")
    if not settings["mutual"]:  # vanilla transfer: nobody but the aggregator changed, not even a buffer
        for cid in seen["ids"][1:]:
            assert same_weights(fed.clients[cid].model.state_dict(), before[cid])


def test_the_settings_change_the_round() -> None:
    """The replay above is sensitive: each setting alone moves the aggregator's weights."""
    def aggregator_after(**settings: object) -> dict[str, Tensor]:
        fed = tiny_federation(num_clients=4, pool=POOL, beta=0.3)
        algo = DFML(local_epochs=0, sender_fraction=1.0, alpha_schedule="fixed", alpha_max=0.8, lr=LR,
                    batch_size=BATCH, **{"mutual_epochs": 1, **settings})
        algo.setup(fed)
        result = algo.run_round(1, fed, StepRunner("cpu"), CommunicationLedger())
        return fed.clients[result.aggregator].model.state_dict()

    reference = aggregator_after()
    for settings in ({"loss": "ce"}, {"weighted_kl": False}, {"temperature": 2.0}, {"mutual_epochs": 2}):
        assert not same_weights(aggregator_after(**settings), reference), settings
