"""The configs shipped inside the package: ``experiments/`` (one run each) and ``sweeps/`` (W&B sweep files).

A config name that is not an existing path resolves here, so ``lit-fl fit --config dfml_cifar100.yaml`` works
from any directory and after a non-editable ``pip install``. In a source checkout the top-level
``experiments/`` and ``sweeps/`` folders are links to these.
"""

from __future__ import annotations

from pathlib import Path

from lit_fl.errors import ConfigError

ROOT = Path(__file__).resolve().parent
KINDS = ("experiments", "sweeps")


def list_configs(kind: str | None = None) -> list[Path]:
    """Every shipped YAML file (of ``kind``: experiments or sweeps), relative to the package's config root."""
    kinds = [kind] if kind else list(KINDS)
    return sorted(p.relative_to(ROOT) for k in kinds for p in (ROOT / k).rglob("*.yaml"))


def resolve_config(name: str | Path, kind: str | None = None, key: str = "--config") -> Path:
    """``name`` itself when it exists; else the shipped file at that relative path (``experiments/x.yaml``) or,
    failing that, the one shipped file with that name or tail (``dfml_cifar100.yaml``, ``mnist5k/dfml.yaml``).

    Raises a :class:`ConfigError` naming ``key`` when nothing, or more than one file, matches.
    """
    path = Path(name).expanduser()
    if path.exists():
        return path
    if (ROOT / path).is_file():
        return ROOT / path
    tail = path.as_posix().lstrip("./")
    matches = [p for p in list_configs(kind) if p.as_posix() == tail or p.as_posix().endswith("/" + tail)]
    if len(matches) == 1:
        return ROOT / matches[0]
    if len(matches) > 1:
        raise ConfigError(f"{key}: {name!r} names several shipped configs: {', '.join(map(str, matches))}")
    raise ConfigError(
        f"{key}: no file {str(name)!r} here and no shipped config of that name; list them with: lit-fl configs"
    )
