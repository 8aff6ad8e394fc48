"""Client partitions (iid, dirichlet, shards), 80:20 split, class proportions, bundled data, augmentation."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch

from lit_fl.data import PARTITIONS, class_proportions, load_dataset, split_train_val
from lit_fl.data.partition import partition, partition_dirichlet, partition_iid, partition_shards
from lit_fl.data.transforms import random_crop_flip


def _labels(num_classes: int = 10, per_class: int = 100, seed: int = 0) -> np.ndarray:
    labels = np.repeat(np.arange(num_classes), per_class)
    return np.random.default_rng(seed).permutation(labels)


def _assert_exact_cover(parts: list[np.ndarray], n: int) -> None:
    allidx = np.concatenate(parts)
    assert len(allidx) == n, "some index is missing or duplicated"
    assert np.array_equal(np.sort(allidx), np.arange(n))


def _max_class_fraction(parts: list[np.ndarray], labels: np.ndarray, num_classes: int) -> float:
    fracs = [np.bincount(labels[p], minlength=num_classes).max() / len(p) for p in parts]
    return float(np.mean(fracs))


# ----------------------------------------------------------------------------------------------------- iid


@pytest.mark.parametrize("n, clients", [(1000, 10), (1003, 7), (50, 50)])
def test_iid_sizes_and_cover(n, clients):
    labels = _labels(10, n // 10 + 1)[:n]
    parts = partition_iid(labels, clients, np.random.default_rng(0))
    assert len(parts) == clients
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    _assert_exact_cover(parts, n)


def test_iid_is_shuffled_and_seeded():
    labels = _labels()
    a = partition_iid(labels, 10, np.random.default_rng(0))
    b = partition_iid(labels, 10, np.random.default_rng(0))
    c = partition_iid(labels, 10, np.random.default_rng(1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    # not contiguous blocks of the index range
    assert not np.array_equal(a[0], np.arange(100))


# ----------------------------------------------------------------------------------------------- dirichlet


@pytest.mark.parametrize("beta", [0.01, 0.1, 0.5, 100.0])
def test_dirichlet_cover_and_min_two(beta):
    labels = _labels()
    parts = partition_dirichlet(labels, 20, beta, np.random.default_rng(0))
    assert len(parts) == 20
    _assert_exact_cover(parts, len(labels))
    assert min(len(p) for p in parts) >= 2


def test_dirichlet_beta_controls_label_skew():
    labels = _labels(10, 200)
    skewed = partition_dirichlet(labels, 10, 0.1, np.random.default_rng(0))
    uniform = partition_dirichlet(labels, 10, 100.0, np.random.default_rng(0))
    assert _max_class_fraction(skewed, labels, 10) > 0.5
    assert _max_class_fraction(uniform, labels, 10) < 0.2


def _beta_moments(a: float, b: float) -> tuple[float, float, float]:
    """Mean, variance and fourth central moment of Beta(a, b)."""
    mean, var = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    excess = 6 * ((a - b) ** 2 * (a + b + 1) - a * b * (a + b + 2)) / (a * b * (a + b + 2) * (a + b + 3))
    return mean, var, (excess + 3) * var**2


@pytest.mark.parametrize("beta", [0.5, 5.0])
def test_dirichlet_shares_have_the_moments_of_dir_beta(beta):
    """A client's share of a class under Dir_N(beta) is Beta(beta, (N - 1) beta): mean 1/N, variance
    (1/N)(1 - 1/N)/(N beta + 1) (0.015 at N = 10, beta = 0.5; a concentration of beta / N would give 0.06).
    Measured over 1,000 classes of 200 samples x 10 clients = m = 10,000 shares: the sample variance's standard
    error is sqrt((mu_4 - sigma^4) / m) (about 4 % of the variance at beta 0.5); the bound is 5 of them. Dealing
    200 samples rounds each share by at most 1/200, which moves the variance by ~1e-6 (< 1 % of it)."""
    num_clients, num_classes, per_class = 10, 1000, 200
    labels = np.repeat(np.arange(num_classes), per_class)
    parts = partition_dirichlet(labels, num_clients, beta, np.random.default_rng(0))
    counts = np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])  # [client, class]
    shares = (counts / per_class).ravel()
    mean, var, mu4 = _beta_moments(beta, (num_clients - 1) * beta)
    assert shares.mean() == pytest.approx(mean, abs=1e-12)  # every class is dealt whole
    tolerance = 5 * np.sqrt((mu4 - var**2) / shares.size)
    assert abs(shares.var(ddof=1) - var) <= tolerance, (shares.var(ddof=1), var, tolerance)


def test_dirichlet_seeded():
    labels = _labels()
    a = partition(labels, 10, "dirichlet", np.random.default_rng(5), beta=0.5)
    b = partition(labels, 10, "dirichlet", np.random.default_rng(5), beta=0.5)
    c = partition(labels, 10, "dirichlet", np.random.default_rng(6), beta=0.5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_dirichlet_many_clients_tiny_beta_is_fast():
    labels = np.random.default_rng(0).integers(0, 10, 50_000)
    start = time.perf_counter()
    parts = partition_dirichlet(labels, 1000, 0.01, np.random.default_rng(0))
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"dirichlet N=1000 beta=0.01 took {elapsed:.2f}s"
    assert len(parts) == 1000
    assert min(len(p) for p in parts) >= 2
    _assert_exact_cover(parts, len(labels))


def test_dirichlet_rejects_nonpositive_beta():
    with pytest.raises(ValueError, match="beta"):
        partition_dirichlet(_labels(), 10, 0.0, np.random.default_rng(0))


# -------------------------------------------------------------------------------------------------- shards


@pytest.mark.parametrize("zeta", [1, 2, 3])
def test_shards_align_with_classes(zeta):
    clients, classes = 10, 10
    per_class = clients * zeta * 10 // classes  # shards of 10 samples, each inside one class
    labels = _labels(classes, per_class)
    parts = partition_shards(labels, clients, zeta, np.random.default_rng(0))
    assert len(parts) == clients
    _assert_exact_cover(parts, len(labels))
    assert {len(p) for p in parts} == {zeta * 10}
    for p in parts:
        assert len(np.unique(labels[p])) <= zeta
        # every client's samples are zeta whole shards: each label count is a multiple of the shard size
        assert all(c % 10 == 0 for c in np.bincount(labels[p]) if c)


def test_shards_zeta_one_gives_one_class_each_and_all_classes_used():
    labels = _labels(10, 30)
    parts = partition(labels, 10, "shards", np.random.default_rng(3), zeta=1)
    owned = sorted(int(np.unique(labels[p])[0]) for p in parts)
    assert all(len(np.unique(labels[p])) == 1 for p in parts)
    assert owned == list(range(10))


def test_shards_seeded_and_errors():
    labels = _labels()
    a = partition_shards(labels, 10, 2, np.random.default_rng(0))
    b = partition_shards(labels, 10, 2, np.random.default_rng(0))
    c = partition_shards(labels, 10, 2, np.random.default_rng(1))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    with pytest.raises(ValueError):
        partition_shards(labels, 10, 0, np.random.default_rng(0))
    with pytest.raises(ValueError):
        partition_shards(labels[:15], 10, 2, np.random.default_rng(0))


def test_partition_unknown_scheme():
    with pytest.raises(ValueError, match="data.partition") as info:
        partition(_labels(), 10, "pathological", np.random.default_rng(0))
    for name in ("iid", "dirichlet", "shards"):
        assert name in str(info.value)
    assert set(PARTITIONS) == {"iid", "dirichlet", "shards", "natural"}  # natural: lit_fl.data.natural


# ------------------------------------------------------------------------------------------- train / val


def test_split_train_val_80_20():
    labels = _labels()
    parts = partition(labels, 10, "dirichlet", np.random.default_rng(0), beta=0.3)
    parts.append(np.array([2000, 2001]))  # a 2-sample client
    parts.append(np.array([3000, 3001, 3002]))
    splits = split_train_val(parts, 0.2, np.random.default_rng(0))
    assert len(splits) == len(parts)
    for part, s in zip(parts, splits, strict=True):
        assert len(np.intersect1d(s.train, s.val)) == 0
        assert np.array_equal(np.sort(np.concatenate([s.train, s.val])), np.sort(part))
        assert abs(len(s.val) - 0.2 * len(part)) <= 1
        if len(part) >= 2:
            assert len(s.train) >= 1 and len(s.val) >= 1
    assert len(splits[-2].train) == 1 and len(splits[-2].val) == 1
    # exact sizes for a 100-sample client
    s = split_train_val([np.arange(100)], 0.2, np.random.default_rng(0))[0]
    assert (len(s.train), len(s.val)) == (80, 20)
    # the validation samples are random, not the first or last ones
    assert not np.array_equal(s.val, np.arange(20)) and not np.array_equal(s.val, np.arange(80, 100))


def test_split_train_val_seeded_and_single_sample():
    parts = [np.arange(50), np.arange(50, 60)]
    a = split_train_val(parts, 0.2, np.random.default_rng(4))
    b = split_train_val(parts, 0.2, np.random.default_rng(4))
    c = split_train_val(parts, 0.2, np.random.default_rng(5))
    assert all(np.array_equal(x.val, y.val) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x.val, y.val) for x, y in zip(a, c, strict=True))
    one = split_train_val([np.array([7])], 0.2, np.random.default_rng(0))[0]
    assert list(one.train) == [7] and len(one.val) == 0


def test_class_proportions():
    beta = class_proportions(torch.tensor([0, 0, 1, 3]), 5)
    torch.testing.assert_close(beta, torch.tensor([0.5, 0.25, 0.0, 0.25, 0.0]))
    assert beta.sum().item() == pytest.approx(1.0)
    beta = class_proportions(torch.tensor([2, 2, 2]), 3)
    torch.testing.assert_close(beta, torch.tensor([0.0, 0.0, 1.0]))


# ------------------------------------------------------------------------------------------ bundled data


def test_mnist5k():
    ds = load_dataset("mnist5k")
    assert ds.train_x.shape == (4000, 1, 28, 28)
    assert ds.test_x.shape == (1000, 1, 28, 28)
    assert ds.input_shape == (1, 28, 28)
    assert ds.num_classes == 10
    assert torch.bincount(ds.train_y, minlength=10).tolist() == [400] * 10
    assert torch.bincount(ds.test_y, minlength=10).tolist() == [100] * 10
    assert ds.train_x.dtype == torch.float32 and ds.train_y.dtype == torch.int64
    # MNIST-normalised: background (0) maps to -mean/std
    assert ds.train_x.min().item() == pytest.approx(-0.1307 / 0.3081, abs=1e-4)
    # train and test images are different images
    assert not any(torch.equal(ds.test_x[i], ds.train_x[j]) for i in range(3) for j in range(200))


def test_digits():
    ds = load_dataset("digits")
    assert ds.input_shape == (1, 8, 8)
    assert ds.num_classes == 10
    assert len(ds.train_x) + len(ds.test_x) == 1797
    assert len(ds.test_x) == pytest.approx(360, abs=5)
    assert set(ds.test_y.tolist()) == set(range(10))


def test_synthetic_options():
    ds = load_dataset("synthetic", num_classes=4, input_shape=(3, 8, 8), num_train=40, num_test=12)
    assert ds.train_x.shape == (40, 3, 8, 8)
    assert ds.test_x.shape == (12, 3, 8, 8)
    assert ds.num_classes == 4
    assert torch.bincount(ds.train_y, minlength=4).tolist() == [10] * 4
    again = load_dataset("synthetic", num_classes=4, input_shape=(3, 8, 8), num_train=40, num_test=12)
    assert torch.equal(ds.train_x, again.train_x)
    other = load_dataset("synthetic", seed=1, num_classes=4, input_shape=(3, 8, 8), num_train=40, num_test=12)
    assert not torch.equal(ds.train_x, other.train_x)


def test_unknown_dataset():
    with pytest.raises(ValueError, match="data.dataset"):
        load_dataset("imagenet-42")


# ------------------------------------------------------------------------------------------- augmentation


def _candidates(sample: torch.Tensor, padding: int) -> list[torch.Tensor]:
    c, h, w = sample.shape
    padded = torch.nn.functional.pad(sample, (padding,) * 4)
    out = []
    for dy, dx in itertools.product(range(2 * padding + 1), repeat=2):
        window = padded[:, dy : dy + h, dx : dx + w]
        out += [window, window.flip(-1)]
    return out


def test_random_crop_flip_is_a_crop_of_the_padded_input():
    n, padding = 64, 2
    base = torch.arange(1, 17, dtype=torch.float32).view(1, 4, 4)
    x = torch.stack([torch.cat([base + 100 * i, -(base + 100 * i)]) for i in range(n)])  # (n, 2, 4, 4)
    out = random_crop_flip(x, padding=padding, generator=torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    flips, offsets = 0, set()
    for i in range(n):
        cands = _candidates(x[i], padding)
        hits = [k for k, cand in enumerate(cands) if torch.equal(out[i], cand)]
        assert hits, f"sample {i} is not a (flipped) crop of its padded input"
        k = hits[0]
        flips += k % 2
        offsets.add(k // 2)
    # both flip states and many offsets occur in 64 draws
    assert 0 < flips < n
    assert len(offsets) >= 10


def test_random_crop_flip_padding4_and_seeded():
    x = torch.arange(2 * 1 * 16, dtype=torch.float32).view(2, 1, 4, 4) + 1
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a, b = random_crop_flip(x, 4, g1), random_crop_flip(x, 4, g2)
    assert torch.equal(a, b)
    for i in range(2):
        assert any(torch.equal(a[i], cand) for cand in _candidates(x[i], 4))


def test_random_crop_flip_padding0_is_identity_or_flip():
    x = torch.randn(100, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    out = random_crop_flip(x, padding=0, generator=torch.Generator().manual_seed(1))
    same = [torch.equal(out[i], x[i]) for i in range(100)]
    flipped = [torch.equal(out[i], x[i].flip(-1)) for i in range(100)]
    assert all(s or f for s, f in zip(same, flipped, strict=True))
    assert 20 < sum(flipped) < 80


def test_crop_padding_is_black_in_pixel_space():
    """Normalised images are padded with (0 - mean) / std per channel: a black pixel, not a grey 0."""
    from lit_fl.data.transforms import black_value, normalize

    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    raw = torch.full((256, 3, 4, 4), 0.8)  # a bright image in pixel space
    x = normalize(raw, mean, std)
    black = black_value(mean, std)
    out = random_crop_flip(x, padding=4, generator=torch.Generator().manual_seed(0), fill=black)
    pixels = out * torch.tensor(std).view(1, 3, 1, 1) + torch.tensor(mean).view(1, 3, 1, 1)  # back to pixel space
    border = pixels.isclose(torch.zeros(()), atol=1e-6)
    inside = pixels.isclose(torch.full((), 0.8), atol=1e-6)
    assert bool((border | inside).all())  # every pixel is either the image or black padding
    assert 0 < int(border.sum()) < border.numel()  # offsets into the padding do occur
    assert (border.sum(1) % 3 == 0).all() and bool((border.all(1) == border.any(1)).all())  # all channels black


def test_data_augment_key_reaches_the_batches():
    from lit_fl.algorithms import DFML
    from lit_fl.config import DataConfig, ModelsConfig
    from lit_fl.data import load_dataset
    from lit_fl.federation.builder import build_federation

    options = {"num_classes": 4, "input_shape": (3, 8, 8), "num_train": 200, "num_test": 50}
    dataset = load_dataset("synthetic", **options)
    assert dataset.augment == "none"  # the dataset's default
    results = {}
    for augment in ("auto", "none", "crop_flip"):
        data = DataConfig(dataset="synthetic", num_clients=2, options=options, augment=augment)
        fed = build_federation(dataset, data, ModelsConfig(pool=["cnn_4"]), seed=0)
        algo = DFML(batch_size=16)
        client = fed.clients[0]
        x, _ = next(iter(algo.batches(fed, client.train_idx)))
        fed_again = build_federation(dataset, data, ModelsConfig(pool=["cnn_4"]), seed=0)
        order = client.train_idx[torch.randperm(len(client.train_idx), generator=torch.Generator().manual_seed(2))]
        assert fed_again.data.augment == ("none" if augment == "auto" else augment)
        results[augment] = (x, fed.data.train_x[order[:16]])
    for augment in ("auto", "none"):
        x, plain = results[augment]
        assert torch.equal(x, plain)  # batches are the raw samples, untouched
    x, plain = results["crop_flip"]
    assert x.shape == plain.shape and not torch.equal(x, plain)
    with pytest.raises(ValueError, match="data.augment"):
        DataConfig(augment="mixup")


def _fedjax_preprocess(image: np.ndarray, i: int, j: int, flip: bool) -> np.ndarray:
    """FedJAX's ``cifar100.preprocess_image(image, is_train=True)`` for a given draw (offsets ``i, j``, ``flip``),
    written from its documented procedure in float64: 4 zero pixels of padding on uint8 NHWC, the crop, the flip of
    the width axis, then ``(x / 255 - mean) / std``; returned as NCHW."""
    from lit_fl.data.federated_images import CIFAR100_MEAN, CIFAR100_STD

    padded = np.pad(image, [(0, 0), (4, 4), (4, 4), (0, 0)], mode="constant")
    crop = padded[:, i : i + 32, j : j + 32, :]
    if flip:
        crop = np.flip(crop, axis=-2)
    out = (crop.astype(np.float64) / 255 - np.array(CIFAR100_MEAN)) / np.array(CIFAR100_STD)
    return out.transpose(0, 3, 1, 2)


def test_crop_flip_per_batch_draws_one_offset_in_0_to_7_and_one_flip_for_the_batch_as_fedjax() -> None:
    """Issue 37: fed CIFAR-100 as FedJAX preprocesses it (``np.random.randint(8, size=[2])`` offsets, one
    ``randint(2)`` flip, both for the whole batch), which the codistillation paper uses ("the default settings in
    FedJAX"). Tolerance: the float32 rounding of values |x| <= 3 (2.4e-7 an ulp), a few ulps for normalising
    before or after padding."""
    from lit_fl.data.federated_images import CIFAR100_MEAN, CIFAR100_STD
    from lit_fl.data.transforms import batch_crop_flip, black_value, normalize

    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8)
    x = normalize(torch.from_numpy(image).permute(0, 3, 1, 2).float() / 255.0, CIFAR100_MEAN, CIFAR100_STD)
    references = {(i, j, f): torch.from_numpy(_fedjax_preprocess(image, i, j, f).copy()).float()
                  for i in range(9) for j in range(9) for f in (False, True)}
    drawn = []
    for seed in range(300):
        out = batch_crop_flip(x, 4, torch.Generator().manual_seed(seed), fill=black_value(CIFAR100_MEAN, CIFAR100_STD))
        hits = [draw for draw, ref in references.items() if torch.allclose(out, ref, rtol=0, atol=1e-6)]
        assert len(hits) == 1, (seed, hits)  # the whole batch is ONE of FedJAX's draws
        drawn.append(hits[0])
    assert {i for i, _, _ in drawn} == set(range(8)) == {j for _, j, _ in drawn}  # 0..7, never 8
    assert 100 < sum(f for _, _, f in drawn) < 200


def test_fed_cifar100_and_the_codistillation_configs_augment_per_batch_as_fedjax() -> None:
    import yaml

    from lit_fl.configs import ROOT

    images = 0
    for path in sorted((ROOT / "experiments" / "codistillation").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())["data"]
        if data["dataset"] != "stackoverflow":  # token sequences: nothing to crop
            images += 1
            assert data.get("augment") == "crop_flip_per_batch", path.name
    assert images == 6
    import inspect

    from lit_fl.data.federated_images import load_fed_cifar100

    assert 'augment="crop_flip_per_batch"' in inspect.getsource(load_fed_cifar100)  # the dataset's auto
