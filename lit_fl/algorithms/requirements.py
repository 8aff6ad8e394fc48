"""What a method needs from the rest of the config, declared on its class and checked once, here.

    class FedDF(Algorithm):
        requires = (SERVER_BASED, PROXY_DATA.when(lambda algo: algo.distill_steps > 0))

A requirement is a small named object; :func:`check_config` runs every requirement of the configured method before
any data is loaded (``lit-fl fit`` and every run a sweep plans, through :func:`lit_fl.validation.check_experiment`),
:func:`check_dataset` the one that needs the loaded samples (images or token sequences) before the federation is
built. Each refusal is one line naming the key and what is allowed. ``requires`` is a class attribute like any
other: a subclass inherits it, or writes its own (``Parent.requires + (ONE_ARCHITECTURE,)``).

A method that needs images says so by leaving ``sequence_tasks`` False (the default): :data:`IMAGES` applies to it
without being listed. A key that lists client ids is a :class:`ClientIds` (FedORION's ``no_dml``, codistillation's
``large_clients``); a method's own rule across keys can be a requirement of its module (codistillation's
``PoolRules``); what only the built federation shows (a client's architecture, a pool's domain among its clients'
samples) stays in the method's ``setup``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lit_fl.errors import ConfigError

if TYPE_CHECKING:
    from lit_fl.data.dataset import ImageDataset


@dataclass(frozen=True)
class Requirement:
    """``name``: what the method needs, in words; ``applies``: whether it holds for a configured method (None:
    always). A subclass says what is wrong with a config (:meth:`config_problem`) or a dataset
    (:meth:`dataset_problem`), as one line, or None."""

    name: str
    applies: Callable[[Any], bool] | None = None

    def when(self, applies: Callable[[Any], bool]) -> Requirement:
        """This requirement for the configured methods for which ``applies(algorithm)`` holds."""
        return dataclasses.replace(self, applies=applies)

    def holds_for(self, algorithm: Any) -> bool:
        return self.applies is None or self.applies(algorithm)

    def config_problem(self, algorithm: Any, experiment: Any) -> str | None:
        return None

    def dataset_problem(self, algorithm: Any, dataset: ImageDataset) -> str | None:
        return None


@dataclass(frozen=True)
class DefaultTopology(Requirement):
    """No ``topology.*`` key but the defaults (a mesh): the method has no network of clients to shape."""

    def config_problem(self, algorithm: Any, experiment: Any) -> str | None:
        from lit_fl.federation.topology import TopologyConfig

        default = TopologyConfig()
        changed = [f"topology.{f.name}" for f in dataclasses.fields(default)
                   if getattr(experiment.topology, f.name) != getattr(default, f.name)]
        if not changed:
            return None
        return (f"topology: {algorithm.name} {self.name}, so {', '.join(changed)} cannot apply; allowed: the default, "
                f"a mesh (remove {', '.join(changed)})")


@dataclass(frozen=True)
class NoFaults(Requirement):
    """No client fault (``faults.*`` at 0)."""

    def config_problem(self, algorithm: Any, experiment: Any) -> str | None:
        if not experiment.faults.enabled:
            return None
        return (f"faults: {algorithm.name} {self.name}; allowed: faults.drop_prob 0 and faults.return_drop_prob 0")


@dataclass(frozen=True)
class ProxyData(Requirement):
    """Unlabeled data on the server (``data.proxy``): the held-out slice of ``data.server_fraction`` or another
    dataset's train split (``data.proxy.dataset``); ``own_slice``: the held-out slice only."""

    own_slice: bool = False

    def config_problem(self, algorithm: Any, experiment: Any) -> str | None:
        data = experiment.data
        if self.own_slice and data.proxy.dataset is not None:
            return (f"data.proxy.dataset: {algorithm.name} {self.name} of its own train split (data.server_fraction; "
                    "data.proxy.size draws a subset of it), not on another dataset; allowed: null")
        if data.server_fraction > 0 or (data.proxy.dataset is not None and not self.own_slice):
            return None
        other = "" if self.own_slice else " (the held-out slice of the train split), or data.proxy.dataset"
        return f"data.server_fraction: {algorithm.name} {self.name}; allowed: data.server_fraction > 0{other}"


@dataclass(frozen=True)
class OneArchitecture(Requirement):
    """Every client of the one architecture (``models.pool`` as the clients get it)."""

    def config_problem(self, algorithm: Any, experiment: Any) -> str | None:
        from lit_fl.models import assign_evenly, resolve_pool

        archs = list(dict.fromkeys(assign_evenly(resolve_pool(experiment.models.pool), experiment.data.num_clients)))
        if len(archs) == 1:
            return None
        return (f"models.pool: {algorithm.name} {self.name}, so every client needs the same architecture (homogeneous "
                f"models); models.pool gives {len(archs)}: {', '.join(archs)}; allowed: one, e.g. models.pool: "
                f"[{archs[0]}]")


@dataclass(frozen=True)
class AggregatorAndSenders(Requirement):
    """An aggregator and at least one sender: two clients or more; a fixed aggregator among them."""

    def config_problem(self, algorithm: Any, experiment: Any) -> str | None:
        n = experiment.data.num_clients
        if n < 2:
            return f"data.num_clients: {algorithm.name} {self.name}: at least 2 clients"
        fixed = getattr(algorithm, "fixed_aggregator", None)
        if fixed is not None and fixed >= n:
            return f"algorithm.fixed_aggregator: {fixed} is not a client id; allowed: 0..{n - 1}"
        return None


@dataclass(frozen=True)
class ClientIds(Requirement):
    """``algorithm.<key>`` (the method's attribute ``attribute``, by default ``key``), when a list: client ids, each
    of ``0..data.num_clients - 1`` and none twice; ``at_least_one``: an empty list is refused too (``name`` says
    what the list is)."""

    key: str = ""
    attribute: str = ""
    at_least_one: bool = False

    def config_problem(self, algorithm: Any, experiment: Any) -> str | None:
        ids = getattr(algorithm, self.attribute or self.key)
        if not isinstance(ids, (list, tuple)):
            return None
        n = experiment.data.num_clients
        bad = [i for i in ids if not 0 <= i < n]
        if bad:
            return f"algorithm.{self.key}: {bad} are not client ids; allowed: 0..{n - 1}"
        if self.at_least_one and not ids:
            return f"algorithm.{self.key}: the list of {self.name} is empty; allowed: at least one of 0..{n - 1}"
        if len(set(ids)) != len(ids):
            return f"algorithm.{self.key}: {list(ids)} repeats a client; allowed: each client id once"
        return None


@dataclass(frozen=True)
class Images(Requirement):
    """Image samples: the method is built for images (``sequence_tasks`` False)."""

    def dataset_problem(self, algorithm: Any, dataset: ImageDataset) -> str | None:
        if not dataset.is_sequence:
            return None
        from lit_fl.algorithms.registry import ALGORITHMS

        able = sorted(name for name, cls in ALGORITHMS.items() if cls.sequence_tasks)
        return (f"algorithm: {algorithm.name} cannot run on {dataset.name}: its samples are token sequences "
                f"(next-token prediction) and {algorithm.name} {self.name}; methods that run on sequences: "
                f"{', '.join(able)}")


#: every client reaches the server: the topology is the default mesh
SERVER_BASED = DefaultTopology("is server based (every client reaches the server)")
#: no model ever leaves a client: no topology (and, with :data:`NOTHING_SENT`, no fault) applies
ALONE = DefaultTopology("trains every client alone")
NOTHING_SENT = NoFaults("moves no model between clients, so no fault can apply")
#: the method does not simulate lost models
NO_FAULTS = NoFaults("does not simulate client faults")
#: unlabeled public (proxy) data on the server, ``data.proxy``
PROXY_DATA = ProxyData("distils on unlabeled proxy data on the server")
#: unlabeled data held out of the federation's own train split (``data.server_fraction``)
HELD_OUT_DATA = ProxyData("distils on the held-out slice", own_slice=True)
#: weights averaged or exchanged whole between clients
ONE_ARCHITECTURE = OneArchitecture("averages whole models between clients")
#: DecentralizedAlgorithm's round
AGGREGATOR_AND_SENDERS = AggregatorAndSenders("needs an aggregator and a sender")
#: what a method with ``sequence_tasks = False`` needs (not listed in ``requires``)
IMAGES = Images("is built for images")


def requirements_of(algorithm: Any) -> list[Requirement]:
    """The requirements that hold for ``algorithm`` as configured: its class's ``requires``, and :data:`IMAGES`
    unless it runs on token sequences."""
    listed = [*type(algorithm).requires, *(() if type(algorithm).sequence_tasks else (IMAGES,))]
    return [r for r in listed if r.holds_for(algorithm)]


def check_config(experiment: Any) -> None:
    """Refuse, in one line, the first requirement of ``experiment.algorithm`` its config does not meet (before any
    data is loaded)."""
    _refuse(r.config_problem(experiment.algorithm, experiment) for r in requirements_of(experiment.algorithm))


def check_dataset(algorithm: Any, dataset: ImageDataset) -> None:
    """Refuse, in one line, a dataset ``algorithm`` cannot learn from (before the federation is built): its
    requirements, then the method's own :meth:`~lit_fl.algorithms.base.Algorithm.check_dataset`."""
    _refuse(r.dataset_problem(algorithm, dataset) for r in requirements_of(algorithm))
    algorithm.check_dataset(dataset)


def _refuse(problems: Any) -> None:
    problem = next((p for p in problems if p is not None), None)
    if problem is not None:
        raise ConfigError(problem)
