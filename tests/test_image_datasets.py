"""The image-file datasets (Caltech101, Oxford-IIIT Pet, Stanford Cars, Tiny-ImageNet, PathMNIST), each read from a
tiny dataset the test writes in the real on-disk format: JPEG folders written with PIL in torchvision's layouts (with
its ``.txt`` and ``.mat`` annotations), Tiny-ImageNet's distributed layout, MedMNIST's ``.npz``. Never a mock.

Every JPEG is a solid grey of its class's level (:data:`GREYS`), of an odd size, some of them grayscale files: such
an image survives JPEG and PIL's bilinear resize bit for bit (each fixture checks it), so the expected normalised
tensor is known exactly: ``(grey[label] / 255 - mean) / std`` with the mean and std of the train split's levels.
Comparisons are within float32 rounding of that formula (``assert_close``'s float32 defaults).
"""

from __future__ import annotations

import urllib.error
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio
import torch
import torchvision.datasets as tvd
from PIL import Image

from lit_fl.data import load_dataset
from lit_fl.data.dataset import ImageDataset
from lit_fl.data.image_specs import IMAGE_SPECS
from lit_fl.data.torchvision_sets import DatasetDownloadError
from lit_fl.errors import ConfigError, DatasetNotFoundError

GREYS = [30, 90, 150, 210]  # the grey level of each class's images
SIZE = 12  # data.options.size of the tests
SHAPES = [(20, 30), (17, 40), (33, 9)]  # (width, height) of the written images, cycled


def write_jpeg(path: Path, label: int, index: int) -> Path:
    """A solid-grey JPEG of class ``label``; every third one a grayscale (``L``) file, as Caltech101 has."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shape, grey = SHAPES[index % len(SHAPES)], GREYS[label]
    image = Image.new("L", shape, grey) if index % 3 == 2 else Image.new("RGB", shape, (grey, grey, grey))
    image.save(path, "JPEG", quality=95)
    with Image.open(path) as back:  # the fixture's premise: decoding and resizing keep the grey exactly
        assert np.all(np.asarray(back.convert("RGB").resize((SIZE, SIZE), Image.Resampling.BILINEAR)) == grey)
    return path


def expected_images(labels: torch.Tensor, train_labels: torch.Tensor, size: int = SIZE) -> torch.Tensor:
    """``(grey[label] / 255 - mean) / std`` as ``(N, 3, size, size)``, mean and std over the train split's pixels."""
    levels = torch.tensor(GREYS, dtype=torch.float64)[train_labels] / 255.0
    mean, std = levels.mean(), levels.std(unbiased=False)
    x = (torch.tensor(GREYS, dtype=torch.float64)[labels] / 255.0 - mean) / std
    return x.view(-1, 1, 1, 1).expand(-1, 3, size, size).float()


def assert_grey_dataset(ds: ImageDataset, num_classes: int) -> None:
    """Images of the test size, each the normalised grey of its label, by the train split's statistics only."""
    assert ds.train_x.shape[1:] == ds.test_x.shape[1:] == (3, SIZE, SIZE)
    assert ds.num_classes == num_classes and ds.augment == "none"
    torch.testing.assert_close(ds.train_x, expected_images(ds.train_y, ds.train_y))
    torch.testing.assert_close(ds.test_x, expected_images(ds.test_y, ds.train_y))


def counts(labels: torch.Tensor, num_classes: int) -> list[int]:
    return torch.bincount(labels, minlength=num_classes).tolist()


# -- Caltech101 -------------------------------------------------------------------------------------------------------

CALTECH = {"accordion": 5, "airplanes": 10, "anchor": 7}  # category -> images; sorted names = labels 0, 1, 2


def write_caltech101(root: Path) -> Path:
    """torchvision's layout: ``caltech101/101_ObjectCategories/<category>/image_0001.jpg``, plus BACKGROUND_Google
    (not a class)."""
    folder = root / "caltech101" / "101_ObjectCategories"
    for label, (category, n) in enumerate(CALTECH.items()):
        for i in range(n):
            write_jpeg(folder / category / f"image_{i + 1:04d}.jpg", label, i)
    for i in range(3):
        write_jpeg(folder / "BACKGROUND_Google" / f"image_{i + 1:04d}.jpg", 3, i)
    return root


def test_caltech101_holds_out_20_percent_of_every_category_as_the_global_test_set(tmp_path: Path) -> None:
    """DFML sec. 4.1: "For Caltech101, samples are first split 80:20, where the 20% represents the global test set"
    (stratified: round(0.2 n) of each category)."""
    root = write_caltech101(tmp_path)
    ds = load_dataset("caltech101", root, False, seed=7, size=SIZE, split_seed=0)
    assert_grey_dataset(ds, num_classes=3)
    assert counts(ds.test_y, 3) == [1, 2, 1] and counts(ds.train_y, 3) == [4, 8, 6]
    again = load_dataset("caltech101", root, False, seed=8, size=SIZE, split_seed=0)  # the run's seed is not used
    assert torch.equal(again.test_x, ds.test_x) and torch.equal(again.train_y, ds.train_y)


def test_caltech101_split_seed_draws_another_split_of_the_same_images(tmp_path: Path) -> None:
    root = write_caltech101(tmp_path)
    files = sorted((root / "caltech101" / "101_ObjectCategories" / "airplanes").iterdir())
    for i, path in enumerate(files):  # distinct greys inside one category make the drawn images visible
        Image.new("RGB", SHAPES[0], (GREYS[i % 2],) * 3).save(path, "JPEG", quality=95)
    picks = [load_dataset("caltech101", root, False, seed=0, size=SIZE, split_seed=s).test_x[:, 0, 0, 0]
             for s in range(4)]
    assert len({tuple(p.tolist()) for p in picks}) > 1


def test_caltech101_download_failure_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(tvd.caltech, "download_and_extract_archive", offline)
    with pytest.raises(DatasetDownloadError, match="Caltech101 download to .* failed .*offline") as info:
        load_dataset("caltech101", tmp_path, True, seed=0)
    assert "\n" not in str(info.value)


# -- Oxford-IIIT Pet --------------------------------------------------------------------------------------------------

PETS = ["Abyssinian", "beagle", "Bengal"]  # class ids 1, 2, 3 in the annotation files


def write_oxford_pets(root: Path, train: tuple[int, ...] = (4, 3, 2), test: tuple[int, ...] = (1, 3, 1)) -> Path:
    """torchvision's layout: ``oxford-iiit-pet/images/<Breed>_<i>.jpg`` and ``annotations/{trainval,test}.txt``
    with lines ``<image id> <class id> <species> <breed id>`` (ids from 1)."""
    base = root / "oxford-iiit-pet"
    (base / "annotations").mkdir(parents=True)
    number = 0
    for split, sizes in (("trainval", train), ("test", test)):
        lines = []
        for label, (breed, n) in enumerate(zip(PETS, sizes)):
            for _ in range(n):
                number += 1
                write_jpeg(base / "images" / f"{breed}_{number}.jpg", label, number)
                lines.append(f"{breed}_{number} {label + 1} {1 + (breed[0].islower())} {label + 1}")
        (base / "annotations" / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


def test_oxford_pets_trains_on_trainval_and_tests_on_test(tmp_path: Path) -> None:
    ds = load_dataset("oxford_pets", write_oxford_pets(tmp_path), False, seed=0, size=SIZE)
    assert_grey_dataset(ds, num_classes=3)
    assert counts(ds.train_y, 3) == [4, 3, 2] and counts(ds.test_y, 3) == [1, 3, 1]


def test_oxford_pets_damaged_files_are_one_line_naming_them(tmp_path: Path) -> None:
    root = write_oxford_pets(tmp_path)
    image = next((root / "oxford-iiit-pet" / "images").glob("beagle_*.jpg"))
    image.write_bytes(b"not a jpeg")
    with pytest.raises(ConfigError, match=f"Oxford-IIIT Pet image .* cannot be read .*{image.name}") as info:
        load_dataset("oxford_pets", root, False, seed=0, size=SIZE)
    assert "\n" not in str(info.value)
    (root / "oxford-iiit-pet" / "annotations" / "test.txt").write_text("Abyssinian_1 1\n")
    with pytest.raises(ConfigError, match="annotation file cannot be read"):
        load_dataset("oxford_pets", root, False, seed=0, size=SIZE)


# -- Stanford Cars ----------------------------------------------------------------------------------------------------

def write_stanford_cars(root: Path, train: tuple[int, ...] = (2, 3, 4), test: tuple[int, ...] = (3, 1, 2)) -> Path:
    """torchvision's layout: ``stanford_cars/devkit/{cars_meta,cars_train_annos}.mat``, ``cars_train/``,
    ``cars_test/`` and ``cars_test_annos_withlabels.mat`` (annotation structs with ``fname`` and ``class`` from 1)."""
    base = root / "stanford_cars"
    (base / "devkit").mkdir(parents=True)
    sio.savemat(base / "devkit" / "cars_meta.mat",
                {"class_names": np.array(["AM General Hummer", "Acura RL", "Audi TT"], dtype=object)})
    fields = [(name, "O") for name in ("bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "fname")]
    for folder, annotation_file, sizes in (("cars_train", base / "devkit" / "cars_train_annos.mat", train),
                                           ("cars_test", base / "cars_test_annos_withlabels.mat", test)):
        labels = [label for label, n in enumerate(sizes) for _ in range(n)]
        records = np.zeros(len(labels), dtype=fields)
        for i, label in enumerate(labels):
            write_jpeg(base / folder / f"{i + 1:05d}.jpg", label, i)
            records[i] = (0, 0, 5, 5, label + 1, f"{i + 1:05d}.jpg")
        sio.savemat(annotation_file, {"annotations": records})
    return root


def test_stanford_cars_reads_torchvisions_mat_annotations(tmp_path: Path) -> None:
    ds = load_dataset("stanford_cars", write_stanford_cars(tmp_path), False, seed=0, size=SIZE)
    assert_grey_dataset(ds, num_classes=3)
    assert counts(ds.train_y, 3) == [2, 3, 4] and counts(ds.test_y, 3) == [3, 1, 2]


def test_stanford_cars_cannot_be_downloaded_and_says_so_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("stanford_cars", tmp_path, True, seed=0)
    message = str(info.value)
    assert "\n" not in message and "cannot fetch it" in message and "stanford_cars/devkit/cars_meta.mat" in message


# -- Tiny-ImageNet ----------------------------------------------------------------------------------------------------

WNIDS = ["n01443537", "n01629819", "n01641577"]


def write_tiny_imagenet(root: Path, train: tuple[int, ...] = (3, 2, 4), val: tuple[int, ...] = (2, 2, 1)) -> Path:
    """The distributed layout: ``tiny-imagenet-200/wnids.txt``, ``train/<wnid>/images/<wnid>_<i>.JPEG`` (with the
    ``<wnid>_boxes.txt`` beside them), ``val/images/val_<i>.JPEG`` and tab-separated ``val/val_annotations.txt``."""
    base = root / "tiny-imagenet-200"
    base.mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(WNIDS[::-1]) + "\n")  # file order, not sorted order, sets labels
    for label, (wnid, n) in enumerate(zip(WNIDS[::-1], train)):
        for i in range(n):
            write_jpeg(base / "train" / wnid / "images" / f"{wnid}_{i}.JPEG", label, i)
        (base / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
    lines, number = [], 0
    for label, (wnid, n) in enumerate(zip(WNIDS[::-1], val)):
        for _ in range(n):
            write_jpeg(base / "val" / "images" / f"val_{number}.JPEG", label, number)
            lines.append(f"val_{number}.JPEG\t{wnid}\t0\t0\t63\t63")
            number += 1
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines[::-1]) + "\n")
    return root


def test_tiny_imagenet_labels_follow_wnids_txt_and_val_is_the_test_set(tmp_path: Path) -> None:
    ds = load_dataset("tiny_imagenet", write_tiny_imagenet(tmp_path), False, seed=0, size=SIZE)
    assert_grey_dataset(ds, num_classes=3)
    assert counts(ds.train_y, 3) == [3, 2, 4] and counts(ds.test_y, 3) == [2, 2, 1]


def test_tiny_imagenet_keeps_64_pixels_by_default(tmp_path: Path) -> None:
    base = write_tiny_imagenet(tmp_path, train=(1, 1, 1), val=(1, 0, 0)) / "tiny-imagenet-200"
    for path in base.rglob("*.JPEG"):  # FedORION's Tiny-ImageNet: 64 x 64, as distributed
        grey = int(np.asarray(Image.open(path).convert("L"))[0, 0])
        Image.new("RGB", (64, 64), (grey,) * 3).save(path, "JPEG", quality=95)
    ds = load_dataset("tiny_imagenet", tmp_path, False, seed=0)
    assert ds.input_shape == (3, 64, 64)
    torch.testing.assert_close(ds.train_x, expected_images(ds.train_y, ds.train_y, 64))


def test_tiny_imagenet_wrong_layout_is_one_line_naming_the_file(tmp_path: Path) -> None:
    root = write_tiny_imagenet(tmp_path)
    val_file = root / "tiny-imagenet-200" / "val" / "val_annotations.txt"
    val_file.write_text(val_file.read_text() + "val_9.JPEG\tn99999999\t0\t0\t1\t1\n")
    with pytest.raises(ConfigError, match=f"{val_file}: line 6 is .*, not <file>") as info:
        load_dataset("tiny_imagenet", root, False, seed=0, size=SIZE)
    assert "\n" not in str(info.value)
    for path in (root / "tiny-imagenet-200" / "train" / WNIDS[0] / "images").iterdir():
        path.unlink()
    with pytest.raises(ConfigError, match=f"{WNIDS[0]}/images: no \\*.JPEG training images"):
        load_dataset("tiny_imagenet", root, False, seed=0, size=SIZE)
    (root / "tiny-imagenet-200" / "wnids.txt").unlink()
    with pytest.raises(DatasetNotFoundError, match="no tiny-imagenet-200/wnids.txt.*cs231n") as info:
        load_dataset("tiny_imagenet", root, True, seed=0)  # nothing can download it
    assert "cannot fetch it" in str(info.value)


# -- PathMNIST --------------------------------------------------------------------------------------------------------

def pathmnist_arrays(seed: int = 0, sizes: tuple[int, int, int] = (12, 5, 6), side: int = 28) -> dict[str, np.ndarray]:
    """MedMNIST's arrays: uint8 ``(N, side, side, 3)`` images and ``(N, 1)`` uint8 labels per split."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, n in zip(("train", "val", "test"), sizes):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, side, side, 3), dtype=np.uint8)
        arrays[f"{split}_labels"] = rng.integers(0, 9, (n, 1), dtype=np.uint8)
    return arrays


def test_pathmnist_merges_train_and_val_and_normalises_by_their_statistics(tmp_path: Path) -> None:
    arrays = pathmnist_arrays()
    np.savez_compressed(tmp_path / "pathmnist.npz", **arrays)
    ds = load_dataset("pathmnist", tmp_path, False, seed=0)
    train = np.concatenate([arrays["train_images"], arrays["val_images"]]).astype(np.float64) / 255.0
    mean, std = train.mean(axis=(0, 1, 2)), train.std(axis=(0, 1, 2))  # per channel, train + val only

    def normalised(images: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(((images / 255.0 - mean) / std).transpose(0, 3, 1, 2)).float()

    assert ds.num_classes == 9 and ds.input_shape == (3, 28, 28)
    torch.testing.assert_close(ds.train_x, normalised(np.concatenate([arrays["train_images"], arrays["val_images"]])))
    torch.testing.assert_close(ds.test_x, normalised(arrays["test_images"]))
    assert ds.train_y.tolist() == np.concatenate([arrays["train_labels"], arrays["val_labels"]]).ravel().tolist()
    assert ds.test_y.tolist() == arrays["test_labels"].ravel().tolist()
    assert ds.black == pytest.approx(tuple(-mean / std))


def test_pathmnist_size_option_resizes_with_pil(tmp_path: Path) -> None:
    arrays = pathmnist_arrays(sizes=(2, 1, 1))
    np.savez_compressed(tmp_path / "pathmnist.npz", **arrays)
    assert load_dataset("pathmnist", tmp_path, False, seed=0, size=SIZE).input_shape == (3, SIZE, SIZE)


@pytest.mark.parametrize(("damage", "expected"), [
    ("truncated", "cannot be read as MedMNIST's .npz"),
    ("no_val", "no array val_images, val_labels"),
    ("gray", "train_images has shape \\(N, 28, 28\\) \\(expected uint8 \\(N, \\*, \\*, 3\\)\\)"),
    ("label_9", "test_labels has labels outside 0..8"),
])
def test_pathmnist_damaged_file_is_one_line_naming_it(damage: str, expected: str, tmp_path: Path) -> None:
    path = tmp_path / "pathmnist.npz"
    arrays = pathmnist_arrays()
    if damage == "no_val":
        del arrays["val_images"], arrays["val_labels"]
    elif damage == "gray":
        arrays["train_images"] = arrays["train_images"][..., 0]
    elif damage == "label_9":
        arrays["test_labels"][0] = 9
    np.savez_compressed(path, **arrays)
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ConfigError, match=f"data.root: {path}: {expected}") as info:
        load_dataset("pathmnist", tmp_path, False, seed=0)
    assert "\n" not in str(info.value)


# -- every image-file dataset -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(IMAGE_SPECS))
def test_missing_files_are_one_line_naming_the_expected_layout(name: str, tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset(name, tmp_path, False, seed=0)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"data.root: {IMAGE_SPECS[name].title} not found under")
    assert str(tmp_path.resolve()) in message and IMAGE_SPECS[name].layout in message


@pytest.mark.parametrize("name", sorted(IMAGE_SPECS))
def test_the_config_checks_refuse_missing_files_and_bad_options_before_loading(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lit_fl.config import DataConfig
    from lit_fl.data import registry
    from lit_fl.validation import check_dataset_files

    monkeypatch.delitem(registry.DATASETS._entries, name, raising=False)  # as in a fresh `lit-fl fit` process

    with pytest.raises(DatasetNotFoundError, match="not found under"):
        check_dataset_files(DataConfig(dataset=name, root=str(tmp_path)))
    with pytest.raises(ConfigError, match=f"data.options: unknown key 'num_classes' \\({name} takes no such option"):
        check_dataset_files(DataConfig(dataset=name, root=str(tmp_path), options={"num_classes": 3}))
    with pytest.raises(ConfigError, match="data.options.size: 0 is not allowed; allowed: an integer >= 1"):
        check_dataset_files(DataConfig(dataset=name, root=str(tmp_path), options={"size": 0}))


def test_a_fit_runs_on_a_written_dataset(tmp_path: Path) -> None:
    """``lit-fl fit`` end to end on the PathMNIST file: one round of decentralized FedAvg."""
    from conftest import run_cli, tiny_config, write_config

    np.savez_compressed(tmp_path / "pathmnist.npz", **pathmnist_arrays(sizes=(60, 20, 20), side=8))
    config = tiny_config("DecentralizedFedAvg", rounds=1)
    config["data"] = {"dataset": "pathmnist", "root": str(tmp_path), "num_clients": 4, "partition": "iid"}
    result = run_cli("fit", "--config", write_config(tmp_path / "c.yaml", config), "--run_dir", tmp_path / "runs")
    assert result.rc == 0, result.err
