"""Typed config sections of ``lit-fl fit`` (``trainer``'s, :class:`TrainerConfig`, is the steps' own:
:mod:`lit_fl.steps.trainer_config`). Every value is checked on construction, and a bad one raises a
``ValueError`` that names the config key and what is allowed (the CLI prints it as one line)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from lit_fl.constraints import HalfOpenUnitInterval, PositiveFloat, PositiveInt, check_fields
from lit_fl.data.proxy_config import ProxyConfig, as_proxy_config
from lit_fl.errors import ConfigError
from lit_fl.steps.trainer_config import TrainerConfig

__all__ = ["DataConfig", "LoggerConfig", "ModelsConfig", "TrainerConfig"]


@dataclass
class DataConfig:
    """Dataset and partition.

    Args:
        dataset: a registered dataset (mnist5k, digits, synthetic, cifar10, cifar100, fmnist, mnist, svhn,
            caltech101, oxford_pets, stanford_cars, tiny_imagenet, pathmnist; the TFF/FedJAX federated SQLite files
            femnist, fed_cifar100, shakespeare, stackoverflow), or ``module:loader`` of your own:
            ``loader(root, download, seed, **options) -> ImageDataset``.
        root: where torchvision, image-file and federated SQLite datasets live (ignored by the bundled ones).
        download: let torchvision download a missing dataset into ``root`` (needs internet; cifar10, cifar100,
            fmnist, mnist, svhn, caltech101, oxford_pets).
        num_clients: N.
        partition: iid, dirichlet (label skew with concentration ``beta``), shards (``zeta`` per client) or
            natural: the clients are a federated dataset's own (femnist, fed_cifar100, shakespeare, stackoverflow),
            ``num_clients`` of them drawn by the seed (as many as the dataset has: all of them).
        beta: Dirichlet concentration (DFML non-IID: 0.1); smaller is more skewed.
        zeta: shards per client for ``shards`` (Def-KT).
        val_fraction: share of every client's partition kept for its validation split (SPEC: 0.2).
        server_fraction: share of the train set held out from every client as unlabeled server data
            (the default source of ``proxy``; codistillation's distillation set, ``proxy.size`` samples of it);
            0 = none.
        proxy: unlabeled public (proxy) data on the server for the distillation baselines (FedDF, ...):
            ``{dataset: NAME | null, size: N | null, options: {...}}``; ``dataset: null`` = the held-out slice of
            ``server_fraction``, a name = that dataset's train split (inputs of the federation's shape); ``size``
            samples drawn by the seed (null = all). docs/baselines.md "Proxy data".
        options: extra keyword arguments of the dataset loader (e.g. num_classes for synthetic; ``size``, the
            image side, for caltech101/oxford_pets/stanford_cars (224), tiny_imagenet (64) and pathmnist (28);
            ``split_seed`` of Caltech101's 80:20 test split).
        augment: train-time augmentation: ``none``, ``crop_flip`` (a random 4-pixel-padded crop with black
            padding plus a horizontal flip, drawn for each sample, on the tensors), ``crop_flip_per_batch``
            (FedJAX's ``cifar100.preprocess_image``: one crop offset in 0..7 and one flip drawn for the whole
            batch) or ``auto`` = the dataset's default: ``crop_flip_per_batch`` for fed_cifar100, ``crop_flip``
            for cifar10/cifar100, ``none`` for every other dataset. The papers differ: DFML names no
            augmentation (its configs say ``none``), knowledge codistillation preprocesses "with the default
            settings in FedJAX" (App. C.1: its configs say ``crop_flip_per_batch``); FedORION and UA-PDFL name
            none.
    """

    dataset: str = "mnist5k"
    root: str = "data"
    download: bool = False
    num_clients: PositiveInt = 10
    partition: Literal["iid", "dirichlet", "shards", "natural"] = "dirichlet"
    beta: PositiveFloat = 0.5
    zeta: PositiveInt = 2
    val_fraction: HalfOpenUnitInterval = 0.2
    server_fraction: HalfOpenUnitInterval = 0.0
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    options: dict[str, Any] = field(default_factory=dict)
    augment: Literal["auto", "none", "crop_flip", "crop_flip_per_batch"] = "auto"

    def __post_init__(self) -> None:
        from lit_fl.data.registry import list_datasets
        from lit_fl.user_code import is_user_spec, load_object

        if is_user_spec(self.dataset):
            load_object(self.dataset, "data.dataset")  # one line naming the real cause if it cannot be loaded
        elif self.dataset not in list_datasets():
            raise ConfigError(f"data.dataset: unknown dataset {self.dataset!r}; allowed: {', '.join(list_datasets())}"
                              " (or module:loader of your own)")
        check_fields(self, "data.")
        self.proxy = as_proxy_config(self.proxy)  # type: ignore[arg-type]


@dataclass
class ModelsConfig:
    """Client architectures.

    Args:
        pool: a pool of DFML Table 10 (h0_cnn, h1_cnn, h1_resnet, h1_vit, h2_cnn, h2_efficientnet,
            high_heterogeneity) or a list of architecture names such as ``[cnn_32_64, resnet18_16_32_64_128,
            vit_128_128, efficientnet_b0, timm:resnet18]``; spread evenly over the clients.
        same_init: every client of an architecture starts from the same initial weights (True) or from its
            own random initialisation (False); None = what the method's paper says (``paper_same_init`` of
            the algorithm: True for DFML and its baselines, Def-KT "all clients are initialized with the same
            model", codistillation's FedAvg pools; False for FedORION ("We randomly initialize the clients'
            models", sec. 4.1) and UA-PDFL, where "each client C_i initializes its model parameters w_i^0").
    """

    pool: str | list[str] = "h2_cnn"
    same_init: bool | None = None

    def __post_init__(self) -> None:
        from lit_fl.models import resolve_pool
        from lit_fl.models.registry import require_known
        from lit_fl.user_code import is_user_spec, load_object

        for arch in resolve_pool(self.pool):
            if is_user_spec(arch):
                load_object(arch, "models.pool")  # one line naming the real cause if it cannot be loaded
            else:
                require_known(arch, "models.pool", " (or module:factory of your own)")


@dataclass
class LoggerConfig:
    """Tracking.

    Args:
        wandb: log to Weights & Biases (offline unless you are logged in).
        project: W&B project.
        entity: W&B entity (team or user); None = your default.
        mode: auto (online when logged in, else offline), offline, online.
        progress: show the per-round progress bar.
        group: W&B group; ``lit-fl sweep`` puts every run of a sweep in the group named after the sweep.
        tags: extra W&B tags (the dataset, partition and pool are always added).
    """

    wandb: bool = True
    project: str = "lit-fl"
    entity: str | None = None
    mode: Literal["auto", "offline", "online"] = "auto"
    progress: bool = True
    group: str | None = None
    tags: list[str] = field(default_factory=list)
