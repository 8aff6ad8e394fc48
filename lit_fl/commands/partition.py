"""``lit-fl partition --config X``: the partition ``lit-fl fit`` would build with the same config and seed, as a
client x class bubble plot (DFML Fig. 10, PNG) and per-client class counts (CSV).

    lit-fl partition --config experiments/quickstart.yaml --data.beta 0.1 --out partition/
"""

from __future__ import annotations

import sys
from argparse import ArgumentError
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str]) -> int:
    try:
        out, argv = _out_option(list(argv))
    except ValueError as err:
        print(f"lit-fl: error: {err}", file=sys.stderr)
        return 2
    if "-h" in argv or "--help" in argv:
        print(__doc__.replace("``", "").strip())
        print("\nOptions: --out DIR (default ./partition) and every key of lit-fl fit (lit-fl fit --help).")
        return 0
    from lit_fl.algorithms.registry import algorithm_class_paths
    from lit_fl.cli_errors import one_line
    from lit_fl.fit_config import config_keys, fit_parser, prepare, resolve_config_files, with_run_config
    from lit_fl.validation import check_output_folder

    parser = fit_parser()
    try:
        check_output_folder(out, "--out")
        cfg = parser.parse_args(with_run_config(resolve_config_files(argv)))
        experiment, _, _ = prepare(cfg, parser)  # every check of lit-fl fit: what fit refuses, partition refuses
        return partition(experiment.data, experiment.seed, out)
    except (ArgumentError, ValueError, TypeError) as err:
        print(f"lit-fl: error: {one_line(err, config_keys(), algorithm_class_paths())}", file=sys.stderr)
        return 2


def _out_option(argv: list[str]) -> tuple[Path, list[str]]:
    """``--out DIR`` or ``--out=DIR`` (the last one given; default ./partition) and the other arguments; ``--out``
    without a folder after it is refused (a ValueError), never taken as the default."""
    out, rest, i = Path("partition"), [], 0
    while i < len(argv):
        if argv[i] == "--out":
            if i + 1 == len(argv) or argv[i + 1].startswith("--") or not argv[i + 1]:
                raise ValueError("--out needs a folder after it, e.g. --out partition/")
            out, i = Path(argv[i + 1]), i + 2
        elif argv[i].startswith("--out="):
            if not argv[i].split("=", 1)[1]:
                raise ValueError("--out needs a folder after it, e.g. --out=partition/")
            out, i = Path(argv[i].split("=", 1)[1]), i + 1
        else:
            rest.append(argv[i])
            i += 1
    return out, rest


def partition(data, seed: int, out: Path) -> int:  # noqa: ANN001
    from lit_fl.errors import ConfigError
    from lit_fl.federation.builder import client_splits, load_configured
    from lit_fl.suite.partition_plot import class_counts, write_bubble_plot, write_counts_csv

    dataset = load_configured(data, seed)
    if dataset.is_sequence:
        raise ConfigError(f"data.dataset: {data.dataset} holds token sequences; lit-fl partition plots class labels "
                          "per client (an image dataset)")
    splits, server_idx = client_splits(dataset, data, seed)
    counts = class_counts(dataset.train_y.numpy(), splits, dataset.num_classes)
    skew = f"Dirichlet beta={data.beta:g}" if data.partition == "dirichlet" else data.partition
    title = f"{data.dataset}: {data.num_clients} clients, {skew}, seed {seed}"
    write_counts_csv(counts, out / "partition.csv")  # each written atomically
    write_bubble_plot(counts, title, out / "partition.png")
    sizes = (counts["train"] + counts["val"]).sum(1)
    print(f"{title}: {int(sizes.min())}-{int(sizes.max())} samples per client, {len(server_idx)} held out for the "
          f"server -> {out / 'partition.png'}, {out / 'partition.csv'}")
    return 0
