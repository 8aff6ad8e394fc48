"""Command-line latency: wall seconds of ``lit-fl`` commands that must answer before any run starts.

Each command runs in a fresh process (``python -m lit_fl.cli``, what the ``lit-fl`` script runs) ``--repeats``
times; the table gives min and median. Target (issue 10): under 3 s each on a 2-core laptop. None of these commands
imports torch (tests/test_cli_imports.py); the first line, a bare ``import torch``, is what each would cost if it did,
and tells a slow machine from a slow lit-fl.

    python benchmarks/cli_latency.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"
CIFAR100 = QUICKSTART.with_name("dfml_cifar100.yaml")


def commands(tmp: Path) -> dict[str, list[str]]:
    bad = tmp / "bad.yaml"
    bad.write_text(QUICKSTART.read_text().replace("partition: dirichlet", "partition: dirichlett"))
    return {
        IMPORT_TORCH: [IMPORT_TORCH],
        "lit-fl --help": ["--help"],
        "lit-fl fit --help": ["fit", "--help"],
        "lit-fl fit --print_config": ["fit", "--config", str(QUICKSTART), "--print_config"],
        "config error (data.partition)": ["fit", "--config", str(bad)],
        "config error (rounds: ten)": ["fit", "--config", str(QUICKSTART), "--rounds", "ten"],
        "config error (unknown key)": ["fit", "--config", str(QUICKSTART), "--data.partitionn", "iid"],
        "config error (alpha_max: 2, DFML)": ["fit", "--config", str(QUICKSTART), "--algorithm.alpha_max", "2"],
        "config error (CIFAR-100 not there)": ["fit", "--config", str(CIFAR100), "--data.root", str(tmp / "none")],
    }


#: the reference line: what a command that imported torch would cost at least
IMPORT_TORCH = "python -c 'import torch' (reference)"


def time_command(args: list[str], expect_error: bool) -> float:
    start = time.perf_counter()
    command = [sys.executable, "-c", "import torch"] if args == [IMPORT_TORCH] else [sys.executable, "-m",
                                                                                        "lit_fl.cli", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if (done.returncode != 0) != expect_error:
        raise RuntimeError(f"lit-fl {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in commands(Path(tmp)).items():
            seconds = [time_command(argv, expect_error=name.startswith("config error")) for _ in range(args.repeats)]
            print(f"{name:<36} {min(seconds):5.2f} s min  {statistics.median(seconds):5.2f} s median "
                  f"({args.repeats} runs)", flush=True)


if __name__ == "__main__":
    main()
