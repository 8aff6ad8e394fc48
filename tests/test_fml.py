"""Decentralized FML (DFML A.3.4): memes are averaged and sent back, heterogeneous models never leave."""

from __future__ import annotations

import copy

import torch
from federations import same_weights, tiny_federation

from lit_fl.algorithms import DecentralizedFML
from lit_fl.algorithms.fml import MEME, median_architecture
from lit_fl.federation.evaluation import Evaluator
from lit_fl.federation.ledger import CommunicationLedger, model_megabytes
from lit_fl.steps import StepRunner
from lit_fl.steps.aggregation import weighted_average


def _federation():  # noqa: ANN202
    return tiny_federation(num_clients=6, pool=("cnn_8_16", "cnn_8", "cnn_4"))


def test_meme_is_the_median_architecture_and_starts_identical() -> None:
    fed = _federation()
    algo = DecentralizedFML()
    algo.setup(fed)
    assert algo.meme_arch == median_architecture(fed) == "cnn_8"
    memes = [c.extras[MEME].state_dict() for c in fed.clients]
    assert all(same_weights(memes[0], m) for m in memes)


def test_round_averages_memes_and_not_heterogeneous_models() -> None:
    fed = _federation()
    algo = DecentralizedFML(sender_fraction=0.5, lr=0.05)
    algo.setup(fed)
    untouched = copy.deepcopy(fed)
    ledger = CommunicationLedger()
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), ledger)
    participants = [result.aggregator, *result.senders]
    memes = [fed.clients[n].extras[MEME].state_dict() for n in participants]
    assert all(same_weights(memes[0], m) for m in memes)  # every participant holds the average
    hetero = {fed.clients[n].arch: [] for n in participants}
    for n in participants:
        hetero[fed.clients[n].arch].append(fed.clients[n].model.state_dict())
    for states in hetero.values():  # same-architecture participants were NOT averaged
        assert all(not same_weights(states[0], s) for s in states[1:])
    for client, before in zip(fed.clients, untouched.clients):
        moved = not same_weights(client.model.state_dict(), before.model.state_dict())
        assert moved == (client.id in participants)
    meme_mb = model_megabytes(fed.clients[0].extras[MEME])
    assert ledger.round_mb == 2 * len(result.senders) * meme_mb  # only memes travel


def test_the_meme_average_is_sample_weighted() -> None:
    fed = _federation()
    algo = DecentralizedFML(sender_fraction=0.5, lr=0.05)
    algo.setup(fed)
    captured = {}
    runner = StepRunner(accelerator="cpu")
    original = runner.run_phase

    def spy(works):  # noqa: ANN001, ANN202 - the memes after the participants' mutual learning
        results = original(works)
        for work in works:
            client = fed.clients[work.client]
            captured[client.id] = (copy.deepcopy(client.extras[MEME].state_dict()), client.num_train)
        return results

    runner.run_phase = spy  # type: ignore[method-assign]
    result = algo.run_round(1, fed, runner, CommunicationLedger())
    order = [result.aggregator, *result.senders]
    expected = weighted_average([captured[n][0] for n in order], [captured[n][1] for n in order])
    got = fed.clients[result.aggregator].extras[MEME].state_dict()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key])


def test_both_model_kinds_are_evaluated() -> None:
    fed = _federation()
    algo = DecentralizedFML()
    algo.setup(fed)
    metrics = Evaluator().evaluate(fed)
    assert {"global_acc", "global_acc_meme", "local_acc_meme"} <= set(metrics)


def test_fml_loss_weights_follow_shen_et_al() -> None:
    """FML: L_local = alpha CE + (1 - alpha) KL(p_meme || p_local), L_meme = beta CE + (1 - beta) KL(p_local ||
    p_meme), alpha = beta = 0.5 by default. One SGD step on one batch, checked by hand."""
    from lit_fl.data.batches import ClientBatches
    from lit_fl.losses import kl_divergence

    fed = _federation()
    algo = DecentralizedFML(batch_size=1000, lr=0.1, momentum=0.0, weight_decay=0.0, loss="ce")
    assert (algo.fml_alpha, algo.fml_beta) == (0.5, 0.5)
    algo = DecentralizedFML(batch_size=1000, lr=0.1, momentum=0.0, weight_decay=0.0, loss="ce", fml_beta=0.3)
    algo.setup(fed)
    client = fed.clients[0]
    local, meme = copy.deepcopy(client.model), copy.deepcopy(client.extras[MEME])
    state = fed.rng.data_order.get_state()
    StepRunner("cpu").run_phase([algo.mutual_work(client, fed)])
    fed.rng.data_order.set_state(state)
    (x, y), = list(ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, 1000, fed.rng.data_order))
    z_local, z_meme = local(x), meme(x)
    ce = torch.nn.functional.cross_entropy
    loss_local = 0.5 * ce(z_local, y) + 0.5 * kl_divergence(z_meme.detach(), z_local)
    loss_meme = 0.3 * ce(z_meme, y) + 0.7 * kl_divergence(z_local.detach(), z_meme)
    (loss_local + loss_meme).backward()
    for start, trained in ((local, client.model), (meme, client.extras[MEME])):
        for (name, p), q in zip(start.named_parameters(), trained.parameters()):
            assert torch.allclose(p.detach() - 0.1 * p.grad, q.detach(), atol=1e-6), name
