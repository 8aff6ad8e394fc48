"""``lit-fl partition``: the same partition as ``lit-fl fit`` with the same config and seed, as PNG and CSV."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from conftest import run_cli, tiny_config, write_config


def test_partition_counts_equal_the_federation_fit_builds(tmp_path: Path) -> None:
    from lit_fl.commands.fit import fit_parser
    from lit_fl.experiment import Experiment

    cfg_path = write_config(tmp_path / "cfg.yaml", tiny_config("DFML"))
    argv = ["--config", str(cfg_path), "--data.beta", "0.2", "--seed", "3"]
    result = run_cli("partition", *argv, "--out", tmp_path / "out")
    assert result.rc == 0, result.err
    assert (tmp_path / "out" / "partition.png").stat().st_size > 10_000
    with (tmp_path / "out" / "partition.csv").open() as handle:
        rows = list(csv.DictReader(handle))

    parser = fit_parser()
    init = parser.instantiate_classes(parser.parse_args(argv))
    federation, _ = Experiment(**{k: v for k, v in init.items() if k not in ("config", "resume")}).build()
    labels = federation.data.train_y.cpu().numpy()
    classes = federation.num_classes
    for client in federation.clients:
        for split, idx in (("train", client.train_idx), ("val", client.val_idx)):
            row = next(r for r in rows if r["client"] == str(client.id) and r["split"] == split)
            expected = np.bincount(labels[idx.numpy()], minlength=classes)
            assert [int(row[f"class_{c}"]) for c in range(classes)] == expected.tolist(), (client.id, split)
    # a skewed partition: some client lacks some class
    assert any(int(r[f"class_{c}"]) == 0 for r in rows for c in range(classes))


def test_partition_bad_key_is_one_line(tmp_path: Path) -> None:
    cfg_path = write_config(tmp_path / "cfg.yaml", tiny_config("DFML"))
    result = run_cli("partition", "--config", cfg_path, "--data.beta", "-1", "--out", tmp_path / "out")
    assert result.rc == 2 and len(result.err.strip().splitlines()) == 1 and "data.beta" in result.err
    assert not (tmp_path / "out").exists()
