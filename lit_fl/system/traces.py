"""Per-client capacity and availability traces: FedScale's pickles, read by a restricted unpickler that builds plain
data only (a pickle that names any class or function, e.g. one that would call ``os.system``, is refused in one line
before anything of it runs), or lit-fl's JSON files of the same shape (docs/system.md).

Capacity, per client id: ``{"computation": ms per sample (inference of FedScale's reference model), "communication":
kbit/s}``. Availability, per client id: ``{"active": [start, ...], "inactive": [end, ...], "finish_time": period,
...}``: the client is there from ``active[i]`` to ``inactive[i]`` (seconds), the pattern repeating every
``finish_time``.
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lit_fl.errors import ConfigError

#: FedScale's training cost over inference (its ``augmentation_factor``: a backward pass is about twice a forward)
TRAINING_OVER_INFERENCE = 3.0


class _PlainData(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings, numbers, booleans and None; refuses every global (class or function):
    nothing a pickle names is ever imported or called."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"names {module}.{name}")


def read_plain(path: Path, key: str) -> Any:
    """The plain data of a trace file: JSON, or a pickle read by :class:`_PlainData`; one line naming ``key`` for
    a missing, unreadable or non-plain file."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{key}: cannot read {path}: {err.strerror or err}") from None
    if path.suffix == ".json":
        try:
            return json.loads(raw)
        except ValueError as err:
            raise ConfigError(f"{key}: {path} is not JSON: {err}") from None
    try:
        return _PlainData(io.BytesIO(raw)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as err:
        raise ConfigError(f"{key}: {path} is not a pickle of plain data (dicts, lists, numbers), refused unread: "
                          f"{err}") from None


def _first(entries: Any, count: int, key: str, path: Path) -> list[Mapping[str, Any]]:
    """The trace's first ``count`` clients, in the order of their ids."""
    if not isinstance(entries, Mapping) or not all(isinstance(v, Mapping) for v in entries.values()):
        raise ConfigError(f"{key}: {path} must map client ids to records (docs/system.md)")
    if len(entries) < count:
        raise ConfigError(f"{key}: {path} has {len(entries)} clients; the federation has {count} "
                          "(data.num_clients): give a trace with at least as many")
    ordered = sorted(entries, key=lambda k: (not str(k).lstrip("-").isdigit(), int(k) if str(k).lstrip("-").isdigit()
                                             else 0, str(k)))
    return [entries[k] for k in ordered[:count]]


@dataclass(frozen=True)
class Capacity:
    """One client's capacity: ``rate`` samples per second on a model of one million parameters, link in Mbit/s."""

    rate: float
    mbps: float


def read_capacities(path: Path, count: int, key: str = "system.capacity_trace") -> list[Capacity]:
    """The first ``count`` clients' capacities of a FedScale capacity trace (or its JSON)."""
    out = []
    for n, record in enumerate(_first(read_plain(path, key), count, key, path)):
        try:
            computation, communication = float(record["computation"]), float(record["communication"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{key}: client {n} of {path} needs numbers 'computation' (ms per sample) and "
                              "'communication' (kbit/s)") from None
        if computation <= 0 or communication <= 0:
            raise ConfigError(f"{key}: client {n} of {path} has computation {computation:g} and communication "
                              f"{communication:g}; both must be > 0")
        out.append(Capacity(1000.0 / (TRAINING_OVER_INFERENCE * computation), communication / 1000.0))
    return out


@dataclass(frozen=True)
class Availability:
    """When one client is there: ``windows`` of ``(start, end)`` seconds, repeating every ``period``."""

    windows: tuple[tuple[float, float], ...]
    period: float

    def available(self, t: float) -> bool:
        phase = t % self.period
        return any(start <= phase < end for start, end in self.windows)

    def leaves(self, t: float) -> float:
        """When a client there at ``t`` leaves: the end of the window it is in (``t`` itself when it is not there)."""
        phase = t % self.period
        ends = [end for start, end in self.windows if start <= phase < end]
        return t - phase + max(ends) if ends else t


def read_availability(path: Path, count: int, key: str = "system.availability_trace") -> list[Availability]:
    """The first ``count`` clients' availability windows of a FedScale behaviour trace (or its JSON)."""
    out = []
    for n, record in enumerate(_first(read_plain(path, key), count, key, path)):
        try:
            starts = [float(v) for v in record["active"]]
            ends = [float(v) for v in record["inactive"]]
            period = float(record["finish_time"])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{key}: client {n} of {path} needs lists 'active' and 'inactive' and a number "
                              "'finish_time'") from None
        if len(starts) != len(ends) or period <= 0:
            raise ConfigError(f"{key}: client {n} of {path} has {len(starts)} window starts, {len(ends)} ends and "
                              f"period {period:g}; one end per start and a period > 0")
        for start, end in zip(starts, ends):
            if end <= start:
                raise ConfigError(f"{key}: client {n} of {path} has a window that ends at {end:g} before it starts "
                                  f"at {start:g}")
        out.append(Availability(tuple(zip(starts, ends)), period))
    return out
