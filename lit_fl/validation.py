"""Checks of a whole ``lit-fl fit`` config that no single section can make: finite numbers everywhere, what the
method needs (:mod:`lit_fl.algorithms.requirements`), a federation the data can give every client a train and a
validation sample, a topology the clients can form, an accelerator that is there, a run name and folder that can be
written. They run before any data is loaded or model built, and each failure is one :class:`ConfigError` line naming
the dotted key and what is allowed.
"""

from __future__ import annotations

import errno
import math
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lit_fl.errors import ConfigError

#: train-set sizes of the registered datasets that are known without loading them
TRAIN_SIZES = {"mnist5k": 4000, "digits": 1438, "cifar10": 50_000, "cifar100": 50_000, "fmnist": 60_000,
               "mnist": 60_000, "svhn": 73_257}
_NAME = re.compile(r"^[A-Za-z0-9_.+=-]+$")


def check_finite(namespace: Any, prefix: str = "") -> None:
    """Every float of the parsed config is finite (nan and inf pass ``>`` and ``<`` checks silently)."""
    bad = next(_infinite(namespace, prefix), None)
    if bad is not None:
        raise ConfigError(f"{bad[0]}: must be a finite number, got {bad[1]}")


def _infinite(namespace: Any, prefix: str) -> Iterator[tuple[str, float]]:
    """(dotted key, value) of every float of the config that is nan or infinite, list items as ``key[i]``."""
    items = namespace.items() if hasattr(namespace, "items") else vars(namespace).items()
    for key, value in items:
        name = f"{prefix}{key}".replace(".init_args", "")
        nested = hasattr(value, "__dict__") and type(value).__module__.startswith("jsonargparse")
        if hasattr(value, "items") or nested:
            yield from _infinite(value, f"{name}.")
            continue
        values = enumerate(value) if isinstance(value, (list, tuple)) else [(None, value)]
        for i, item in values:
            if isinstance(item, float) and not math.isfinite(item):
                yield (name if i is None else f"{name}[{i}]"), item


def check_experiment(experiment: Any, resume: str | None) -> None:
    from lit_fl.algorithms.requirements import check_config

    check_run_location(experiment, resume)
    check_config(experiment)  # what the method needs (a server, one architecture, proxy data, ...)
    check_accelerator(experiment.trainer.accelerator)
    check_federation(experiment)
    check_dataset_files(experiment.data)


def check_folder_name(name: str, key: str) -> None:
    """A run's or a sweep's name is one plain folder name (never a path that leaves ``run_dir``)."""
    if not _NAME.match(name) or name in (".", ".."):
        raise ConfigError(
            f"{key}: {name!r} is not allowed; allowed: one folder name of letters, digits and _ . + = - "
            "(no path separators, not . or ..)"
        )


def check_run_location(experiment: Any, resume: str | None) -> None:
    """A run name is one plain folder name; the run folder can be created and written."""
    if resume:
        return
    if experiment.name is not None:
        check_folder_name(experiment.name, "name")
    check_output_folder(Path(experiment.run_dir), "run_dir")
    if experiment.name is not None:  # a link named so under run_dir (a loop, a link to nothing): said here
        check_output_folder(Path(experiment.run_dir) / experiment.name, "name")


def check_output_folder(folder: Path, key: str) -> None:
    """``folder`` is a folder that exists or can be created, and can be written (checked before any work); a
    symlink loop or a broken link on the way is named, not met as an ``OSError`` when the first file is written."""
    try:
        os.stat(folder)
        problem = None if folder.is_dir() else "exists and is not a folder"
    except FileNotFoundError:
        problem = "is a link to nothing (a broken symlink)" if os.path.islink(folder) else None
    except OSError as err:  # ELOOP: a symlink loop (a file on the way, ENOTDIR: "not a writable folder" below)
        problem = f"cannot be used ({err.strerror})" if err.errno == errno.ELOOP else None
    if problem is not None:
        raise ConfigError(f"{key}: {folder} {problem}; allowed: a folder, or a path where one can be created")
    parent = folder
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}: cannot create or write {folder} ({parent} is not a writable folder)")
    try:  # permissions do not tell everything (a read-only or virtual file system, root's access): try it
        import tempfile

        os.rmdir(tempfile.mkdtemp(prefix=".lit-fl-probe-", dir=parent))
    except OSError as err:
        raise ConfigError(f"{key}: cannot create or write {folder} ({parent}: {err.strerror})") from None


def _cuda_missing() -> str | None:
    return None if _cuda_available() else "no CUDA GPU is visible here"


def _mps_missing() -> str | None:
    import torch

    there = sys.platform == "darwin" and torch.backends.mps.is_available()
    return None if there else "it needs Apple silicon with macOS"


def _tpu_missing() -> str | None:
    import importlib.util

    return None if importlib.util.find_spec("torch_xla") else "it needs torch_xla, which is not installed"


#: what each accelerator needs, as a check that returns why it is not there (None when it is); auto and cpu always are
ACCELERATOR_NEEDS = {"gpu": _cuda_missing, "cuda": _cuda_missing, "mps": _mps_missing, "tpu": _tpu_missing}


def check_accelerator(accelerator: str) -> None:
    """The accelerator asked for (one of ``TrainerConfig.accelerator``'s choices) is there (``auto`` always is)."""
    missing = ACCELERATOR_NEEDS.get(accelerator, lambda: None)()
    if missing:
        raise ConfigError(f"trainer.accelerator: {accelerator} asked for, but {missing}; allowed here: auto, cpu")


def check_dataset_files(data: Any) -> None:
    """A torchvision benchmark's or an image-file dataset's files are under ``data.root`` unless ``data.download``
    fetches them (the same :class:`DatasetNotFoundError` loading raises, before torch loads), and an image-file
    dataset's ``data.options`` are ones its loader takes. A loader registered under that name already (a user's own,
    or the built-in one once imported) is checked when it loads."""
    from lit_fl.data.image_specs import IMAGE_SPECS, image_options, require_layout
    from lit_fl.data.registry import is_registered
    from lit_fl.data.torchvision_specs import SPECS, require_files

    if is_registered(data.dataset):
        return
    if data.dataset in SPECS and not data.download:
        require_files(SPECS[data.dataset], data.root)
    elif data.dataset in IMAGE_SPECS:
        image_options(data.dataset, data.options)
        require_layout(data.dataset, data.root, data.download)


def _cuda_available() -> bool:
    import torch  # only for accelerator auto: the other checks never import torch

    return torch.cuda.is_available()


def check_federation(experiment: Any) -> None:
    """Enough data for every client, a topology the clients can form."""
    from lit_fl.federation.topology import check_topology

    data, topology = experiment.data, experiment.topology
    n = data.num_clients
    size = train_size(data.dataset, data.options)
    if size is not None:
        usable = size - int(round(data.server_fraction * size))
        per_client = 2 if data.val_fraction > 0 else 1
        if n * per_client > usable:
            raise ConfigError(
                f"data.num_clients: {n} clients need at least {per_client * n} samples (one train"
                f"{' and one validation' if per_client == 2 else ''} each); {data.dataset} gives {usable}; "
                f"allowed: at most {usable // per_client}"
            )
        if data.partition == "shards" and n * data.zeta > usable:
            raise ConfigError(
                f"data.zeta: {n} clients x {data.zeta} shards = {n * data.zeta} shards of {usable} samples; "
                f"allowed: at most {usable // n} shards per client"
            )
    check_topology(topology.name, n, topology.degree)


def train_size(dataset: str, options: dict[str, Any]) -> int | None:
    """The number of train samples of ``dataset`` without loading it (None when unknown)."""
    if dataset == "synthetic":
        return int(options.get("num_train", 2000))
    return TRAIN_SIZES.get(dataset)
