"""Federation state: every client's models and data, plus the random streams of the run.

Client state lives here, not in Lightning objects (DESIGN). A checkpoint is :meth:`Federation.state_dict`.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from lit_fl.data.dataset import ImageDataset
from lit_fl.federation.faults import FaultsConfig
from lit_fl.federation.fingerprint import Stamp, stamp
from lit_fl.federation.topology import Topology, mesh
from lit_fl.models import num_parameters
from lit_fl.steps.aggregation import load_weights

if TYPE_CHECKING:
    from lit_fl.privacy.exchange import ExchangePlan
    from lit_fl.privacy.plan import PrivacyPlan
    from lit_fl.privacy.sample_level import SamplePlan
    from lit_fl.privacy.state import PrivacyState
    from lit_fl.system.config import SystemConfig
    from lit_fl.system.profiles import ClientSystem


class WeightsToken:
    """Names one state dict handed to several clients (a cluster's average). Clients that loaded it and whose
    weights have not changed since (same :func:`~lit_fl.federation.fingerprint.stamp`) hold the same weights: the
    evaluator fingerprints them once, not once per client."""

    __slots__ = ("__weakref__",)


class Client:
    """One client: its regular model, optional frozen peak model and local weight ``alpha_n``.

    ``extras`` holds further models of a method (e.g. FML's ``meme``), evaluated as ``global_acc_<name>``.
    Nothing needs to be marked when a model changes: the evaluator notices every change by itself
    (:func:`~lit_fl.federation.fingerprint.stamp`).

    **Copy on write.** ``peak_n = W_n`` does not copy: the peak shares the regular model's storage until the
    regular model is about to change, so a client that does not take part in a round costs one model, not two.
    Reading :attr:`model` is that moment: it gives the peak a copy of its own first, because whoever asks for
    the regular model may train it. Code that only reads (evaluation, checkpoints) uses :attr:`regular_model`,
    which never copies. The peak is frozen: read it, never train it.
    """

    def __init__(
        self,
        id: int,  # noqa: A002 - the paper's client index n
        arch: str,
        model: nn.Module,
        train_idx: Tensor,
        val_idx: Tensor,
        class_proportions: Tensor,
        peak: nn.Module | None = None,
        alpha_peak: float = 0.0,
        extras: dict[str, nn.Module] | None = None,
    ) -> None:
        self.id, self.arch = id, arch
        self._model = model
        self.train_idx, self.val_idx, self.class_proportions = train_idx, val_idx, class_proportions
        self._peak = peak  # the peak's own storage; None while it shares the regular model's
        self._peak_shared = False
        self.alpha_peak = alpha_peak
        self.extras: dict[str, nn.Module] = extras if extras is not None else {}
        self.num_params = num_parameters(model)
        #: ``(token, stamp)`` when the regular weights were last set from a shared state dict
        self.weights_token: tuple[WeightsToken, Stamp] | None = None

    def __repr__(self) -> str:
        return f"Client(id={self.id}, arch={self.arch!r}, num_train={self.num_train})"

    @property
    def num_train(self) -> int:
        return len(self.train_idx)

    @property
    def model(self) -> nn.Module:
        """The regular model ``W_n``, for training or sending: a peak sharing it gets its own copy first."""
        if self._peak_shared:
            self._peak = copy.deepcopy(self._model).requires_grad_(False)
            self._peak_shared = False
        return self._model

    @property
    def regular_model(self) -> nn.Module:
        """The regular model for reading only (evaluation, checkpoints): never copies a shared peak."""
        return self._model

    @property
    def peak(self) -> nn.Module | None:
        """The peak model ``peak_n`` (DFML Algorithm 1), ``None`` before the first :meth:`update_peak`. Read only:
        while it shares storage this *is* the regular model object."""
        return self._model if self._peak_shared else self._peak

    @property
    def peak_shared(self) -> bool:
        """Whether the peak currently shares the regular model's storage (they are equal)."""
        return self._peak_shared

    def set_weights(self, state: dict[str, Tensor], token: WeightsToken | None = None) -> None:
        """Replace the regular model's weights (a received model). ``token`` names ``state`` when several clients
        receive it (see :class:`WeightsToken`)."""
        model = self.model
        load_weights(model, state)
        self.weights_token = (token, stamp(model)) if token is not None else None

    def shared_weights(self) -> WeightsToken | None:
        """The token of the state dict the regular weights were set from, if they have not changed since."""
        token = self.weights_token
        return token[0] if token is not None and token[1] == stamp(self._model) else None

    def update_peak(self, alpha: float) -> None:
        """``peak_n = W_n`` and ``alpha_n = alpha`` (DFML Algorithm 1, last lines); shares storage (no copy)."""
        self._peak, self._peak_shared = None, True
        self.alpha_peak = alpha

    def reported_model(self) -> nn.Module:
        """The model whose accuracy is reported: the peak model when there is one (DFML sec. 4.1)."""
        peak = self.peak
        return peak if peak is not None else self._model

    def state_dict(self) -> dict[str, Any]:
        """Weights and ``alpha_n``; a peak that shares the regular model's storage is stored once."""
        return {
            "model": self._model.state_dict(),
            "peak": None if self._peak_shared or self._peak is None else self._peak.state_dict(),
            "peak_shared": self._peak_shared,
            "alpha_peak": self.alpha_peak,
            "extras": {name: m.state_dict() for name, m in self.extras.items()},
        }

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self._model.load_state_dict(saved["model"])
        if saved.get("peak_shared"):
            self._peak, self._peak_shared = None, True
        elif saved["peak"] is not None:
            if self._peak is None or self._peak_shared:
                self._peak = copy.deepcopy(self._model).requires_grad_(False)
            self._peak_shared = False
            self._peak.load_state_dict(saved["peak"])
        else:
            self._peak, self._peak_shared = None, False
        self.alpha_peak = float(saved["alpha_peak"])
        for name, extra_state in saved["extras"].items():  # older checkpoints' version counters are not read
            self.extras[name].load_state_dict(extra_state)


class RandomStreams:
    """One seeded generator per concern that advances during training (SPEC/DESIGN "Randomness").

    ``selection`` draws aggregators and senders, ``data_order`` shuffles batches and augments, ``faults``
    draws client failures, ``algorithm`` serves a method's own draws (e.g. Federated Dropout's indices,
    Def-KT's receivers). Differential privacy's noise has its own stream in
    :class:`~lit_fl.privacy.state.PrivacyState`, in a private run only. Partition
    and initialisation streams are used once at build time and are rebuilt from the seed.
    """

    def __init__(self, seed: int) -> None:
        self.selection = np.random.default_rng([seed, 1])
        self.data_order = torch.Generator().manual_seed(seed * 1_000_003 + 2)
        self.faults = np.random.default_rng([seed, 4])
        self.algorithm = np.random.default_rng([seed, 5])

    def state_dict(self) -> dict[str, Any]:
        return {
            "selection": self.selection.bit_generator.state,
            "data_order": self.data_order.get_state(),
            "faults": self.faults.bit_generator.state,
            "algorithm": self.algorithm.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.selection.bit_generator.state = state["selection"]
        self.data_order.set_state(state["data_order"])
        self.faults.bit_generator.state = state["faults"]
        self.algorithm.bit_generator.state = state["algorithm"]


class Federation:
    """All clients, the dataset they index into, the topology and fault model, the completed round and the
    random streams."""

    def __init__(
        self,
        clients: list[Client],
        data: ImageDataset,
        seed: int,
        topology: Topology | None = None,
        faults: FaultsConfig | None = None,
    ) -> None:
        self.clients = clients
        self.data = data
        self.seed = seed
        self.topology = topology or mesh(len(clients))
        self.faults = faults or FaultsConfig()
        self.round = 0
        self.rng = RandomStreams(seed)
        #: Models of a server role (FedORION's global model, codistillation's pools), by name; evaluated
        #: as ``server_acc/<name>``.
        self.server: dict[str, nn.Module] = {}
        #: Train indices held out from every client (``data.server_fraction``): unlabeled server data.
        self.server_idx: Tensor = torch.empty(0, dtype=torch.long)
        #: Unlabeled public (proxy) inputs ``(M, C, H, W)`` on the models' device (``data.proxy``, built by
        #: :func:`lit_fl.data.proxy.build_proxy`; empty without one); batches: :func:`lit_fl.data.proxy.proxy_batches`.
        self.proxy: Tensor = data.train_x[:0]
        #: Train indices of the proxy samples when ``data.proxy`` is the held-out slice (``dataset: null``; all of
        #: ``server_idx`` unless ``data.proxy.size``): codistillation's distillation set. None when the proxy is
        #: another dataset's.
        self.proxy_idx: Tensor | None = torch.empty(0, dtype=torch.long)
        #: User-level differential privacy (``privacy.level user``): the plan and what the rounds carry (the next
        #: clip norm, the noise stream; checkpointed); None without it.
        self.privacy: PrivacyPlan | None = None
        #: Sample-level differential privacy (``privacy.level sample``, DP-SGD): the plan; its state (the noise
        #: seeds' stream, every client's steps) is :attr:`privacy_state`. None without it.
        self.sample_privacy: SamplePlan | None = None
        #: User-level DP on a decentralized method's exchanges (``privacy.level user``): the plan; every client's
        #: reference and releases are in :attr:`privacy_state`. None without it.
        self.exchange_privacy: ExchangePlan | None = None
        self.privacy_state: PrivacyState | None = None
        #: Every client's system (``system.clock``: compute rate, link, availability) and the virtual seconds the
        #: rounds took so far (checkpointed); None without the clock.
        self.systems: list[ClientSystem] | None = None
        self.system_config: SystemConfig | None = None
        self.virtual_s = 0.0

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def num_classes(self) -> int:
        return self.data.num_classes

    def client_costs(self) -> list[float]:
        """Each client's cost for balancing work over processes: train samples x parameters (at least one of
        each)."""
        return [float(max(c.num_train, 1) * max(c.num_params, 1)) for c in self.clients]

    def architectures(self) -> list[str]:
        """Distinct architectures in client order."""
        return list(dict.fromkeys(c.arch for c in self.clients))

    def state_dict(self) -> dict[str, Any]:
        state = {
            "round": self.round,
            "rng": self.rng.state_dict(),
            "server": {name: m.state_dict() for name, m in self.server.items()},
            "clients": [c.state_dict() for c in self.clients],
        }
        if self.privacy_state is not None:
            state["privacy"] = self.privacy_state.state_dict()
        if self.systems is not None:
            state["virtual_s"] = self.virtual_s
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["clients"]) != len(self.clients):
            raise ValueError(f"checkpoint has {len(state['clients'])} clients, the config {len(self.clients)}")
        self.round = int(state["round"])
        self.rng.load_state_dict(state["rng"])
        if self.privacy_state is not None and "privacy" in state:
            self.privacy_state.load_state_dict(state["privacy"])
        self.virtual_s = float(state.get("virtual_s", 0.0))
        for name, server_state in state["server"].items():
            self.server[name].load_state_dict(server_state)
        for client, saved in zip(self.clients, state["clients"]):
            client.load_state_dict(saved)
