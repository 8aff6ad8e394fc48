"""The precisions a run may use (Lightning's names); kept apart from the runner so configs need no Lightning."""

from __future__ import annotations

from typing import Literal

Precision = Literal["32-true", "bf16-mixed", "16-mixed"]
PRECISIONS: tuple[str, ...] = ("32-true", "bf16-mixed", "16-mixed")
