"""Command-line latency: wall seconds of ``lit-fl`` commands that must answer before any run starts.

Each command runs in a fresh process (``python -m lit_fl.cli``, what the ``lit-fl`` script runs) ``--repeats``
times; the table gives min and median. Target (issue 10): under 3 s each on a 2-core laptop. The first line, a
bare ``import torch``, is the floor of every ``fit`` command: it tells a slow machine from a slow lit-fl.

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
    }


#: the floor of every command that builds the fit parser (its algorithm classes import torch): bare ``import torch``
IMPORT_TORCH = "python -c 'import torch' (floor)"


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
            print(f"{name:<32} {min(seconds):5.2f} s min  {statistics.median(seconds):5.2f} s median "
                  f"({args.repeats} runs)", flush=True)


if __name__ == "__main__":
    main()
