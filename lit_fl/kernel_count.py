"""Count the kernels a piece of work dispatches: a CPU proxy for GPU time of small models.

A GPU run of small models is bound by kernel launches, not by arithmetic, so the number of aten operators
dispatched is a faithful, noise-free measure of its speed that can be taken on any CPU. :class:`KernelCounter` is a
``TorchDispatchMode`` that counts every aten call except views (a view launches no kernel), grouped by a phase
label the caller sets::

    with KernelCounter() as counter:
        with counter.phase("mutual learning"):
            ...
    print(counter.total, counter.by_phase)

It also counts host synchronisations (:attr:`KernelCounter.syncs`): the dispatched calls that make the host wait for
the device on a GPU, a value read back (``.item()``, ``bool()``, ``float()``: ``_local_scalar_dense``) or an operator
whose output shape depends on the data (``nonzero``, boolean-mask indexing, ``unique``, ...); and, apart, the copies
to the host that dispatch nothing on a CPU (``.tolist()``, ``.numpy()``, ``.cpu()``: :attr:`KernelCounter.copies`),
counted where Python calls them, an upper bound (a read of a tensor that lives on the host anyway counts too). Each
is attributed to the line of lit-fl that asked for it (:attr:`KernelCounter.sync_sites`).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: aten operators that wait for the device: a value read back, or an output whose shape depends on the data
HOST_READS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "_unique", "_unique2",
                        "unique_dim", "unique_consecutive", "unique_dim_consecutive", "repeat_interleave",
                        "bincount", "histc", "_assert_async"})
#: tensor methods that copy to the host without dispatching on a CPU
HOST_COPIES = ("tolist", "numpy", "cpu")


class KernelCounter(TorchDispatchMode):
    """Counts non-view aten calls in the current thread while active (``with``), per phase and per operator, and
    the host synchronisations among them (:attr:`syncs`)."""

    def __init__(self) -> None:
        super().__init__()
        #: ``(phase, operator) -> calls``; :attr:`by_phase`, :attr:`by_op` and :attr:`total` sum it
        self.by_phase_op: Counter[tuple[str, str]] = Counter()
        #: ``(phase, "file:line what") -> host synchronisations and copies``; :attr:`syncs` and :attr:`copies` sum it
        self.sync_sites: Counter[tuple[str, str]] = Counter()
        self.current = "rest"
        self._copies: dict[str, Any] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if not func.is_view:
            self.by_phase_op[self.current, str(func.overloadpacket)] += 1
        name = func.overloadpacket.__name__
        if name in HOST_READS or (name == "index" and _boolean_index(args)):
            self._synced(name)
        out = func(*args, **(kwargs or {}))
        _bump_written(func, args, kwargs or {})
        return out

    @property
    def by_phase(self) -> Counter[str]:
        return self._summed(0)

    @property
    def by_op(self) -> Counter[str]:
        return self._summed(1)

    def _summed(self, part: int) -> Counter[str]:
        """The calls summed over the other part of the key (``part`` 0: per phase, 1: per operator)."""
        out: Counter[str] = Counter()
        for key, calls in self.by_phase_op.items():
            out[key[part]] += calls
        return out

    @property
    def total(self) -> int:
        return sum(self.by_phase_op.values())

    @property
    def syncs(self) -> int:
        """Dispatched host synchronisations: values read back, data-dependent shapes."""
        return sum(n for (_, site), n in self.sync_sites.items() if site.rsplit(" ", 1)[1] not in HOST_COPIES)

    @property
    def copies(self) -> int:
        """Copies to the host that a CPU does not dispatch (``tolist``, ``numpy``, ``cpu``): an upper bound."""
        return sum(n for (_, site), n in self.sync_sites.items() if site.rsplit(" ", 1)[1] in HOST_COPIES)

    def _synced(self, what: str) -> None:
        self.sync_sites[self.current, f"{_caller()} {what}"] += 1

    def __enter__(self) -> KernelCounter:
        for name in HOST_COPIES:
            self._copies[name] = original = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._counted_copy(name, original))
        return super().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        for name, original in self._copies.items():
            setattr(torch.Tensor, name, original)
        self._copies.clear()
        return super().__exit__(*exc)

    def _counted_copy(self, name: str, original: Any) -> Any:
        def copy(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            self._synced(name)
            return original(tensor, *args, **kwargs)

        return copy

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Attribute the kernels dispatched in the block to ``name`` (the outermost label wins when nested)."""
        previous = self.current
        if previous == "rest":
            self.current = name
        try:
            yield
        finally:
            self.current = previous


def _bump_written(func: Any, args: tuple, kwargs: dict) -> None:
    """Bump the version counter of every tensor ``func`` wrote in place. Under a Python dispatch mode PyTorch skips
    that for multi-tensor (``_foreach_*``) in-place ops, the ones optimizers and weight copies use; lit-fl's
    evaluator tells changed weights by those counters, so without this a counted run would evaluate stale models
    (and count too few kernels)."""
    import torch
    from torch.autograd.graph import increment_version

    if not func.overloadpacket.__name__.startswith("_foreach_"):
        return
    schema = func._schema.arguments
    for index, argument in enumerate(schema):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[index] if index < len(args) else kwargs.get(argument.name)
        for tensor in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(tensor, torch.Tensor):
                increment_version(tensor)


def _boolean_index(args: tuple) -> bool:
    """``aten.index`` with a boolean mask among its indices (its output's length is the mask's count)."""
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in indices or ())


def _caller() -> str:
    """``file:line`` of the innermost lit-fl frame outside this module (else the innermost frame)."""
    frame = sys._getframe(2)
    first = None
    while frame is not None:
        path = frame.f_code.co_filename
        if "lit_fl" in path and not path.endswith("kernel_count.py"):
            return f"{path[path.rindex('lit_fl'):]}:{frame.f_lineno}"
        if first is None and not path.endswith("kernel_count.py") and "torch" not in path:
            first = f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return first or "?"
