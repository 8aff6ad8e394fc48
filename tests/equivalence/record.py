"""Record every shipped ``experiments/mnist5k/*.yaml`` method's 3-round run, before the refactor of issue 36.

    PYTHONPATH=$PWD nice python tests/equivalence/record.py [STEM ...] [--out PATH]

runs each config (all of them, or the named stems, in the order given) for 3 rounds through ``lit-fl fit``
in this process (``lit_fl.cli.main``, as the tests call it), W&B off, one torch thread, in a temporary folder, and
merges the records into ``reference.json.gz`` (gzipped JSON: the records of 35 configs on three CPU capabilities
are megabytes of digests) under this CPU's ``torch.backends.cpu.get_cpu_capability()`` (run it
again with ``ATEN_CPU_CAPABILITY=avx2`` / ``default`` for the other kernels). A record is

- ``metrics``: ``metrics.csv``'s rows as the exact strings written, every column but the wall-clock timings
  (the columns ending in ``_s``: ``round_s``, ``eval_s``);
- ``digests``: the final state read from ``checkpoints/last.ckpt`` (written at the end of the run from the live
  federation and method, tensors byte for byte), by readable name: every client's model, peak and extras
  (``client/3/model/<param>``), the server models (``server/<name>/<param>``), the method's own state
  (``algorithm/...``) and the random streams (``rng/...``). A tensor is ``dtype[shape] sha256``; another leaf
  (a float, an int, a numpy generator's counter) is its ``repr``. The ledger is left out (``comm_mb`` is in the
  metrics).

:func:`run_config` is the one run both this script and the test use; :func:`first_difference` the one comparison.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import hashlib
import io
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "experiments" / "mnist5k").glob("*.yaml"))
REFERENCE = Path(__file__).with_name("reference.json.gz")
ROUNDS = 3

Record = dict[str, Any]  # {"metrics": [{column: text}], "digests": {name: text}}


def capability() -> str:
    """The CPU kernels torch dispatches to here (``AVX512``, ``AVX2``, ``DEFAULT``): the key of a record."""
    return torch.backends.cpu.get_cpu_capability()


def run_config(path: Path) -> Record:
    """``lit-fl fit --config PATH --rounds 3`` in this process, W&B off, one torch thread, in a temporary folder;
    its metrics rows and final-state digests. A fit that does not exit 0 raises with its stderr."""
    from lit_fl.cli import main

    with tempfile.TemporaryDirectory() as tmp, _one_thread():
        out, err = io.StringIO(), io.StringIO()
        argv = ["fit", "--config", str(path), "--rounds", str(ROUNDS), "--logger.wandb", "false",
                "--logger.progress", "false", "--run_dir", tmp, "--name", path.stem]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
        if rc != 0:
            raise RuntimeError(f"{path.stem}: lit-fl fit exited {rc}: {err.getvalue().strip()}")
        run = Path(tmp) / path.stem
        reports = json.loads((run / "summary.json").read_text()).get("reports")
        return {"metrics": without_reported_acc(metric_rows(run / "metrics.csv"), reports),
                "digests": state_digests(run / "checkpoints" / "last.ckpt")}


def without_reported_acc(rows: list[dict[str, str]], reports: str | None) -> list[dict[str, str]]:
    """The rows without ``reported_acc``, a column issue 36 added after the record (item 6): it must repeat, cell for
    cell, the column the method declares (``summary.json``'s ``reports``), which the record holds."""
    for row in rows:
        if "reported_acc" in row:
            if reports is None or row["reported_acc"] != row.get(reports):
                raise AssertionError(f"reported_acc {row['reported_acc']!r} is not {reports}'s {row.get(reports)!r}")
            del row["reported_acc"]
    return rows


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def metric_rows(path: Path) -> list[dict[str, str]]:
    """The rows of ``metrics.csv`` as written (strings), without the wall-clock columns (``*_s``)."""
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [{column: text for column, text in row.items() if not column.endswith("_s")} for row in rows]


def state_digests(checkpoint: Path) -> dict[str, str]:
    """Every model tensor, the method's state and the random streams of a checkpoint, by readable name."""
    from lit_fl.federation.checkpoint import read_unpacked

    state = read_unpacked(checkpoint)
    federation = state["federation"]
    digests: dict[str, str] = {}
    for index, client in enumerate(federation["clients"]):
        _walk(f"client/{index}/model", client["model"], digests)
        if client["peak_shared"]:
            digests[f"client/{index}/peak"] = "shares the model"
        elif client["peak"] is not None:
            _walk(f"client/{index}/peak", client["peak"], digests)
        _walk(f"client/{index}/alpha_peak", client["alpha_peak"], digests)
        _walk(f"client/{index}/extras", client["extras"], digests)
    _walk("server", federation["server"], digests)
    _walk("round", federation["round"], digests)
    _walk("rng", federation["rng"], digests)
    _walk("algorithm", state["algorithm"], digests)
    return digests


def _walk(name: str, value: Any, digests: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _walk(f"{name}/{key}", item, digests)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _walk(f"{name}/{index}", item, digests)
    elif isinstance(value, (torch.Tensor, np.ndarray)):
        digests[name] = tensor_digest(torch.as_tensor(value))
    else:
        digests[name] = repr(value)


def tensor_digest(tensor: torch.Tensor) -> str:
    """``dtype[shape] sha256`` of the tensor's bytes."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    payload = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    shape = ",".join(str(size) for size in tensor.shape)
    return f"{str(tensor.dtype).removeprefix('torch.')}[{shape}] {hashlib.sha256(payload).hexdigest()}"


def first_difference(stem: str, expected: Record, actual: Record) -> str | None:
    """None when the two records are equal; else one line naming ``stem``, the first differing metric cell or
    state entry (metrics first, names in sorted order), and how many more differ."""
    differences = _metric_differences(expected["metrics"], actual["metrics"])
    differences += _digest_differences(expected["digests"], actual["digests"])
    if not differences:
        return None
    more = f" (and {len(differences) - 1} more differences)" if len(differences) > 1 else ""
    return f"{stem}: {differences[0]}{more}"


def _metric_differences(expected: list[dict[str, str]], actual: list[dict[str, str]]) -> list[str]:
    found = []
    if len(expected) != len(actual):
        found.append(f"metrics.csv has {len(actual)} rows, recorded {len(expected)}")
    for old, new in zip(expected, actual):
        for column in list(old) + [c for c in new if c not in old]:
            if old.get(column) != new.get(column):
                found.append(f"metrics.csv round {old.get('round')} column {column}: recorded {old.get(column)!r}, "
                             f"now {new.get(column)!r}")
    return found


def _digest_differences(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    return [f"state {name}: recorded {expected.get(name)!r}, now {actual.get(name)!r}"
            for name in sorted(set(expected) | set(actual)) if expected.get(name) != actual.get(name)]


def load_reference(path: Path = REFERENCE) -> dict[str, dict[str, Record]]:
    """``{capability: {config stem: record}}``; empty when nothing is recorded yet."""
    return json.loads(gzip.decompress(path.read_bytes())) if path.exists() else {}


def write_reference(reference: dict[str, dict[str, Record]], path: Path = REFERENCE) -> None:
    """``reference`` gzipped, byte for byte the same for the same records (no timestamp in the header)."""
    text = json.dumps(dict(sorted(reference.items())), indent=1) + "\n"
    path.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))


def main(argv: list[str]) -> int:
    out = REFERENCE
    if "--out" in argv:
        at = argv.index("--out")
        out, argv = Path(argv[at + 1]), argv[:at] + argv[at + 2:]
    by_stem = {path.stem: path for path in CONFIGS}
    unknown = [stem for stem in argv if stem not in by_stem]
    if unknown:
        print(f"record.py: unknown config {', '.join(unknown)}; allowed: {', '.join(by_stem)}", file=sys.stderr)
        return 2
    reference = load_reference(out)
    records = reference.setdefault(capability(), {})
    start = time.perf_counter()
    for stem in argv or list(by_stem):
        began, cpu = time.perf_counter(), time.process_time()
        records[stem] = run_config(by_stem[stem])
        print(f"{capability()} {stem}: {time.perf_counter() - began:.1f} s ({time.process_time() - cpu:.1f} s CPU)",
              flush=True)
        reference[capability()] = dict(sorted(records.items()))
        write_reference(reference, out)  # after each: a crash keeps some
    print(f"{capability()}: {len(argv or by_stem)} configs in {time.perf_counter() - start:.1f} s -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
