"""Count the kernels a piece of work dispatches: a CPU proxy for GPU time of small models.

A GPU run of small models is bound by kernel launches, not by arithmetic, so the number of aten operators
dispatched is a faithful, noise-free measure of its speed that can be taken on any CPU. :class:`KernelCounter` is a
``TorchDispatchMode`` that counts every aten call except views (a view launches no kernel), grouped by a phase
label the caller sets::

    with KernelCounter() as counter:
        with counter.phase("mutual learning"):
            ...
    print(counter.total, counter.by_phase)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class KernelCounter(TorchDispatchMode):
    """Counts non-view aten calls in the current thread while active (``with``), per phase and per operator."""

    def __init__(self) -> None:
        super().__init__()
        #: ``(phase, operator) -> calls``; :attr:`by_phase`, :attr:`by_op` and :attr:`total` sum it
        self.by_phase_op: Counter[tuple[str, str]] = Counter()
        self.current = "rest"

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if not func.is_view:
            self.by_phase_op[self.current, str(func.overloadpacket)] += 1
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
