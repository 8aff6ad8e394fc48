"""Evaluation: the SPEC's global/local/per-architecture accuracy, and only changed models re-evaluated."""

from __future__ import annotations

import copy

import pytest
import torch
from federations import same_weights, tiny_federation

from lit_fl.algorithms import DFML, DecentralizedFedAvg
from lit_fl.federation.evaluation import Evaluator
from lit_fl.federation.fingerprint import fingerprint, fingerprints
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.steps import StepRunner


def test_global_accuracy_is_the_mean_over_all_clients_on_the_whole_test_set() -> None:
    fed = tiny_federation(num_clients=4, pool=("cnn_4", "cnn_8"))
    evaluator = Evaluator()
    metrics = evaluator.evaluate(fed)
    per_client = []
    for c in fed.clients:
        with torch.no_grad():
            c.model.eval()
            per_client.append((c.model(fed.data.test_x).argmax(1) == fed.data.test_y).float().mean().item())
    assert metrics["global_acc"] == pytest.approx(sum(per_client) / 4)
    assert metrics["global_acc_regular"] == metrics["global_acc"]  # no peak models yet
    assert metrics["acc/cnn_4"] == pytest.approx((per_client[0] + per_client[1]) / 2)
    assert metrics["acc/cnn_8"] == pytest.approx((per_client[2] + per_client[3]) / 2)


def test_reported_acc_is_the_column_the_method_reports() -> None:
    """``reported_acc`` repeats the column named by ``reports`` (the method's ``Algorithm.reports``), whichever it
    is; a column the evaluation does not write is refused in one line naming the columns it does."""
    from lit_fl.errors import ConfigError

    fed = tiny_federation(num_clients=4, pool=("cnn_4", "cnn_8"))
    fed.server["global"] = copy.deepcopy(fed.clients[3].model)
    with torch.no_grad():
        next(fed.server["global"].parameters()).mul_(-1.0)  # a server model unlike every client's
    for column in ("global_acc", "local_acc", "server_acc/global", "acc/cnn_4"):
        metrics = Evaluator(reports=column).evaluate(fed)
        assert metrics["reported_acc"] == metrics[column]
    values = Evaluator().evaluate(fed)
    assert len({values[c] for c in ("global_acc", "local_acc", "server_acc/global")}) == 3  # the choice shows
    with pytest.raises(ConfigError, match=r"'server_acc/small'.*writes .*global_acc.*server_acc/global") as err:
        Evaluator(reports="server_acc/small").evaluate(fed)
    assert "\n" not in str(err.value)
    own = []
    for c in fed.clients:
        x, y = fed.data.train_x[c.val_idx], fed.data.train_y[c.val_idx]
        with torch.no_grad():
            own.append((c.model(x).argmax(1) == y).float().mean().item())
    assert metrics["local_acc"] == pytest.approx(sum(own) / 4)


def test_local_accuracy_leaves_out_the_clients_without_a_validation_split() -> None:
    """Natural partitions give clients of one or two samples, with no validation split: their local accuracy is
    undefined (NaN) and ``local_acc`` is the mean over the clients that have one, not a sum over every client."""
    fed = tiny_federation(num_clients=4, pool=("cnn_4", "cnn_8"))
    for client in fed.clients[:2]:
        client.val_idx = client.val_idx[:0]
    metrics = Evaluator().evaluate(fed)
    own = []
    for c in fed.clients[2:]:
        x, y = fed.data.train_x[c.val_idx], fed.data.train_y[c.val_idx]
        with torch.no_grad():
            c.model.eval()
            own.append((c.model(x).argmax(1) == y).float().mean().item())
    assert metrics["local_acc"] == pytest.approx(sum(own) / 2)
    assert metrics["global_acc"] == metrics["global_acc"]  # every client still has the test set


def test_only_changed_models_are_re_evaluated() -> None:
    fed = tiny_federation(num_clients=6, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1, sender_fraction=0.34)  # aggregator + 2 senders
    algo.setup(fed)
    evaluator = Evaluator()
    evaluator.evaluate(fed)
    # six clients, one architecture, one initialisation, peak = regular model: one set of weights, one pass
    assert evaluator.evaluated == 1
    evaluator.evaluate(fed)
    assert evaluator.evaluated == 1  # nothing changed, nothing re-evaluated
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger())
    evaluator.evaluated = 0
    metrics = evaluator.evaluate(fed)
    # 3 participants changed; their peaks were copied from the new regular models (shared entries)
    assert evaluator.evaluated == 3
    assert metrics["global_acc"] == pytest.approx(metrics["global_acc_regular"])
    assert len({result.aggregator, *result.senders}) == 3


def test_peak_and_regular_are_reported_separately() -> None:
    fed = tiny_federation(num_clients=3, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1, sender_fraction=1.0, lr=0.1)
    algo.setup(fed)
    for c in fed.clients:
        c.alpha_peak = 2.0  # above any alpha: peaks stay the initial models
    algo.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger())
    metrics = Evaluator().evaluate(fed)
    initial = tiny_federation(num_clients=3, pool=("cnn_4",))
    assert metrics["global_acc"] == pytest.approx(Evaluator().evaluate(initial)["global_acc"])
    assert metrics["global_acc_regular"] != metrics["global_acc"]


def test_vanilla_transfer_updates_and_returns_nothing_but_the_aggregator(monkeypatch: pytest.MonkeyPatch) -> None:
    fed = tiny_federation(num_clients=4, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1, sender_fraction=1.0, mutual=False)
    algo.setup(fed)
    ledger = CommunicationLedger()
    after_local: list[dict[str, torch.Tensor]] = []
    mutual_learning = algo.mutual_learning

    def spy(clients, *args):  # noqa: ANN001, ANN002, ANN202
        after_local.extend(copy.deepcopy(c.model.state_dict()) for c in fed.clients)
        return mutual_learning(clients, *args)

    monkeypatch.setattr(algo, "mutual_learning", spy)
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), ledger)
    assert ledger.round_returned_mb == 0.0 and ledger.round_sent_mb > 0.0
    # everybody trained locally; only the aggregator also learned at the aggregator
    for c, local in zip(fed.clients, after_local):
        assert same_weights(c.model.state_dict(), local) == (c.id != result.aggregator)


# -- evaluation per distinct weights equals evaluating every client on its own --------------------------------


def reference_metrics(fed) -> dict[str, float]:  # noqa: ANN001
    """The evaluation as first written: every client's reported and regular model, each on the whole test set
    and on the client's validation split, one model at a time in batches of 1,000, torchmetrics' accuracy."""
    from torchmetrics.functional.classification import multiclass_accuracy

    def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
        if len(y) == 0:
            return float("nan")
        model.eval()
        with torch.inference_mode():
            preds = torch.cat([model(x[i : i + 1000]).argmax(1) for i in range(0, len(x), 1000)])
        model.train()
        return float(multiclass_accuracy(preds, y, num_classes=fed.num_classes, average="micro"))

    def mean(values: list[float]) -> float:
        kept = [v for v in values if v == v]
        return sum(kept) / len(kept) if kept else float("nan")

    data, rows = fed.data, {"global_acc": [], "global_acc_regular": [], "local_acc": [], "local_acc_regular": []}
    per_arch: dict[str, list[float]] = {}
    for c in fed.clients:
        val_x, val_y = data.train_x[c.val_idx], data.train_y[c.val_idx]
        shown = c.reported_model()
        rows["global_acc"].append(accuracy(shown, data.test_x, data.test_y))
        rows["global_acc_regular"].append(accuracy(c.regular_model, data.test_x, data.test_y))
        rows["local_acc"].append(accuracy(shown, val_x, val_y))
        rows["local_acc_regular"].append(accuracy(c.regular_model, val_x, val_y))
        per_arch.setdefault(c.arch, []).append(rows["global_acc"][-1])
    return {"reported_acc": mean(rows["global_acc"]), **{k: mean(v) for k, v in rows.items()},
            **{f"acc/{a}": mean(v) for a, v in per_arch.items()}}


def test_models_that_differ_give_the_numbers_of_one_client_at_a_time() -> None:
    fed = tiny_federation(num_clients=6, pool=("cnn_4_8", "cnn_8"))
    algo = DFML(mutual_epochs=1, sender_fraction=0.5, period=2, alpha_max=0.9)
    algo.setup(fed)
    evaluator, runner = Evaluator(batch_size=7), StepRunner(accelerator="cpu")  # batches cut across clients
    for round_ in range(1, 5):  # period 2: rounds 3-4 start a new cycle, peaks and regular models part
        algo.run_round(round_, fed, runner, CommunicationLedger())
        assert evaluator.evaluate(fed) == reference_metrics(fed)
    assert any(not c.peak_shared for c in fed.clients)  # some peaks hold weights of their own


def test_models_that_coincide_are_evaluated_once_with_the_same_numbers() -> None:
    fed = tiny_federation(num_clients=6, pool=("cnn_4_8", "cnn_8"))
    algo = DecentralizedFedAvg(sender_fraction=1.0)  # full participation: one average per architecture
    algo.setup(fed)
    algo.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger())
    evaluator = Evaluator()
    assert evaluator.evaluate(fed) == reference_metrics(fed)
    assert evaluator.evaluated == 2  # two architectures, two sets of weights


def test_a_changed_model_is_seen_without_being_marked() -> None:
    fed = tiny_federation(num_clients=2, pool=("cnn_4",))
    evaluator = Evaluator()
    before = evaluator.evaluate(fed)
    with torch.no_grad():
        for p in fed.clients[0].model.parameters():
            p.zero_()
    after = evaluator.evaluate(fed)
    assert after == reference_metrics(fed) and after != before
    assert evaluator.evaluated == 2


class FiveWays(DecentralizedFedAvg):
    """A user's method that changes weights in every way a method can, and marks nothing: ``set_weights``,
    ``load_state_dict``, an in-place ``mul_``, a training step, a copy from another client, in turn."""

    def run_round(self, round_, federation, runner, ledger):  # noqa: ANN001, ANN201
        from lit_fl.algorithms.base import RoundResult

        a, b = federation.clients[round_ % 2], federation.clients[2 + round_ % 2]
        way = round_ % 5
        if way == 0:
            a.set_weights(b.model.state_dict())
        elif way == 1:
            a.model.load_state_dict(copy.deepcopy(b.model.state_dict()))
        elif way == 2:
            with torch.no_grad():
                for p in a.model.parameters():
                    p.mul_(0.5)
        elif way == 3:
            self.local_phase([a], federation, runner)
        else:
            with torch.no_grad():
                for p, q in zip(a.model.parameters(), b.model.parameters()):
                    p.copy_(q)
        if round_ == 1:  # and one client's peak is its regular model from now on
            federation.clients[1].update_peak(0.5)
        return RoundResult(train_loss=0.0)


def test_every_way_of_changing_weights_is_seen_as_evaluating_from_scratch() -> None:
    fed = tiny_federation(num_clients=4, pool=("cnn_4",))
    algo, runner, evaluator = FiveWays(batch_size=16), StepRunner(accelerator="cpu"), Evaluator()
    algo.setup(fed)
    for c in fed.clients[:2]:  # distinct starting points: every change moves a model's accuracy
        algo.local_phase([c], fed, runner)
    seen = []
    for round_ in range(1, 11):  # every way twice
        algo.run_round(round_, fed, runner, CommunicationLedger())
        metrics = evaluator.evaluate(fed)
        assert metrics == reference_metrics(fed), round_
        seen.append(metrics["global_acc"])
    assert len(set(seen)) > 3  # the accuracy really moved


# -- fingerprints --------------------------------------------------------------------------------------------


def test_fingerprint_is_equal_for_equal_weights_and_differs_for_one_changed_value() -> None:
    fed = tiny_federation(num_clients=2, pool=("cnn_4",))
    a, b = fed.clients[0].model, fed.clients[1].model  # same initialisation
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) == fingerprint(copy.deepcopy(a).to(memory_format=torch.channels_last))  # layout-free
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-7
    assert fingerprint(a) != fingerprint(b)
    assert fingerprints([a, b, a]) == [fingerprint(a), fingerprint(b), fingerprint(a)]  # one transfer, same digests


# -- copy-on-write peak models -------------------------------------------------------------------------------


def storages(fed) -> int:  # noqa: ANN001
    """Distinct parameter storages the federation holds (regular and peak models)."""
    models = [c.regular_model for c in fed.clients] + [c.peak for c in fed.clients if c.peak is not None]
    return len({p.untyped_storage().data_ptr() for m in models for p in m.parameters()})


def test_a_peak_shares_its_regular_model_until_the_client_trains() -> None:
    fed = tiny_federation(num_clients=6, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1, sender_fraction=0.34)
    algo.setup(fed)
    per_model = len(list(fed.clients[0].regular_model.parameters()))
    assert all(c.peak is c.regular_model for c in fed.clients)
    assert storages(fed) == 6 * per_model  # six clients, six models: no copy for the peaks
    algo.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger())  # alpha rises: peaks follow
    assert storages(fed) == 6 * per_model
    peaks = {c.id: copy.deepcopy(c.peak.state_dict()) for c in fed.clients}
    for c in fed.clients:
        c.alpha_peak = 2.0  # above any alpha: no peak follows in round 2
    result = algo.run_round(2, fed, StepRunner(accelerator="cpu"), CommunicationLedger())
    moved = {result.aggregator, *result.senders}
    for c in fed.clients:
        assert same_weights(c.peak.state_dict(), peaks[c.id])  # every peak kept its weights
        assert c.peak_shared == (c.id not in moved)  # the clients that trained got a copy, the others not
    assert storages(fed) == (6 + len(moved)) * per_model


def test_a_cluster_average_is_fingerprinted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import lit_fl.federation.evaluation as evaluation

    fed = tiny_federation(num_clients=6, pool=("cnn_4",))
    algo = DecentralizedFedAvg(sender_fraction=1.0)
    algo.setup(fed)
    algo.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger())
    calls = []
    monkeypatch.setattr(evaluation, "fingerprints", lambda models: calls.extend(models) or fingerprints(models))
    evaluator = Evaluator()
    assert evaluator.evaluate(fed) == reference_metrics(fed)
    assert len(calls) == 1 and evaluator.evaluated == 1
    with torch.no_grad():
        next(fed.clients[2].model.parameters()).add_(1.0)  # its own weights again, seen without being marked
    evaluator.evaluate(fed)
    assert len(calls) == 2 and evaluator.evaluated == 2


# -- host synchronisations -----------------------------------------------------------------------------------------


def test_the_kernel_counter_counts_each_kind_of_host_synchronisation() -> None:
    from lit_fl.kernel_count import KernelCounter

    x = torch.arange(6.0)
    with KernelCounter() as counter:
        x.sum().item()  # a value read back
        bool(x[0] > 1)  # a branch on a value
        x[x > 2]  # a boolean mask: the output's length is on the device
        torch.nonzero(x)
        x.tolist(), x.numpy(), x.cpu()  # copies to the host: no kernel on a CPU, counted apart
        x * 2  # no synchronisation
    assert counter.syncs == 4 and counter.copies == 3
    assert torch.Tensor.tolist is not None and "counted" not in repr(torch.Tensor.tolist)  # patches undone


@pytest.mark.parametrize("fuse", [False, True])
def test_an_evaluation_reads_the_device_a_fixed_number_of_times_however_many_models(fuse: bool) -> None:
    """Every model's accuracy comes back in one transfer per architecture (fused) and its fingerprint in one for
    all models: the evaluation's waits on the device do not grow with the clients (31 reads for 31 models before)."""
    from lit_fl.kernel_count import KernelCounter

    reads = []
    for clients in (4, 12):
        fed = tiny_federation(num_clients=clients, pool=("cnn_4",))
        for client in fed.clients:  # every client its own weights: nothing shared, nothing cached
            with torch.no_grad():
                next(client.model.parameters()).add_(0.01 * client.id)
        evaluator = Evaluator(fuse=fuse)
        with KernelCounter() as counter:
            metrics = evaluator.evaluate(fed)
        assert evaluator.evaluated == clients and metrics == reference_metrics(fed)
        reads.append((counter.syncs, counter.copies if fuse else None))
    assert reads[0] == reads[1], reads
    assert reads[0][0] <= 1
