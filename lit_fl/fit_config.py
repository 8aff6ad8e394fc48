"""The configuration of ``lit-fl fit``: its parser (every key, from :class:`~lit_fl.experiment.Experiment`'s
signature), its config files (shipped names resolved, read first), a resumed run's own config as the base, and the
experiment a parsed config prepares with every check that needs no data.

Below the commands and the suite: ``lit-fl fit`` and ``lit-fl partition`` parse with it, and a sweep's plan checks
every run's command line with it (:mod:`lit_fl.suite.plan`) before anything starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jsonargparse import ActionConfigFile, ArgumentParser, Namespace

from lit_fl.configs import resolve_config
from lit_fl.errors import ConfigError
from lit_fl.experiment import Experiment
from lit_fl.file_schema import FileSchema

#: what ``--resume`` names: a folder ``lit-fl fit`` wrote
RUN_FOLDER = FileSchema("a run directory written by lit-fl fit (runs/NAME, holding config.yaml)", key="--resume")


def fit_parser() -> ArgumentParser:
    from lit_fl.strict_yaml import bound_jsonargparse

    bound_jsonargparse()  # a section's file named inside a config is read by jsonargparse: same bounds
    parser = ArgumentParser(
        prog="lit-fl fit",
        description="Run a federated experiment (DFML, decentralized FedAvg, ...) and write a run directory.",
        exit_on_error=False,
    )
    parser.add_argument("--config", action=ActionConfigFile, help="YAML config file (may be given several times).")
    parser.add_argument("--resume", type=str | None, default=None,
                        help="Continue the run directory runs/NAME from its last checkpoint, with its own config.yaml "
                             "(other keys apply on top; only rounds, checkpoint_every, trainer and logger may change).")
    parser.add_class_arguments(Experiment, as_group=False)
    return parser


def prepare(cfg: Namespace, parser: ArgumentParser) -> tuple[Experiment, dict[str, Any], str | None]:
    """The experiment, its resolved config (for config.yaml) and the run to resume; every check that needs no
    data runs here, so bad input is refused before anything heavy starts."""
    import yaml

    from lit_fl.validation import check_experiment, check_finite

    resume = cfg.pop("resume", None)
    cfg.pop("config", None)
    check_finite(cfg)
    resolved = parser.dump(cfg, skip_none=False, format="yaml")
    init = parser.instantiate_classes(cfg)
    experiment = Experiment(**{k: v for k, v in init.items()})
    check_experiment(experiment, resume)
    return experiment, yaml.safe_load(resolved), resume


def resolve_config_files(argv: Sequence[str]) -> list[str]:
    """``--config NAME`` / ``--config=NAME`` and file values of whole sections (``--data=iid.yaml``) with every
    name that is not an existing path resolved against the shipped configs (:func:`lit_fl.configs.resolve_config`);
    config files first (:func:`_configs_first`)."""
    out, args = [], list(argv)
    for i, arg in enumerate(args):
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
            if _is_file_key(key, value):
                arg = f"{key}={_checked(resolve_config(value, key=key), key)}"
        elif i > 0 and args[i - 1].startswith("--") and "=" not in args[i - 1] and _is_file_key(args[i - 1], arg):
            arg = str(_checked(resolve_config(arg, key=args[i - 1]), args[i - 1]))
        out.append(arg)
    return _configs_first(out)


def _checked(path: Any, key: str) -> Any:
    """A config file that jsonargparse will read, checked first for what it would take silently (a repeated key) or
    report without the file's name (a ``--config`` that is not a mapping)."""
    from lit_fl.strict_yaml import YAML_FILE, parse_yaml

    text = YAML_FILE.read_text(path, f"{key} {path}")
    config = parse_yaml(text, f"{key} {path}")
    if key == "--config" and config is not None and not isinstance(config, dict):
        raise ConfigError(f"{key} {path}: expected a mapping of config keys, got {type(config).__name__}")
    if isinstance(config, dict):
        _check_section_files(config, Path(path).parent if Path(path).is_file() else Path.cwd(), f"{key} {path}")
    if not Path(path).is_file():
        return text  # a pipe (--config <(cat tiny.yaml)) is read once: jsonargparse gets the text read here
    return path


def _check_section_files(config: dict[str, Any], folder: Path, what: str) -> None:
    """A section given as a file inside a config (``data: data/iid.yaml``, read by jsonargparse relative to the
    config's folder) is read through the same boundary first, so its refusal names it."""
    from lit_fl.strict_yaml import YAML_FILE, parse_yaml

    for section, value in config.items():
        if isinstance(value, str) and _is_file_key(f"--{section}", value) and (folder / value).exists():
            name = f"{what}: {section}: {value}"
            parse_yaml(YAML_FILE.read_text(folder / value, name), name)


def with_run_config(argv: list[str]) -> list[str]:
    """``--resume runs/NAME``: the run's own ``config.yaml`` is the base config, every other config file and key
    applies on top (what differs from the run is refused later, except ``rounds``, see
    :func:`lit_fl.experiment.check_resume_config`). So ``lit-fl fit --resume runs/NAME`` alone continues a run.
    The stored ``trainer`` section is left out: it describes the machine the run was on (devices, accelerator),
    and a run resumes on any (given on the command line or in a config, else the defaults)."""
    import yaml

    from lit_fl.run_dir import RunDir

    run = _option_value(argv, "--resume")
    if not run:
        return argv
    folder = RunDir(Path(run))
    what = "a file" if folder.path.exists() else "no such folder"
    RUN_FOLDER.require(run, folder.path.is_dir(), f"not a run directory ({what})")
    if not folder.config.is_file():  # a run stopped before its config.yaml was written takes the config given
        RUN_FOLDER.require(run, folder.has_checkpoint() or folder.started_here(),
                           "not a run directory (it holds neither a config.yaml nor a checkpoint)")
        return argv
    stored = folder.read_config()  # a damaged config.yaml: one ConfigError line naming it
    stored.pop("trainer", None)
    return ["--config", yaml.safe_dump(stored, sort_keys=False), *argv]


def _option_value(argv: list[str], option: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith(f"{option}="):
            return arg.split("=", 1)[1]
        if arg == option and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _configs_first(argv: list[str]) -> list[str]:
    """``--config`` files apply before every other argument wherever they stand: the W&B agent passes a sweep's
    parameters in its own order (``--algorithm.init_args.loss=ce --config=dfml.yaml``)."""
    configs: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i].startswith("--config="):
            configs.append(argv[i])
        elif argv[i] == "--config" and i + 1 < len(argv):
            configs += argv[i : i + 2]
            i += 1
        else:
            rest.append(argv[i])
        i += 1
    return configs + rest


def _is_file_key(key: str, value: str) -> bool:
    return key == "--config" or ("." not in key[2:] and value.endswith((".yaml", ".yml")))


def config_keys() -> list[str]:
    """Every dotted key ``lit-fl fit`` accepts (for "unknown key" messages)."""
    return [k for k in fit_parser().get_defaults().keys() if k not in ("config", "__default_config__")]
