"""Named points where a test can kill the process with SIGKILL, to prove that ``kill -9`` at any moment leaves a
run that ``--resume`` continues to the same result.

``LIT_FL_KILL_AT=round:2`` kills after round 2's training (before its evaluation and checkpoint);
``write:last.ckpt`` inside an atomic write of the checkpoint (the temporary file written, not yet renamed);
``summary`` just before summary.json is written. A ``NAME#K`` form kills at the K-th time the point is reached.
Unset (always, outside tests), a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

_ENV = "LIT_FL_KILL_AT"
_seen: dict[str, int] = {}


def fault_point(name: str) -> None:
    target = os.environ.get(_ENV)
    if not target:
        return
    point, _, count = target.partition("#")
    if point != name:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] >= int(count or 1):
        os.kill(os.getpid(), signal.SIGKILL)
