"""``lit-fl configs``: list the experiment and sweep configs shipped with lit-fl, and what is registered (the
algorithms, architectures and datasets a config may name)."""

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
    parser.add_argument("kind", nargs="?", choices=[*KINDS, "registered"],
                        help="only experiments, only sweeps, or only what is registered")
    args = parser.parse_args(list(argv))
    for kind in [args.kind] if args.kind and args.kind != "registered" else [] if args.kind else KINDS:
        files = [f for f in list_configs(kind) if not f.name.endswith(".paper.yaml")]
        print(f"{kind}/ ({len(files)}, in {ROOT / kind})")
        for path in files:
            print(f"  {path.relative_to(kind).as_posix()}  {_first_comment(ROOT / path)}")
    if args.kind in (None, "registered"):
        print_registered()
    return 0


def print_registered() -> None:
    """The registered algorithms (``algorithm.class_path``), architectures (``models.pool``) and datasets
    (``data.dataset``)."""
    import lit_fl.algorithms  # noqa: F401 - registers the built-in methods
    from lit_fl.algorithms.registry import algorithm_class_paths
    from lit_fl.data.registry import list_datasets
    from lit_fl.models.registry import allowed_names

    print("registered:")
    for key, names in (("algorithm.class_path", algorithm_class_paths()), ("models.pool", allowed_names()),
                       ("data.dataset", list_datasets())):
        print(f"  {key}: {', '.join(names)}")


def _first_comment(path) -> str:  # noqa: ANN001
    from lit_fl.strict_yaml import YAML_FILE

    for line in YAML_FILE.read_text(path).splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()[:100]
        if line.strip():
            break
    return ""
