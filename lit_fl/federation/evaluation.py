"""Global, local and per-architecture accuracy (SPEC "Data"), evaluating every distinct set of weights once.

* global accuracy = mean over ALL clients of the client's model accuracy on the whole global test set;
* local accuracy = mean over clients of the accuracy on their own validation split;
* ``acc/<arch>`` = mean global accuracy of the clients with that architecture;
* ``global_acc_<name>`` / ``local_acc_<name>`` for every extra model a method keeps (FML's ``meme``);
* ``server_acc/<name>`` on the global test set for every model of a server role (FedORION, codistillation), and
  ``server_acc/<name>/<domain>`` on each domain's part of it where the samples have domains
  (:mod:`lit_fl.data.domains`: StackOverflow's questions and answers, codistillation Table 2);
* ``reported_acc``: the column the method's paper reports (``Algorithm.reports``: ``server_acc/global`` for a
  server method, ``local_acc`` for UA-PDFL's personalized ones, ``global_acc`` otherwise), under one name.

docs/metrics.md defines every column.

Both the reported model (the peak model where a client has one) and the regular model are evaluated.

The work is proportional to the distinct weights, not to the clients. Every model a client holds is named by
its :func:`~lit_fl.federation.fingerprint.fingerprint`, recomputed only when the model's
:func:`~lit_fl.federation.fingerprint.stamp` moved (PyTorch's own version counters of its tensors: any in-place
change, whoever made it; no method marks anything) and once for all clients that loaded one state dict
(:class:`~lit_fl.federation.state.WeightsToken`). So all members of a FedAvg cluster, a peak equal to its regular
model and an unchanged model share one entry.

A set of weights not seen before runs one pass, under ``torch.inference_mode`` in eval mode, over the test set
followed by the validation samples of every client that holds it, in batches of ``batch_size``; its accuracies
are the correct counts of each segment. Accuracy is ``float32(correct) / total``, the value torchmetrics' micro
accuracy gives, so the numbers are those of evaluating each client on its own.

On token sequences (next-token prediction) accuracy is over tokens: the correct counts are the positions whose
argmax equals a target that is neither PAD nor EOS, the totals the number of such targets (FedJAX's
``accuracy_no_eos``, :mod:`lit_fl.data.tokens`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

import numpy as np
import torch
from torch import Tensor, nn

from lit_fl.data.tokens import correct_counts, counted_totals
from lit_fl.errors import ConfigError
from lit_fl.federation.fingerprint import Fingerprint, Stamp, fingerprints, stamp
from lit_fl.federation.state import Client, Federation, WeightsToken
from lit_fl.steps.placement import Placement

#: ``(family, fingerprint)``: weights are the same model when both agree (family = architecture or extra's name)
WeightsKey = tuple[str, Fingerprint]

#: Evaluation batch size per device type: small batches keep a CNN's activations in the CPU's caches (measured
#: 1.4x faster at 128 than at 1,000 for the H2 CNNs); accelerators prefer large ones.
BATCH_SIZES: dict[str, int] = {"cpu": 128}
ACCELERATOR_BATCH_SIZE = 1024


@dataclass
class _Pass:
    """One forward pass to run: a model over the test set (when its test accuracy is unknown) and the
    validation samples of ``val_clients``."""

    model: nn.Module
    test: bool
    val_clients: list[Client] = field(default_factory=list)


class Evaluator:
    """Computes the round's accuracy metrics; caches accuracies by weights, so unchanged models cost nothing."""

    def __init__(
        self,
        batch_size: int | None = None,
        autocast: Callable[[], AbstractContextManager] = nullcontext,
        placement: Placement | None = None,
        fuse: bool = False,
        reports: str = "global_acc",
    ) -> None:
        self.batch_size = batch_size
        #: the metric written again as ``reported_acc`` (the method's ``reports``)
        self.reports = reports
        #: models of one architecture are evaluated as one fused module (``trainer.fuse``; each process its own)
        self.fuse = fuse
        self.autocast = autocast
        self.placement = placement  # several processes: passes are split over ranks
        self.evaluated = 0  # forward passes over a distinct set of weights (for tests and logs)
        self._keys: dict[int, dict[str, tuple[Stamp, WeightsKey]]] = {}  # client -> slot -> (stamp, key)
        self._test: dict[WeightsKey, float] = {}
        self._val: dict[int, dict[WeightsKey, float]] = {}  # client -> key -> validation accuracy
        self._holders: Counter[WeightsKey] = Counter()  # slots holding each key (test entries die at 0)
        self._server: dict[str, tuple[Stamp, dict[str, float]]] = {}
        self._token_fingerprints: WeakKeyDictionary[WeightsToken, Fingerprint] = WeakKeyDictionary()
        self._prefetched: dict[int, tuple[nn.Module, Fingerprint]] = {}  # id -> (model, digest), one evaluation
        self._test_totals: tuple[Tensor, int] | None = None  # (test_y, its counted predictions)

    # -- identity ---------------------------------------------------------------------------------------

    def _slots(self, client: Client) -> Iterator[tuple[str, str, nn.Module]]:
        """``(slot, family, model)`` of every model the client holds."""
        yield "regular", client.arch, client.regular_model
        peak = client.peak
        if peak is not None and not client.peak_shared:
            yield "peak", client.arch, peak
        for name, model in client.extras.items():
            yield f"extra/{name}", f"{name}:{type(model).__qualname__}", model

    def keys(self, client: Client) -> dict[str, WeightsKey]:
        """The current weights key of each of the client's models: ``regular``, ``peak``, ``extra/<name>``.

        A slot is fingerprinted only when its stamp moved since the last call; entries nobody holds any
        more are dropped, so the caches stay as large as the federation's distinct weights."""
        known = self._keys.setdefault(client.id, {})
        keys: dict[str, WeightsKey] = {}
        released: list[WeightsKey] = []  # released after the new keys are held: a peak may keep an old key
        for slot, family, model in self._slots(client):
            entry, now = known.get(slot), stamp(model)
            if entry is None or entry[0] != now:
                if entry is not None:
                    released.append(entry[1])
                token = client.shared_weights() if slot == "regular" else None
                entry = known[slot] = (now, (family, self._fingerprint(model, token)))
                self._holders[entry[1]] += 1
            keys[slot] = entry[1]
        for slot in [s for s in known if s not in keys]:  # e.g. a peak that shares its regular model again
            released.append(known.pop(slot)[1])
        for key in released:
            self._release(key)
        if client.peak is not None and client.peak_shared:
            keys["peak"] = keys["regular"]
        if released:
            held = set(keys.values())
            own = self._val.get(client.id, {})
            for stale in [k for k in own if k not in held]:
                del own[stale]
        return keys

    def _fingerprint(self, model: nn.Module, token: WeightsToken | None) -> Fingerprint:
        """The model's fingerprint; computed once per :class:`WeightsToken` (a state dict several clients loaded),
        taken from :meth:`_prefetch`'s batch when it is there."""
        if token is not None and token in self._token_fingerprints:
            return self._token_fingerprints[token]
        found = self._prefetched.pop(id(model), None)
        digest = found[1] if found is not None and found[0] is model else fingerprints([model])[0]
        if token is not None:
            self._token_fingerprints[token] = digest
        return digest

    def _prefetch(self, clients: list[Client]) -> None:
        """Fingerprint every model whose stamp moved since it was last keyed, in one transfer to the host
        (:func:`~lit_fl.federation.fingerprint.fingerprints`): :meth:`keys` then reads them instead of copying
        each model's tensors back one by one."""
        stale: dict[int, nn.Module] = {}
        tokens: set[WeightsToken] = set()
        for client in clients:
            known = self._keys.get(client.id, {})
            for slot, _, model in self._slots(client):
                entry = known.get(slot)
                if entry is not None and entry[0] == stamp(model):
                    continue
                token = client.shared_weights() if slot == "regular" else None
                if token is not None and (token in self._token_fingerprints or token in tokens):
                    continue
                if token is not None:
                    tokens.add(token)
                stale[id(model)] = model
        models = list(stale.values())
        self._prefetched = {id(m): (m, digest) for m, digest in zip(models, fingerprints(models))} if models else {}

    def _release(self, key: WeightsKey) -> None:
        self._holders[key] -= 1
        if self._holders[key] <= 0:
            del self._holders[key]
            self._test.pop(key, None)

    # -- work -------------------------------------------------------------------------------------------

    def _plan(self, fed: Federation, keys: list[dict[str, WeightsKey]]) -> dict[WeightsKey, _Pass]:
        """One pass per set of weights whose test or validation accuracy is not cached yet."""
        passes: dict[WeightsKey, _Pass] = {}
        for client, client_keys in zip(fed.clients, keys):
            models = {"regular": client.regular_model, "peak": client.peak,
                      **{f"extra/{n}": m for n, m in client.extras.items()}}
            for slot, key in client_keys.items():
                need_test, need_val = key not in self._test, key not in self._val.get(client.id, {})
                if not (need_test or need_val):
                    continue
                work = passes.setdefault(key, _Pass(models[slot], test=False))
                work.test |= need_test
                if need_val and client not in work.val_clients:
                    work.val_clients.append(client)
        return passes

    @torch.inference_mode()
    def _correct(self, model: nn.Module, x: Tensor, y: Tensor, batch_size: int, sequence: bool = False) -> Tensor:
        """Per sample, the correct predictions of ``model`` (0 or 1 for a class, the counted tokens of a sequence:
        :func:`~lit_fl.data.tokens.correct_counts`), batch by batch."""
        if len(y) == 0:
            return torch.zeros(0, dtype=torch.long, device=y.device)
        with self.autocast():
            return torch.cat([correct_counts(model(x[i : i + batch_size]), y[i : i + batch_size], sequence)
                              for i in range(0, len(x), batch_size)])

    def _correct_row(self, work: _Pass, fed: Federation) -> Tensor:
        """The pass's correct predictions on the device, int64: the test set's count (when asked), then each
        validation sample's (:func:`~lit_fl.federation.fused_evaluation.row_counts` reads it on the host)."""
        data, model, batch_size = fed.data, work.model, self._batch_size(fed)
        parts: list[Tensor] = []
        was_training = model.training
        model.eval()
        try:
            if work.test:
                parts.append(self._correct(model, data.test_x, data.test_y, batch_size, data.is_sequence).sum()[None])
            if work.val_clients:
                idx = torch.cat([c.val_idx for c in work.val_clients]).to(data.train_x.device)
                parts.append(self._correct(model, data.train_x[idx], data.train_y[idx], batch_size, data.is_sequence))
        finally:
            model.train(was_training)
        return torch.cat([p.to(torch.int64) for p in parts]) if parts else torch.zeros(0, dtype=torch.int64)

    def _store(self, key: WeightsKey, work: _Pass, counts: list[int], fed: Federation) -> None:
        if work.test:
            self._test[key] = _accuracy(counts[0], self._test_total(fed))
        for client, count in zip(work.val_clients, counts[int(work.test) :]):
            self._val.setdefault(client.id, {})[key] = _accuracy(count, _val_total(client, fed))
        self.evaluated += 1

    def _test_total(self, fed: Federation) -> int:
        """:func:`_test_total`, read from the device once per test set (not once per model)."""
        if self._test_totals is None or self._test_totals[0] is not fed.data.test_y:
            self._test_totals = (fed.data.test_y, _test_total(fed))
        return self._test_totals[1]

    def _run_all(self, passes: dict[WeightsKey, _Pass], fed: Federation) -> None:
        """Run the passes; with several processes the passes are balanced over ranks by cost (samples x
        parameters) and the correct counts are summed over ranks (integers: exact). With ``fuse`` every process
        fuses the passes it runs."""
        placement = self.placement
        if placement is None or not placement.distributed:
            for (key, work), counts in zip(passes.items(), self._counts(list(passes.values()), fed)):
                self._store(key, work, counts, fed)
            return
        sizes = [int(w.test) + len(w.val_clients) for w in passes.values()]
        device = fed.data.test_y.device
        if not placement.agree([len(sizes), sum(sizes)], device):
            raise RuntimeError("the processes' federations diverged: they planned different evaluation passes")
        ranks = placement.spread([_pass_cost(w, fed) for w in passes.values()])
        offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        mine = [i for i, rank in enumerate(ranks) if rank == placement.rank]
        works = list(passes.values())
        counts = torch.zeros(sum(sizes), dtype=torch.int64)
        for i, row in zip(mine, self._counts([works[i] for i in mine], fed)):
            counts[offsets[i] : offsets[i] + sizes[i]] = torch.tensor(row, dtype=torch.int64)
        counts = placement.all_reduce_sum(counts.to(device)).tolist()
        for (key, work), size, offset in zip(passes.items(), sizes, offsets):
            self._store(key, work, counts[offset : offset + size], fed)

    def _counts(self, works: list[_Pass], fed: Federation) -> list[list[int]]:
        """The correct counts of every pass (the passes of one architecture fused with ``fuse``, the others alone),
        brought to the host in one transfer: the host waits for the device once per evaluation, not per model."""
        from lit_fl.federation.fused_evaluation import row_counts

        rows: list[Tensor | None] = [None] * len(works)
        if self.fuse:
            for i, row in self._fused_rows(works, fed).items():
                rows[i] = row
        rows = [row if row is not None else self._correct_row(work, fed) for row, work in zip(rows, works)]
        if not rows:
            return []
        host = torch.cat([row.reshape(-1).to(rows[0].device) for row in rows]).cpu().numpy()
        out, start = [], 0
        for row, work in zip(rows, works):
            out.append(row_counts(host[start : start + row.numel()], work.test, [c.val_idx for c in work.val_clients]))
            start += row.numel()
        return out

    def _fused_rows(self, works: list[_Pass], fed: Federation) -> dict[int, Tensor]:
        """Device rows (:func:`~lit_fl.federation.fused_evaluation.fused_correct`) of the passes that fuse: groups
        of same-architecture passes that both do or both skip the test set."""
        from lit_fl.federation.fused_evaluation import fused_correct
        from lit_fl.steps.fusion import fusion_groups

        modes = [w.model.training for w in works]
        for w in works:
            w.model.eval()
        out: dict[int, Tensor] = {}
        try:
            for test in (True, False):
                chosen = [i for i, w in enumerate(works) if w.test == test]
                for group in fusion_groups([works[i].model for i in chosen], [True] * len(chosen)):
                    members = [chosen[i] for i in group]
                    rows = fused_correct(
                        [works[i].model for i in members],
                        (fed.data.test_x, fed.data.test_y) if test else None,
                        [[c.val_idx for c in works[i].val_clients] for i in members],
                        (fed.data.train_x, fed.data.train_y),
                        self._batch_size(fed),
                        self.autocast,
                        fed.data.is_sequence,
                    )
                    out.update(zip(members, rows))
        finally:
            for w, mode in zip(works, modes):
                w.model.train(mode)
        return out

    def _batch_size(self, fed: Federation) -> int:
        return self.batch_size or BATCH_SIZES.get(fed.data.test_x.device.type, ACCELERATOR_BATCH_SIZE)

    def _server_accuracy(self, name: str, model: nn.Module, fed: Federation) -> dict[str, float]:
        """``server_acc/<name>`` and, where the test samples have domains, ``server_acc/<name>/<domain>``."""
        now = stamp(model)
        cached = self._server.get(name)
        if cached is None or cached[0] != now:
            batch_size = self._batch_size(fed)
            was_training = model.training
            model.eval()
            try:
                correct = self._correct(model, fed.data.test_x, fed.data.test_y, batch_size, fed.data.is_sequence)
                cached = (now, _server_metrics(name, correct.cpu(), fed, self._test_total(fed)))
            finally:
                model.train(was_training)
            self._server[name] = cached
            self.evaluated += 1
        return cached[1]

    # -- metrics ----------------------------------------------------------------------------------------

    def evaluate(self, fed: Federation) -> dict[str, float]:
        """The round's accuracy metrics (fractions in [0, 1])."""
        self._prefetch(fed.clients)
        keys = [self.keys(c) for c in fed.clients]
        self._prefetched = {}
        self._run_all(self._plan(fed, keys), fed)
        reported, regular, local, local_regular = [], [], [], []
        per_arch: dict[str, list[float]] = {}
        for client, k in zip(fed.clients, keys):
            shown = k.get("peak", k["regular"])
            reported.append(self._test[shown])
            regular.append(self._test[k["regular"]])
            own = self._val[client.id]
            local.append(own[shown])
            local_regular.append(own[k["regular"]])
            per_arch.setdefault(client.arch, []).append(reported[-1])
        metrics = {
            "global_acc": _mean(reported),
            "global_acc_regular": _mean(regular),
            "local_acc": _mean(local),
            "local_acc_regular": _mean(local_regular),
        }
        metrics.update({f"acc/{arch}": _mean(accs) for arch, accs in per_arch.items()})
        for name, model in sorted(fed.server.items()):
            metrics.update(self._server_accuracy(name, model, fed))
        for name in sorted({name for c in fed.clients for name in c.extras}):
            owners = [(c, k[f"extra/{name}"]) for c, k in zip(fed.clients, keys) if name in c.extras]
            metrics[f"global_acc_{name}"] = _mean([self._test[key] for _, key in owners])
            metrics[f"local_acc_{name}"] = _mean([self._val[c.id][key] for c, key in owners])
        return {"reported_acc": _reported(metrics, self.reports), **metrics}


def _reported(metrics: dict[str, float], reports: str) -> float:
    """The value of the column the method reports; a method that names a column this evaluation does not write is
    refused in one line, naming the columns it could report."""
    if reports not in metrics:
        raise ConfigError(f"reports: the method reports {reports!r}, which its evaluation does not write; it writes "
                          f"{', '.join(sorted(metrics))}")
    return metrics[reports]


def _pass_cost(work: _Pass, fed: Federation) -> float:
    samples = (len(fed.data.test_y) if work.test else 0) + sum(len(c.val_idx) for c in work.val_clients)
    return float(samples * sum(p.numel() for p in work.model.parameters()))


def _test_total(fed: Federation) -> int:
    """The predictions that count on the global test set: its samples, or its counted tokens."""
    return int(counted_totals(fed.data.test_y, fed.data.is_sequence).sum())


def _server_metrics(name: str, correct: Tensor, fed: Federation, total: int) -> dict[str, float]:
    """A server model's accuracy on the test set from its per-sample ``correct`` counts (on the host) out of
    ``total`` counted predictions, and on each domain's test samples (the correct and counted predictions of that
    domain's samples alone)."""
    metrics = {f"server_acc/{name}": _accuracy(int(correct.sum()), total)}
    domains = fed.data.domains
    if domains is None:
        return metrics
    totals = counted_totals(fed.data.test_y, fed.data.is_sequence).cpu()
    for domain in domains.names:
        part = torch.from_numpy(domains.test_subset(domain))
        metrics[f"server_acc/{name}/{domain}"] = _accuracy(int(correct[part].sum()), int(totals[part].sum()))
    return metrics


def _val_total(client: Client, fed: Federation) -> int:
    """The predictions that count on ``client``'s validation split: its samples, or their counted tokens."""
    if not fed.data.is_sequence:
        return len(client.val_idx)
    y = fed.data.train_y[client.val_idx.to(fed.data.train_y.device)]
    return int(counted_totals(y, True).sum())


def _accuracy(correct: int, total: int) -> float:
    """``float32(correct) / total`` (torchmetrics' micro accuracy, bit for bit: IEEE float32 division, on the
    host); NaN for no sample."""
    if total == 0:
        return float("nan")
    return float(np.float32(correct) / np.float32(total))


def _mean(values: list[float]) -> float:
    kept = [v for v in values if v == v]  # drop NaN (a client with no validation samples)
    return sum(kept) / len(kept) if kept else float("nan")
