"""``models.same_init``: one initialisation per architecture, or one per client; the default is the paper's."""

from __future__ import annotations

import pytest
from conftest import TINY_OPTIONS
from federations import same_weights

from lit_fl.algorithms import DFML, UAPDFL, DefKT, FedORION
from lit_fl.config import DataConfig, LoggerConfig, ModelsConfig, TrainerConfig
from lit_fl.experiment import Experiment


def _build(algorithm, pool: list[str], same_init: bool | None):  # noqa: ANN001, ANN202
    experiment = Experiment(
        algorithm=algorithm,
        data=DataConfig(dataset="synthetic", num_clients=4, options=dict(TINY_OPTIONS)),
        models=ModelsConfig(pool=pool, same_init=same_init),
        trainer=TrainerConfig(accelerator="cpu"),
        logger=LoggerConfig(wandb=False, progress=False),
    )
    federation, _ = experiment.build()
    return federation


def _identical_pairs(federation) -> list[bool]:  # noqa: ANN001
    """For every two clients of one architecture: do they start from the same weights?"""
    clients = federation.clients
    return [
        same_weights(a.model.state_dict(), b.model.state_dict())
        for i, a in enumerate(clients)
        for b in clients[i + 1 :]
        if a.arch == b.arch
    ]


@pytest.mark.parametrize(
    ("algorithm", "paper_default"),
    [(DFML(), True), (DefKT(), True), (FedORION(), False), (UAPDFL(), False)],
    ids=["DFML", "DefKT", "FedORION", "UAPDFL"],
)
def test_default_follows_the_paper(algorithm, paper_default: bool) -> None:  # noqa: ANN001
    assert type(algorithm).paper_same_init is paper_default
    pairs = _identical_pairs(_build(algorithm, ["cnn_4_8"], None))
    assert len(pairs) == 6
    assert all(pairs) if paper_default else not any(pairs)


@pytest.mark.parametrize("same_init", [True, False])
def test_the_key_overrides_the_paper(same_init: bool) -> None:
    for algorithm in (DFML(), FedORION()):
        pairs = _identical_pairs(_build(algorithm, ["cnn_4_8", "cnn_8"], same_init))
        assert len(pairs) == 2
        assert all(pairs) if same_init else not any(pairs)


def test_own_initialisation_is_seeded() -> None:
    a, b = _build(FedORION(), ["cnn_4_8"], False), _build(FedORION(), ["cnn_4_8"], False)
    assert all(same_weights(x.model.state_dict(), y.model.state_dict()) for x, y in zip(a.clients, b.clients))
