"""What lit-fl knows of each image-file dataset without importing torch: its files under ``data.root``, its class
count, the side its images are resized to, how to get it, and which ``data.options`` its loader takes.

These are the datasets of the papers that are stored as image files (or one ``.npz``), not as arrays torchvision
holds in memory (:mod:`lit_fl.data.torchvision_specs`):

* ``caltech101``, ``oxford_pets``, ``stanford_cars``: DFML Tables 5 and 7 (sec. 4.1; Caltech101 with its own 80:20
  global test split), read through torchvision's own classes and folder layouts;
* ``tiny_imagenet``: FedORION Table 2's TinyImagenet column, in the layout it is distributed in;
* ``pathmnist``: UA-PDFL Table 5, MedMNIST's ``pathmnist.npz``.

The image side: DFML names none for its three datasets. It trains them with batches of 8 (EfficientNets) and 16
(ResNets) where every other dataset gets 64 (App. A.2), which points to ImageNet-size inputs; 224 x 224, the side
EfficientNet-B0 and ResNet were designed for, is the default, and ``data.options.size`` changes it. Tiny-ImageNet
(64 x 64) and PathMNIST (28 x 28, RGB) keep the size they are distributed in, which FedORION and UA-PDFL use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lit_fl.constraints import NonNegativeInt, PositiveInt
from lit_fl.data.options import check_options
from lit_fl.errors import DatasetNotFoundError
from lit_fl.file_schema import FileSchema


@dataclass(frozen=True)
class ImageFileSpec:
    """How one image-file dataset lies under ``data.root``."""

    title: str  # human-readable name used in messages
    num_classes: int
    layout: str  # the expected layout under root, for messages
    markers: tuple[str, ...]  # paths under root that exist once the dataset is there
    size: int  # default side (pixels) of the square images the loader returns
    source: str  # where to get it, for messages
    downloads: bool = False  # torchvision downloads it with ``data.download true``
    options: tuple[str, ...] = ("size",)  # the ``data.options`` its loader takes

    @property
    def schema(self) -> FileSchema:
        """The files under ``data.root``: a file that breaks the layout is one line naming it and the layout."""
        return FileSchema(self.layout, key="data.root")


IMAGE_SPECS: dict[str, ImageFileSpec] = {
    "caltech101": ImageFileSpec(
        "Caltech101", 101, "caltech101/101_ObjectCategories/<category>/image_0001.jpg ... (torchvision's layout; "
        "BACKGROUND_Google is not a class)", ("caltech101/101_ObjectCategories",), 224,
        "run once with `--data.download true` (torchvision downloads it) or unpack caltech-101.zip there",
        downloads=True, options=("size", "split_seed"),
    ),
    "oxford_pets": ImageFileSpec(
        "Oxford-IIIT Pet", 37, "oxford-iiit-pet/images/*.jpg and oxford-iiit-pet/annotations/{trainval,test}.txt "
        "(torchvision's layout)", ("oxford-iiit-pet/images", "oxford-iiit-pet/annotations"), 224,
        "run once with `--data.download true` (torchvision downloads it) or unpack images.tar.gz and "
        "annotations.tar.gz there", downloads=True,
    ),
    "stanford_cars": ImageFileSpec(
        "Stanford Cars", 196, "stanford_cars/devkit/{cars_meta.mat,cars_train_annos.mat}, stanford_cars/cars_train/, "
        "stanford_cars/cars_test/ and stanford_cars/cars_test_annos_withlabels.mat (torchvision's layout)",
        ("stanford_cars/devkit/cars_meta.mat", "stanford_cars/devkit/cars_train_annos.mat", "stanford_cars/cars_train",
         "stanford_cars/cars_test", "stanford_cars/cars_test_annos_withlabels.mat"), 224,
        "torchvision cannot download it (its original URL is gone): copy the files there by hand",
    ),
    "tiny_imagenet": ImageFileSpec(
        "Tiny-ImageNet", 200, "tiny-imagenet-200/wnids.txt, tiny-imagenet-200/train/<wnid>/images/*.JPEG, "
        "tiny-imagenet-200/val/images/*.JPEG and tiny-imagenet-200/val/val_annotations.txt",
        ("tiny-imagenet-200/wnids.txt", "tiny-imagenet-200/train", "tiny-imagenet-200/val/val_annotations.txt"), 64,
        "torchvision has no Tiny-ImageNet: unzip http://cs231n.stanford.edu/tiny-imagenet-200.zip there",
    ),
    "pathmnist": ImageFileSpec(
        "PathMNIST", 9, "pathmnist.npz (MedMNIST: train_images, train_labels, val_images, val_labels, test_images, "
        "test_labels)", ("pathmnist.npz",), 28,
        "torchvision has no MedMNIST: `pip install medmnist` and run "
        "`python -c \"import medmnist; medmnist.PathMNIST(split='train', download=True, root='ROOT')\"` once",
    ),
}


def require_layout(name: str, root: str | Path, download: bool) -> None:
    """Raise :class:`DatasetNotFoundError` (one line naming the expected layout) when the files of ``name`` are not
    under ``root`` and ``download`` cannot fetch them (checked before torch loads; nothing is downloaded here)."""
    spec = IMAGE_SPECS[name]
    if download and spec.downloads:
        return
    root = Path(root).expanduser().resolve()
    missing = [marker for marker in spec.markers if not (root / marker).exists()]
    if missing:
        cannot = "`--data.download true` cannot fetch it; " if download else ""
        raise DatasetNotFoundError(
            f"data.root: {spec.title} not found under {root} (no {missing[0]}); expected {spec.layout}; "
            f"{cannot}{spec.source.replace('ROOT', str(root))}"
        )


def image_file_options(size: PositiveInt, split_seed: NonNegativeInt = 0) -> None:
    """The ``data.options`` an image-file loader may take (:attr:`ImageFileSpec.options` says which): ``size``, the
    side in pixels (default :attr:`ImageFileSpec.size`); ``split_seed``, the seed of Caltech101's 80:20 split."""


def image_options(name: str, options: dict[str, object]) -> dict[str, int]:
    """The loader's ``data.options`` with their defaults, checked against :func:`image_file_options`
    (:func:`~lit_fl.data.options.check_options`)."""
    spec = IMAGE_SPECS[name]
    check_options(name, image_file_options, options, allowed=spec.options)
    chosen: dict[str, int] = {"size": spec.size, "split_seed": 0, **options}  # type: ignore[dict-item]
    return {key: chosen[key] for key in spec.options}
