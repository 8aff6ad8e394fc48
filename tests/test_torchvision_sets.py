"""torchvision datasets: clear errors offline; correct tensors from tiny fake files in the real layout."""

from __future__ import annotations

import os
import pickle
import struct
import urllib.error
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.datasets as tvd

from lit_fl.data import list_datasets, load_dataset
from lit_fl.data.torchvision_sets import SPECS, DatasetDownloadError, DatasetNotFoundError
from lit_fl.errors import ConfigError

NAMES = ["cifar10", "cifar100", "fmnist", "mnist", "svhn"]
N_TRAIN, N_TEST = 10, 4  # CIFAR-10 spreads N_TRAIN over its 5 train batches
MARK_ROW, MARK_COL = 1, 2  # one bright pixel (channel 0) per image, to catch H/W or channel mix-ups


def _values(name: str, train: bool) -> list[int]:
    """The constant uint8 value of every channel of the fake images of one split."""
    channels = 1 if name in ("mnist", "fmnist") else 3
    base = 40 if train else 100
    return [base + 30 * c for c in range(channels)]


def _labels(name: str, n: int) -> np.ndarray:
    return (np.arange(n) * 7) % SPECS[name].num_classes


def _images_nchw(name: str, train: bool, n: int, size: int) -> np.ndarray:
    """Fake uint8 ``(N, C, H, W)`` images: constant channels plus the marker pixel."""
    vals = _values(name, train)
    x = np.empty((n, len(vals), size, size), dtype=np.uint8)
    for c, v in enumerate(vals):
        x[:, c] = v
    x[:, 0, MARK_ROW, MARK_COL] = 255
    return x


def _write_idx(path: Path, array: np.ndarray) -> None:
    """An uint8 IDX ("SN3 Pascal Vincent") file as MNIST ships it: magic 0x08<ndim>, big-endian sizes."""
    header = struct.pack(">I", 0x0800 + array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def _fake_mnist(root: Path, name: str) -> None:
    raw = root / SPECS[name].cls_name / "raw"
    raw.mkdir(parents=True)
    for prefix, train, n in (("train", True, N_TRAIN), ("t10k", False, N_TEST)):
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", _images_nchw(name, train, n, 28)[:, 0])
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", _labels(name, n))


def _fake_cifar(root: Path, name: str, monkeypatch: pytest.MonkeyPatch,
                make: Callable[[bool, int], np.ndarray] | None = None) -> None:
    """Pickled batches in torchvision's layout (``make(train, n)``'s uint8 ``(N, 3, 32, 32)`` images, default
    :func:`_images_nchw`); md5 checks become "file exists"."""
    monkeypatch.setattr(tvd.cifar, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))
    cls = getattr(tvd, SPECS[name].cls_name)
    folder = root / cls.base_folder
    folder.mkdir(parents=True)
    label_key = "labels" if name == "cifar10" else "fine_labels"
    train_files, test_files = [f for f, _ in cls.train_list], [f for f, _ in cls.test_list]
    for files, train, n in ((train_files, True, N_TRAIN), (test_files, False, N_TEST)):
        images = (make(train, n) if make else _images_nchw(name, train, n, 32)).reshape(n, -1)
        labels = _labels(name, n)
        for part, file_name in zip(np.array_split(np.arange(n), len(files)), files, strict=True):
            entry = {"data": images[part], label_key: labels[part].tolist()}
            (folder / file_name).write_bytes(pickle.dumps(entry))
    meta = {cls.meta["key"]: [f"class{c}" for c in range(SPECS[name].num_classes)]}
    (folder / cls.meta["filename"]).write_bytes(pickle.dumps(meta))


def _fake_svhn(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``train_32x32.mat``/``test_32x32.mat`` with X (H, W, C, N) and y (N, 1) in 1..10 (10 is digit 0)."""
    from scipy.io import savemat

    monkeypatch.setattr(tvd.svhn, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))
    root.mkdir(parents=True, exist_ok=True)
    for split, train, n in (("train", True, N_TRAIN), ("test", False, N_TEST)):
        x = _images_nchw("svhn", train, n, 32).transpose(2, 3, 1, 0)
        y = _labels("svhn", n).copy()
        y[y == 0] = 10
        savemat(root / f"{split}_32x32.mat", {"X": x, "y": y.reshape(-1, 1).astype(np.uint8)})


def _make_fake_root(root: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name in ("mnist", "fmnist"):
        _fake_mnist(root, name)
    elif name == "svhn":
        _fake_svhn(root, monkeypatch)
    else:
        _fake_cifar(root, name, monkeypatch)


def test_all_names_registered() -> None:
    assert set(NAMES) <= set(list_datasets())


@pytest.mark.parametrize("name", NAMES)
def test_missing_data_gives_clear_error(name: str, tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset(name, root=tmp_path, download=False)
    msg = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert not isinstance(info.value, DatasetDownloadError)
    assert SPECS[name].title in msg
    assert str(tmp_path.resolve()) in msg
    assert "--data.download" in msg


def test_relative_root_is_reported_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetNotFoundError, match=str(tmp_path.resolve() / "data")):
        load_dataset("mnist", root="data", download=False)


@pytest.mark.parametrize("name", NAMES)
def test_loads_fake_files(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_fake_root(tmp_path, name, monkeypatch)
    ds = load_dataset(name, root=tmp_path, download=False)
    spec = SPECS[name]
    channels, size = len(spec.mean), (28 if name in ("mnist", "fmnist") else 32)

    assert ds.name == name
    assert ds.num_classes == spec.num_classes
    assert ds.augment == ("crop_flip" if name in ("cifar10", "cifar100") else "none")
    assert ds.black == pytest.approx(tuple(-m / sd for m, sd in zip(spec.mean, spec.std)))
    assert ds.train_x.shape == (N_TRAIN, channels, size, size)
    assert ds.test_x.shape == (N_TEST, channels, size, size)
    assert ds.train_x.dtype == ds.test_x.dtype == torch.float32
    assert ds.train_y.dtype == ds.test_y.dtype == torch.int64
    assert torch.equal(ds.train_y, torch.from_numpy(_labels(name, N_TRAIN)).long())
    assert torch.equal(ds.test_y, torch.from_numpy(_labels(name, N_TEST)).long())
    assert int(ds.train_y.min()) >= 0 and int(ds.train_y.max()) < ds.num_classes

    for x, train in ((ds.train_x, True), (ds.test_x, False)):
        expected = torch.empty_like(x)
        for c, v in enumerate(_values(name, train)):
            expected[:, c] = (v / 255.0 - spec.mean[c]) / spec.std[c]
        expected[:, 0, MARK_ROW, MARK_COL] = (1.0 - spec.mean[0]) / spec.std[0]
        torch.testing.assert_close(x, expected)


def _ramps(train: bool, n: int) -> np.ndarray:
    """uint8 ``(N, 3, 32, 32)``: channel 0 a ramp along the width (8 x column), channel 1 along the height (8 x row),
    channel 2 constant 100 (train) or 200 (test)."""
    ramp = 8 * np.arange(32, dtype=np.uint8)
    x = np.empty((n, 3, 32, 32), dtype=np.uint8)
    x[:, 0], x[:, 1], x[:, 2] = ramp[None, :], ramp[:, None], 100 if train else 200
    return x


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_resized_to_64_by_hand(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``size: 64`` doubles each side, bilinear with half-pixel centres: output pixel j samples the source at
    j / 2 - 1/4, clamped to [0, 31]. A ramp 8 c becomes 0, 2, 6, 10, ..., 4 j - 2, ..., 246, 248 (j = 0, 1..62, 63);
    a constant stays constant. Tolerance: a few float32 roundings (weights, /255, normalising and back) of values
    <= 1, times 255: 255 * 8 eps."""
    _fake_cifar(tmp_path, name, monkeypatch, make=_ramps)
    ds = load_dataset(name, root=tmp_path, download=False, size=64)
    assert ds.train_x.shape == (N_TRAIN, 3, 64, 64) and ds.test_x.shape == (N_TEST, 3, 64, 64)
    spec = SPECS[name]
    mean, std = torch.tensor(spec.mean).view(1, 3, 1, 1), torch.tensor(spec.std).view(1, 3, 1, 1)
    j = torch.arange(64, dtype=torch.float32)
    ramp = torch.cat([torch.zeros(1), 4 * j[1:63] - 2, torch.full((1,), 248.0)])
    atol = 255 * 8 * torch.finfo(torch.float32).eps
    for x, constant in ((ds.train_x, 100.0), (ds.test_x, 200.0)):
        pixels = (x * std + mean) * 255
        torch.testing.assert_close(pixels[:, 0], ramp.expand(len(x), 64, 64), atol=atol, rtol=0)
        torch.testing.assert_close(pixels[:, 1], ramp[:, None].expand(len(x), 64, 64), atol=atol, rtol=0)
        torch.testing.assert_close(pixels[:, 2], torch.full((len(x), 64, 64), constant), atol=atol, rtol=0)
    same = load_dataset(name, root=tmp_path, download=False, size=32)  # the original size: unchanged
    assert torch.equal(same.train_x, load_dataset(name, root=tmp_path, download=False).train_x)


@pytest.mark.parametrize("size", [0, 6.5, True])
def test_a_bad_size_is_one_line_naming_the_key(size: object, tmp_path: Path) -> None:
    allowed = r"allowed: an integer >= 1 \(or null\)$"
    with pytest.raises(ConfigError, match=rf"^data.options.size: {size!r} is not allowed; {allowed}"):
        load_dataset("cifar100", root=tmp_path, download=False, size=size)


def _offline(*args: object, **kwargs: object) -> None:
    raise urllib.error.URLError("offline")


@pytest.mark.parametrize("name", NAMES)
def test_download_failure_gives_clear_error(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(getattr(tvd, SPECS[name].cls_name), "download", _offline)
    with pytest.raises(DatasetDownloadError) as info:
        load_dataset(name, root=tmp_path, download=True)
    msg = str(info.value)
    assert "download" in msg and "failed" in msg and "offline" in msg
    assert str(tmp_path.resolve()) in msg
    assert "--data.download" in msg
    assert isinstance(info.value.__cause__, urllib.error.URLError)


@pytest.mark.parametrize(
    ("name", "module", "fetch"),
    [("mnist", tvd.mnist, "download_and_extract_archive"), ("svhn", tvd.svhn, "download_url"),
     ("cifar10", tvd.cifar, "download_and_extract_archive")],
)
def test_download_failure_inside_torchvision(
    name: str, module: object, fetch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The network call itself fails; torchvision's own wrapping (MNIST re-raises RuntimeError) is hidden."""
    monkeypatch.setattr(module, fetch, _offline)
    with pytest.raises(DatasetDownloadError, match="download to .* failed") as info:
        load_dataset(name, root=tmp_path, download=True)
    assert info.value.__cause__ is not None


def test_download_true_uses_present_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files already there: download=True must not touch the network."""
    _make_fake_root(tmp_path, "mnist", monkeypatch)
    monkeypatch.setattr(tvd.mnist, "download_and_extract_archive", _offline)
    assert load_dataset("mnist", root=tmp_path, download=True).train_x.shape[0] == N_TRAIN


def test_the_registry_names_exactly_the_datasets_its_modules_register() -> None:
    """``list_datasets`` answers from a static table (no torch); every name in it is registered by its module."""
    import importlib

    from lit_fl.data import registry

    for module in set(registry.BUILTIN.values()):
        importlib.import_module(module)
    assert set(registry.BUILTIN) <= set(registry.DATASETS._entries)  # (tests may register more)
    assert set(SPECS) <= set(registry.BUILTIN)


def test_a_missing_benchmark_is_refused_by_the_config_checks_unless_a_loader_is_registered_under_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lit_fl.config import DataConfig
    from lit_fl.data import registry
    from lit_fl.validation import check_dataset_files

    monkeypatch.delitem(registry.DATASETS._entries, "mnist", raising=False)  # as in a fresh `lit-fl fit` process
    with pytest.raises(DatasetNotFoundError, match="MNIST not found under"):
        check_dataset_files(DataConfig(dataset="mnist", root=str(tmp_path)))
    check_dataset_files(DataConfig(dataset="mnist", root=str(tmp_path), download=True))  # fetched when it loads
    monkeypatch.setitem(registry.DATASETS._entries, "mnist", lambda **kwargs: None)  # a user loader: theirs to check
    check_dataset_files(DataConfig(dataset="mnist", root=str(tmp_path)))


def test_cifar100_at_64_is_a_proxy_of_tiny_imagenets_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FedORION Table 2's Tiny-ImageNet baselines: ``data.proxy: {dataset: cifar100, options: {size: 64}}`` beside a
    federation of 3 x 64 x 64 images (at 32 x 32 it is refused for its shape)."""
    from lit_fl.config import DataConfig, ModelsConfig
    from lit_fl.federation.builder import build_federation

    _fake_cifar(tmp_path, "cifar100", monkeypatch, make=_ramps)
    options = {"num_classes": 4, "input_shape": [3, 64, 64], "num_train": 40, "num_test": 8}

    def federation(proxy: dict) -> object:
        data = DataConfig(dataset="synthetic", num_clients=2, options=options, proxy=proxy,  # type: ignore[arg-type]
                          root=str(tmp_path))
        return build_federation(load_dataset("synthetic", **options), data, ModelsConfig(pool=["cnn_4"]), 0)

    fed = federation({"dataset": "cifar100", "size": 6, "options": {"size": 64}})
    assert fed.proxy.shape == (6, 3, 64, 64)
    with pytest.raises(ConfigError, match="data.proxy.dataset: cifar100 has inputs of shape 3x32x32"):
        federation({"dataset": "cifar100"})
