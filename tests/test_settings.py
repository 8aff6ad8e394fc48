"""The client-SGD settings are declared once (:mod:`lit_fl.algorithms.settings`) and every key users write keeps its
value: every shipped config (and every run of every shipped sweep that sets ``algorithm.*``) resolves the algorithm
to exactly what it resolved to before the settings moved (``settings_snapshot.json``, recorded on main at 991b717),
and every built-in's defaults from Python are unchanged.

Regenerate the snapshot only when a config's values change on purpose: ``PYTHONPATH=. python tests/test_settings.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import io
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from lit_fl.configs import ROOT

SNAPSHOT = Path(__file__).with_name("settings_snapshot.json")
#: the random sweeps' runs recorded (the grids are walked whole)
RANDOM_RUNS = 20
#: built-ins allowed to re-declare the six (none: the round contract's rewrite of ServerFedAvg and SCAFFOLD moved them
#: onto ``client_defaults`` too)
REDECLARING: dict[str, str] = {}
#: keys the round contract added after the snapshot (ServerFedAvg's server optimizer slot), at the defaults that are
#: FedAvg's own step: left out of the comparison with the snapshot (any other value is a change and compared)
ADDED_KEYS: dict[str, Any] = {"server_optimizer": "sgd", "server_lr": 1.0, "server_momentum": 0.0,
                              "server_betas": [0.9, 0.99], "server_eps": 1e-3}
#: the built object's attribute for those keys at those defaults
ADDED_STATE = {"server_optimizer": {"__type__": "ServerSGD", "lr": 1.0, "momentum": 0.0, "velocity": {}},
               "members": {}}  # codistillation's pools as the contract's participants, built by setup
#: attributes the round contract added to lit-fl objects, at the values that keep the old arithmetic (codistillation's
#: FedAdam: its second moment starts at 0, as before the slot's Yogi and Adagrad needed a start of their own)
ADDED_ATTRIBUTES = {("FedAdam", "initial_accumulator"): 0.0}


# -- what a config resolves to ---------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """``value`` as JSON: an object of lit-fl's by its public attributes, anything unknown by its repr."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [plain(x) for x in value]
    if isinstance(value, (set, frozenset)):
        return sorted(plain(x) for x in value)
    if isinstance(value, dict):
        return {str(k): plain(x) for k, x in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "__dict__") and type(value).__module__.startswith("lit_fl"):
        kind = type(value).__name__
        return {"__type__": kind, **{k: plain(x) for k, x in vars(value).items() if not k.startswith("_")
                                     and ADDED_ATTRIBUTES.get((kind, k), object()) != x}}
    return repr(value)


def state_of(algorithm: Any) -> Any:
    state = {k: plain(v) for k, v in vars(algorithm).items()}
    return {k: v for k, v in state.items() if k not in ADDED_STATE or ADDED_STATE[k] != v}


def digest(state: Any) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


@cache
def _parser() -> Any:
    from lit_fl.commands.fit import fit_parser

    return fit_parser()


def resolve(argv: list[str]) -> dict[str, Any]:
    """The class path, resolved ``init_args`` and the built object's state of the algorithm of ``lit-fl fit ARGV``."""
    from lit_fl.commands.fit import resolve_config_files

    parser = _parser()
    cfg = parser.parse_args(resolve_config_files(argv))
    algorithm = parser.instantiate(cfg).algorithm
    init_args = {k: v for k, v in plain(cfg.algorithm.init_args.as_dict()).items()
                 if k not in ADDED_KEYS or v != ADDED_KEYS[k]}
    return {"class_path": cfg.algorithm.class_path, "init_args": init_args, "state": digest(state_of(algorithm))}


def shipped_configs() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "experiments").rglob("*.yaml"))]


def sweep_runs() -> list[str]:
    """Every distinct ``config`` + ``algorithm.*`` of a shipped sweep's runs that sets an ``algorithm.*`` key (JSON)."""
    from lit_fl.suite.engine import iter_expand
    from lit_fl.suite.sweep_file import load_sweep_file

    runs: dict[str, None] = {}
    for path in sorted((ROOT / "sweeps").glob("*.yaml")):
        if path.name.endswith(".paper.yaml"):
            continue
        sweep = load_sweep_file(path)
        for params in iter_expand(sweep, RANDOM_RUNS if sweep.method == "random" else None, 0):
            keys = {k: v for k, v in params.items() if k == "config" or k.startswith("algorithm")}
            if set(keys) - {"config"}:
                runs[json.dumps(keys, sort_keys=True)] = None
    return list(runs)


def sweep_argv(run: str) -> list[str]:
    from lit_fl.suite.engine import agent_args

    return agent_args(json.loads(run))


def builtin_defaults() -> dict[str, Any]:
    from lit_fl.algorithms.registry import ALGORITHMS

    return {name: state_of(cls()) for name, cls in sorted(ALGORITHMS.items())}


def record() -> None:
    """Write the snapshot of what the code checked out here resolves."""
    import lit_fl.algorithms  # noqa: F401 - registers the built-ins

    with contextlib.redirect_stderr(io.StringIO()):
        entries = {**{c: resolve(["--config", str(ROOT / c)]) for c in shipped_configs()},
                   **{r: resolve(sweep_argv(r)) for r in sweep_runs()}}
    distinct = sorted({json.dumps(e, sort_keys=True) for e in entries.values()})
    index = {e: i for i, e in enumerate(distinct)}
    SNAPSHOT.write_text(json.dumps({
        "resolutions": [json.loads(e) for e in distinct],
        "entries": {k: index[json.dumps(e, sort_keys=True)] for k, e in entries.items()},
        "defaults": builtin_defaults(),
    }, indent=0, sort_keys=True) + "\n")


@cache
def snapshot() -> dict[str, Any]:
    return json.loads(SNAPSHOT.read_text())


# -- every key keeps its value ---------------------------------------------------------------------------------


@pytest.mark.parametrize("config", shipped_configs())
def test_a_shipped_config_resolves_its_algorithm_as_before(config: str) -> None:
    expected = snapshot()["resolutions"][snapshot()["entries"][config]]
    assert resolve(["--config", str(ROOT / config)]) == expected


@pytest.mark.parametrize("run", sweep_runs())
def test_a_shipped_sweep_run_resolves_its_algorithm_as_before(run: str) -> None:
    expected = snapshot()["resolutions"][snapshot()["entries"][run]]
    assert resolve(sweep_argv(run)) == expected


def test_the_snapshot_covers_every_config_and_sweep_run() -> None:
    assert set(snapshot()["entries"]) == set(shipped_configs()) | set(sweep_runs())


def test_every_builtin_built_from_python_has_its_defaults_as_before() -> None:
    now, before = builtin_defaults(), snapshot()["defaults"]
    assert sorted(now) == sorted(before)
    assert {n: s for n, s in now.items() if s != before[n]} == {}


# -- declared once ---------------------------------------------------------------------------------------------


def builtins() -> list[str]:
    import lit_fl.algorithms  # noqa: F401
    from lit_fl.algorithms.registry import ALGORITHMS

    return sorted(ALGORITHMS)


@pytest.mark.parametrize("name", builtins())
def test_every_method_shows_the_six_with_their_ranges_and_its_defaults(name: str) -> None:
    import typing

    from lit_fl.algorithms.registry import ALGORITHMS
    from lit_fl.algorithms.settings import CLIENT_SGD, ClientSGD

    cls = ALGORITHMS[name]
    parameters = inspect.signature(cls.__init__).parameters
    types = typing.get_type_hints(ClientSGD, include_extras=True)
    for key in CLIENT_SGD:
        assert parameters[key].annotation == types[key], (name, key)
        assert parameters[key].default == getattr(cls.client_defaults, key), (name, key)
        assert getattr(cls(), "optimizer" if key in ("lr", "momentum", "weight_decay") else key) is not None
    built = cls()
    assert (built.local_epochs, built.loss, built.optimizer.lr, built.optimizer.momentum,
            built.optimizer.weight_decay, built.batch_size) == dataclasses.astuple(cls.client_defaults)


@pytest.mark.parametrize("name", sorted(set(builtins()) - set(REDECLARING)))
def test_no_builtin_redeclares_the_six(name: str) -> None:
    from lit_fl.algorithms.registry import ALGORITHMS
    from lit_fl.algorithms.settings import CLIENT_SGD

    for klass in ALGORITHMS[name].__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass.__name__ in REDECLARING or not klass.__module__.startswith("lit_fl"):
            continue
        written = inspect.signature(inspect.unwrap(init)).parameters
        assert not set(written) & set(CLIENT_SGD), (klass.__name__, sorted(set(written) & set(CLIENT_SGD)))


def _help(name: str) -> str:
    from lit_fl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["fit", "--algorithm.help", name])
    return re.sub(r"\s+", " ", out.getvalue())


@pytest.mark.parametrize(("name", "lr", "batch"), [("Local", "0.05", "50"), ("FedDF", "0.01", "32"),
                                                   ("DFML", "0.01", "64"), ("DFedAvgM", "0.05", "50")])
def test_help_shows_each_methods_defaults_with_the_ranges(name: str, lr: str, batch: str) -> None:
    text = _help(name)
    assert f"(type: Annotated[float, > 0], default: {lr})" in text.split("--algorithm.lr LR", 1)[1]
    assert f"(type: Annotated[int, >= 1], default: {batch})" in text.split("--algorithm.batch_size BATCH_SIZE", 1)[1]


def test_a_new_method_states_its_defaults_once() -> None:
    from lit_fl.algorithms import Algorithm
    from lit_fl.algorithms.settings import ClientSGD

    class Mine(Algorithm):
        client_defaults = ClientSGD(lr=0.3, batch_size=8)

        def __init__(self, mine: float = 1.0, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.mine = mine

        def run_round(self, round_, federation, runner, ledger):  # noqa: ANN001, ANN201
            raise NotImplementedError

    class Yours(Mine):
        pass

    assert (Mine().optimizer.lr, Mine().batch_size, Yours(lr=0.2).optimizer.lr, Yours().batch_size) == (0.3, 8, 0.2, 8)
    assert list(inspect.signature(Yours.__init__).parameters)[:3] == ["self", "mine", "local_epochs"]
    with pytest.raises(TypeError, match="given twice"):
        class Twice(Mine):  # noqa: F841
            client_defaults = ClientSGD(lr=0.1)

            def __init__(self, lr: float = 0.2, **kwargs: Any) -> None:
                super().__init__(lr=lr, **kwargs)


def test_an_inherited_key_a_class_fixes_is_not_one_of_its_keys() -> None:
    from lit_fl.algorithms import DFML

    class Fixed(DFML):
        def __init__(self, extra: int = 1, **kwargs: Any) -> None:
            super().__init__(loss="ce", sender_fraction=1.0, **kwargs)

    keys = list(inspect.signature(Fixed.__init__).parameters)
    assert "loss" not in keys and "sender_fraction" not in keys and {"extra", "lr", "fixed_aggregator"} <= set(keys)
    built = Fixed(lr=0.5)
    assert (built.loss, built.sender_fraction, built.optimizer.lr) == ("ce", 1.0, 0.5)


def test_a_bad_default_is_refused_where_it_is_declared() -> None:
    from lit_fl.algorithms.settings import ClientSGD
    from lit_fl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^algorithm.momentum must be in \[0, 1\), got 1.5$"):
        ClientSGD(momentum=1.5)


# -- a Literal is checked by the type layer --------------------------------------------------------------------


@pytest.mark.parametrize(("build", "message"), [
    ("ServerFedAvg(loss='x')", "algorithm.loss: 'x' is not allowed; allowed: wsm, ce"),
    ("DFML(loss='x')", "algorithm.loss: 'x' is not allowed; allowed: wsm, ce"),
    ("FedDF(aggregation='x')", "algorithm.aggregation: 'x' is not allowed; allowed: samples, uniform"),
    ("FedORION(noise='pink')", "algorithm.noise: 'pink' is not allowed; allowed: gaussian, dead_leaves"),
    ("FedORION(bn_stats=None)", "algorithm.bn_stats: None is not allowed; allowed: current, running"),
    ("FedMD(digest_loss='l2')", "algorithm.digest_loss: 'l2' is not allowed; allowed: l1, mse"),
    ("HeteroFL(weighting='x')", "algorithm.weighting: 'x' is not allowed; allowed: equal, samples"),
    ("DFML(alpha_schedule='x')", "algorithm.alpha_schedule: 'x' is not allowed; allowed: cyclic, fixed"),
])
def test_a_literal_refuses_from_python_with_the_command_lines_line(build: str, message: str) -> None:
    import lit_fl.algorithms as algorithms
    from lit_fl.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        eval(build, vars(algorithms))  # noqa: S307 - the test's own expressions
    assert str(info.value) == message


@pytest.mark.parametrize(("flags", "message"), [
    (["--algorithm", "FedDF", "--algorithm.aggregation", "x"],
     "algorithm.aggregation: 'x' is not allowed; allowed: samples, uniform"),
    (["--algorithm", "DFML", "--algorithm.loss", "x"], "algorithm.loss: 'x' is not allowed; allowed: wsm, ce"),
    (["--trainer.fuse", "x"], "trainer.fuse: 'x' is not allowed; allowed: auto, on, off"),
])
def test_a_literal_refuses_on_the_command_line_in_one_line(tmp_path: Path, flags: list[str], message: str) -> None:
    from conftest import run_cli, tiny_config, write_config

    cfg = write_config(tmp_path / "c.yaml", tiny_config(rounds=1))
    result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs", *flags)
    assert result.rc == 2 and result.err.strip() == f"lit-fl: error: {message}"


@pytest.mark.parametrize(("build", "message"), [
    ("DataConfig(partition='x')", "data.partition: 'x' is not allowed; allowed: iid, dirichlet, shards, natural"),
    ("TrainerConfig(precision='64-true')",
     "trainer.precision: '64-true' is not allowed; allowed: 32-true, bf16-mixed, 16-mixed"),
    ("TopologyConfig(name='star')", "topology.name: 'star' is not allowed; allowed: mesh, two_group, ring, regular"),
])
def test_a_config_sections_literal_refuses_from_python(build: str, message: str) -> None:
    from lit_fl.config import DataConfig, TrainerConfig
    from lit_fl.errors import ConfigError
    from lit_fl.federation.topology import TopologyConfig

    names = {"DataConfig": DataConfig, "TrainerConfig": TrainerConfig, "TopologyConfig": TopologyConfig}
    with pytest.raises(ConfigError) as info:
        eval(build, names)  # noqa: S307 - the test's own expressions
    assert str(info.value) == message


def test_no_hand_written_check_repeats_a_literal() -> None:
    package = Path(__file__).resolve().parents[1] / "lit_fl"
    found = [f"{p.relative_to(package)}: {line.strip()}" for p in sorted(package.rglob("*.py"))
             if p.name not in REDECLARING.values()
             for line in p.read_text().splitlines() if re.search(r"algorithm\.\w+ must be one of", line)]
    assert not found, "\n".join(found)


if __name__ == "__main__":
    record()
