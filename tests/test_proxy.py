"""``data.proxy``: unlabeled public inputs on the server (lit_fl/data/proxy.py; docs/baselines.md "Proxy data").

The held-out slice gives ``size`` samples no client holds, drawn by the seed; a second dataset read from its real
on-disk format (FashionMNIST's IDX files, written here) gives its train inputs and never its labels; bad keys are one
line each, naming the key and what is allowed."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli, tiny_config, write_config

from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data import load_dataset
from lit_fl.data.proxy import ProxyConfig, proxy_batches
from lit_fl.data.registry import list_datasets
from lit_fl.data.torchvision_specs import SPECS
from lit_fl.errors import ConfigError
from lit_fl.federation.builder import build_federation

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPE_28 = {"num_classes": 4, "input_shape": [1, 28, 28], "num_train": 300, "num_test": 40}


def federation(proxy: dict, server_fraction: float = 0.0, options: dict | None = None, seed: int = 0,
               root: Path | str = "data"):
    options = options or dict(SHAPE_28)
    data = DataConfig(dataset="synthetic", num_clients=4, server_fraction=server_fraction, options=options,
                      proxy=proxy, root=str(root))  # type: ignore[arg-type]
    return build_federation(load_dataset("synthetic", seed=seed, **options), data, ModelsConfig(pool=["cnn_4_8"]), seed)


def write_idx(path: Path, array: np.ndarray) -> None:
    """An IDX file as MNIST/FashionMNIST ship them: magic 0x08<ndim>, big-endian sizes, uint8 data."""
    header = struct.pack(">I", 0x0800 + array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def fake_fmnist(root: Path, n_train: int = 30) -> np.ndarray:
    """FashionMNIST's four raw IDX files under ``root``; image ``i`` of the train split is constant ``i + 1`` with
    one pixel 255 (so which image was drawn shows in its values). Returns the train images."""
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    train = np.repeat(np.arange(1, n_train + 1, dtype=np.uint8)[:, None, None], 28, 1).repeat(28, 2)
    train[:, 3, 5] = 255
    write_idx(raw / "train-images-idx3-ubyte", train)
    write_idx(raw / "train-labels-idx1-ubyte", np.arange(n_train) % 10)
    write_idx(raw / "t10k-images-idx3-ubyte", train[:5])
    write_idx(raw / "t10k-labels-idx1-ubyte", np.arange(5))
    return train


def test_the_held_out_slice_gives_size_samples_no_client_holds_drawn_by_the_seed() -> None:
    fed = federation({"size": 40}, server_fraction=0.25)
    server = set(fed.server_idx.tolist())
    assert len(server) == 75 and fed.proxy.shape == (40, 1, 28, 28)
    # which train images are they: each proxy input equals exactly one train image, of the held-out slice
    flat = fed.data.train_x.reshape(len(fed.data.train_x), -1)
    rows = [int(torch.nonzero((flat == x.reshape(1, -1)).all(1))[0, 0]) for x in fed.proxy]
    assert len(set(rows)) == 40 and set(rows) <= server
    for client in fed.clients:
        assert not set(rows) & set(client.train_idx.tolist()) and not set(rows) & set(client.val_idx.tolist())
    assert torch.equal(federation({"size": 40}, server_fraction=0.25).proxy, fed.proxy)  # the seed decides
    assert not torch.equal(federation({"size": 40}, server_fraction=0.25, seed=1).proxy, fed.proxy)
    everything = federation({}, server_fraction=0.25).proxy  # size null: the whole slice, in index order
    assert torch.equal(everything, fed.data.train_x[fed.server_idx])


def test_proxy_idx_are_the_train_indices_of_a_held_out_proxy() -> None:
    """``federation.proxy_idx`` (codistillation's distillation set): the train rows of ``federation.proxy`` when the
    proxy is the held-out slice, all of ``server_idx`` for ``size: null``."""
    fed = federation({"size": 40}, server_fraction=0.25)
    assert len(fed.proxy_idx) == 40 and torch.equal(fed.data.train_x[fed.proxy_idx], fed.proxy)
    assert torch.equal(federation({}, server_fraction=0.25).proxy_idx, fed.server_idx)


def test_no_proxy_without_a_held_out_slice_or_dataset() -> None:
    assert len(federation({}).proxy) == 0


def test_a_second_dataset_in_its_real_on_disk_format_is_the_proxy_inputs_only(tmp_path: Path) -> None:
    """FashionMNIST's IDX files (torchvision reads them): ``size`` of its 30 train images by the seed, normalised
    with FashionMNIST's statistics, without labels, on the federation's device."""
    images = fake_fmnist(tmp_path)
    fed = federation({"dataset": "fmnist", "size": 12}, root=tmp_path)
    assert isinstance(fed.proxy, torch.Tensor) and fed.proxy.shape == (12, 1, 28, 28)  # a tensor: no labels
    spec = SPECS["fmnist"]
    raw = fed.proxy[:, 0] * spec.std[0] + spec.mean[0]  # back to [0, 1]
    drawn = [int(round(float(x[0, 0]) * 255)) - 1 for x in raw]  # image i is constant i + 1
    assert len(set(drawn)) == 12 and all(0 <= i < 30 for i in drawn) and drawn == sorted(drawn)
    for x, i in zip(raw, drawn):
        torch.testing.assert_close(x * 255, torch.from_numpy(images[i]).float(), atol=1e-4, rtol=0)
    whole = federation({"dataset": "fmnist"}, root=tmp_path)
    assert whole.proxy.shape == (30, 1, 28, 28) and whole.proxy_idx is None  # no train indices of the federation


def test_proxy_batches_are_epochs_of_permutations_from_the_generator() -> None:
    x = torch.arange(10.0).reshape(10, 1, 1, 1)
    g = torch.Generator().manual_seed(3)
    batches = list(proxy_batches(x, 4, 5, g))
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4]
    g2 = torch.Generator().manual_seed(3)
    first, second = torch.randperm(10, generator=g2), torch.randperm(10, generator=g2)
    assert torch.equal(torch.cat(batches[:3]).flatten(), first.float())
    assert torch.equal(torch.cat(batches[3:]).flatten(), second[:8].float())
    assert list(proxy_batches(x[:0], 4, 5, g)) == []


# -- one line per bad key ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("build", "message"), [
    (lambda: ProxyConfig(size=0), "data.proxy.size must be >= 1, got 0"),
    (lambda: ProxyConfig(dataset="imagenet"), "data.proxy.dataset: unknown dataset 'imagenet'; allowed: "
     f"{', '.join(list_datasets())} (or module:loader of your own, or null for the held-out slice of "
     "data.server_fraction)"),
    (lambda: DataConfig(proxy={"sise": 3}), "data.proxy: unknown key 'sise'; allowed: dataset, size, options"),
    (lambda: federation({"size": 500}, server_fraction=0.25),
     "data.proxy.size must be in [1, 75] (the held-out slice (data.server_fraction) has 75 samples; null for all), "
     "got 500"),
    (lambda: federation({"size": 5}),
     "data.proxy.size: the proxy is the held-out slice (data.proxy.dataset: null) and data.server_fraction is 0; "
     "set data.server_fraction > 0 or data.proxy.dataset"),
    (lambda: federation({"dataset": "digits"}),
     "data.proxy.dataset: digits has inputs of shape 1x8x8, the federation's synthetic 1x28x28; allowed: a dataset "
     "of shape 1x28x28"),
], ids=["size-zero", "unknown-dataset", "unknown-key", "size-too-large", "size-without-source", "shape"])
def test_a_bad_proxy_key_is_one_line_naming_it(build, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build()
    assert str(info.value) == message and "\n" not in message


@pytest.mark.parametrize(("flags", "message"), [
    (("--data.proxy.size", "0"), "data.proxy.size must be >= 1, got 0"),
    (("--data.proxy.dataset", "digits", "--data.proxy.size", "5"),
     "data.proxy.dataset: digits has inputs of shape 1x8x8, the federation's synthetic 1x28x28; allowed: a dataset "
     "of shape 1x28x28"),
    (("--data.proxy.sizee", "3"), "data.proxy.sizee: unknown key; allowed keys of data.proxy: dataset, options, size"),
])
def test_the_command_line_gives_one_line_and_writes_nothing(tmp_path: Path, flags: tuple[str, ...],
                                                           message: str) -> None:
    config = tiny_config("FedDF", rounds=1)
    config["algorithm"]["init_args"] = {"local_epochs": 1, "distill_steps": 2}
    config["data"].update(options=dict(SHAPE_28), server_fraction=0.2)
    cfg = write_config(tmp_path / "c.yaml", config)
    result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs", *flags)
    assert result.rc == 2 and result.err.strip() == f"lit-fl: error: {message}", result.err
    assert not (tmp_path / "runs").exists()
