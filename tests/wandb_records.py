"""Read the records of an offline W&B run file (``run-ID.wandb``) for tests.

The file is W&B's LevelDB-style log: a 7-byte header (``:W&B``, magic, version), then 32 KiB blocks of
records, each with a 7-byte header (crc32, little-endian uint16 length, type FULL/FIRST/MIDDLE/LAST). Every
record payload is a ``wandb_internal_pb2.Record`` protobuf. The Python reader that older wandb releases
shipped is gone, so the tests carry this small one.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_payloads(path: str | Path) -> list[bytes]:
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file")
    payloads, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < 7:
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            pos += BLOCK - pos % BLOCK if pos % BLOCK else 0
            continue
        if kind == FULL:
            payloads.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            payloads.append(pending + chunk)
            pending = b""
    return payloads


def read_run(path: str | Path) -> dict[str, Any]:
    """``{"history": [dict per logged step], "summary": {...}, "config": {...}, "run": {group, job_type, tags},
    "metrics": [(name or glob, step_metric)]}`` of an offline run file."""
    from wandb.proto import wandb_internal_pb2 as pb

    out: dict[str, Any] = {"history": [], "summary": {}, "config": {}, "run": {}, "metrics": []}
    for payload in read_payloads(path):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            out["history"].append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            out["summary"].update({_key(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "config":
            out["config"].update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "run":
            out["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
            run = record.run
            out["run"] = {"group": run.run_group, "job_type": run.job_type, "tags": list(run.tags)}
        elif kind == "metric":
            out["metrics"].append((record.metric.name or record.metric.glob_name, record.metric.step_metric))
    return out


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)
