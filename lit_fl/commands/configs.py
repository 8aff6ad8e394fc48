"""``lit-fl configs``: list the experiment and sweep configs shipped with lit-fl."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from lit_fl.configs import KINDS, ROOT, list_configs


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-fl configs",
        description="List the shipped configs; any of them runs by name: lit-fl fit --config NAME.yaml, "
        "lit-fl sweep NAME.yaml.",
    )
    parser.add_argument("kind", nargs="?", choices=KINDS, help="only experiments or only sweeps")
    args = parser.parse_args(list(argv))
    for kind in [args.kind] if args.kind else KINDS:
        files = [f for f in list_configs(kind) if not f.name.endswith(".paper.yaml")]
        print(f"{kind}/ ({len(files)}, in {ROOT / kind})")
        for path in files:
            print(f"  {path.relative_to(kind).as_posix()}  {_first_comment(ROOT / path)}")
    return 0


def _first_comment(path) -> str:  # noqa: ANN001
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()[:100]
        if line.strip():
            break
    return ""
