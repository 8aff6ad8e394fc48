"""Build a :class:`Federation` from the data and model config: partition, splits, models, class proportions."""

from __future__ import annotations

import copy

import numpy as np
import torch

from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data.dataset import ImageDataset
from lit_fl.data.natural import partition_natural
from lit_fl.data.partition import class_proportions, partition, split_train_val
from lit_fl.data.proxy import build_proxy, held_out_proxy_idx
from lit_fl.data.registry import FEDERATED, load_dataset
from lit_fl.errors import ConfigError
from lit_fl.federation.faults import FaultsConfig
from lit_fl.federation.state import Client, Federation
from lit_fl.federation.topology import TopologyConfig, build_topology
from lit_fl.file_schema import FileSchema
from lit_fl.models import assign_evenly, create_model, resolve_pool
from lit_fl.models.registry import check_model_for_data


def load_configured(data: DataConfig, seed: int) -> ImageDataset:
    """The dataset of ``data`` (``data.options`` to its loader); a federated dataset under ``data.partition:
    natural`` reads only the ``data.num_clients`` clients the natural partition draws
    (:func:`lit_fl.data.natural.select_clients`, the same draw)."""
    options = dict(data.options)
    if data.partition == "natural" and data.dataset in FEDERATED:
        options.setdefault("num_clients", data.num_clients)
    return load_dataset(data.dataset, data.root, data.download, seed, **options)


def build_federation(
    dataset: ImageDataset,
    data: DataConfig,
    models: ModelsConfig,
    seed: int,
    channels_last: bool | None = None,
    topology: TopologyConfig | None = None,
    faults: FaultsConfig | None = None,
    same_init: bool = True,
) -> Federation:
    """Clients over ``dataset`` (already on its target device).

    Partition and train/validation split draw from one generator seeded by ``seed``. With ``same_init`` every
    architecture is initialised once from a seed of its own and copied to all its clients (same init per
    architecture, DFML Algorithm 2), so two algorithms with the same seed start from identical federations;
    without it every client draws its own initial weights from a seed of its own (``models.same_init``).

    ``channels_last=None`` puts images and models in the channels-last layout when every architecture is a
    CNN of the ``cnn_*`` family (20-50% faster convolutions on CPU, measured) and keeps the default layout
    otherwise: on torch 2.15's CPU backend the backward pass of a channels-last 1x1 stride-2 convolution (the
    ResNet shortcut) crashes inside oneDNN.
    """
    check_labels(dataset, data)
    pool = resolve_pool(models.pool)
    for arch in dict.fromkeys(pool):
        check_model_for_data(arch, "models.pool", dataset.is_sequence, dataset.name, dataset.input_shape)
    archs = assign_evenly(pool, data.num_clients)
    if channels_last is None:
        channels_last = all(arch.startswith("cnn_") for arch in archs)
    dataset = dataset.to(dataset.train_x.device, channels_last=channels_last)
    if data.augment != "auto":
        dataset = dataset.with_augment(data.augment)
    splits, server_idx = client_splits(dataset, data, seed)
    device = dataset.train_x.device
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    initial = {arch: _init_model(arch, dataset, seed, index) for index, arch in enumerate(dict.fromkeys(archs))}
    clients = []
    for n, (arch, split) in enumerate(zip(archs, splits)):
        train_idx = torch.from_numpy(split.train)
        model = copy.deepcopy(initial[arch]) if same_init else _init_client_model(arch, dataset, seed, n)
        clients.append(
            Client(
                id=n,
                arch=arch,
                model=model.to(device, memory_format=fmt),
                train_idx=train_idx,
                val_idx=torch.from_numpy(split.val),
                class_proportions=class_proportions(dataset.train_y.cpu()[train_idx], dataset.num_classes),
            )
        )
    graph = build_topology(topology or TopologyConfig(), data.num_clients, seed)
    federation = Federation(clients, dataset, seed, graph, faults)
    federation.server_idx = torch.from_numpy(server_idx)
    federation.proxy = build_proxy(data.proxy, dataset, server_idx, seed, data.root, data.download, channels_last)
    held_out = held_out_proxy_idx(data.proxy, server_idx, seed)
    federation.proxy_idx = None if held_out is None else torch.from_numpy(held_out)
    return federation


def check_labels(dataset: ImageDataset, data: DataConfig) -> None:
    """Every train (so every client's train and validation) and test label is one of the model's
    ``dataset.num_classes`` classes: a file whose labels reach further (a digits-only EMNIST file holding all 62
    classes) is one line naming the dataset, its root and the label, before any model is built."""
    classes = dataset.num_classes
    schema = FileSchema(f"labels in 0..{classes - 1} (the model's {classes} classes)", key="data.dataset")
    for split, labels in (("train", dataset.train_y), ("test", dataset.test_y)):
        if labels.numel():
            low, high = int(labels.min()), int(labels.max())
            bad = high if high >= classes else low
            schema.require(f"{dataset.name} (data.root {data.root})", 0 <= low and high < classes,
                           f"its {split} data holds label {bad}, outside the model's classes")


def client_splits(dataset: ImageDataset, data: DataConfig, seed: int) -> tuple[list, np.ndarray]:
    """Every client's train/validation indices and the held-out server indices: the partition of ``data``
    drawn from one generator seeded by ``seed`` (``lit-fl partition`` shows exactly this)."""
    labels = dataset.train_y.cpu().numpy()
    rng = np.random.default_rng([seed, 0])
    server_idx, client_pool = hold_out(len(labels), data.server_fraction, np.random.default_rng([seed, 6]))
    if data.partition == "natural":
        parts = partition_natural(dataset.clients, len(labels), client_pool, data.num_clients, seed, dataset.name)
    else:
        if dataset.is_sequence and data.partition != "iid":
            raise ConfigError(f"data.partition: {data.partition} splits by class label; {dataset.name} holds token "
                              "sequences; allowed: iid, natural")
        parts = partition(labels[client_pool], data.num_clients, data.partition, rng, beta=data.beta, zeta=data.zeta)
        parts = [client_pool[p] for p in parts]
    return split_train_val(parts, data.val_fraction, rng), server_idx


def hold_out(num_samples: int, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(server indices, client indices)``: a random ``fraction`` of the train set kept from every client.
    With ``fraction = 0`` nothing is drawn, so the partition stream is unchanged."""
    if fraction <= 0:
        return np.empty(0, dtype=np.int64), np.arange(num_samples)
    order = rng.permutation(num_samples)
    cut = int(round(fraction * num_samples))
    return np.sort(order[:cut]), np.sort(order[cut:])


def _init_model(arch: str, dataset: ImageDataset, seed: int, index: int) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1_000 + index)
        return create_model(arch, dataset.input_shape, dataset.num_classes)


def _init_client_model(arch: str, dataset: ImageDataset, seed: int, client: int) -> torch.nn.Module:
    """Client ``client``'s own random initialisation (``models.same_init: false``)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(np.random.SeedSequence([seed, 7, client]).generate_state(1)[0]))
        return create_model(arch, dataset.input_shape, dataset.num_classes)
