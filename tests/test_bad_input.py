"""Bad input, tried as a new user would: every case exits 2 with ONE line that names the dotted key, before
anything heavy starts, and writes nothing (no run directory, nothing beside it). All cases run in one process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import TINY_OPTIONS, TINY_POOL, run_cli, snapshot, tiny_config, write_config

SLOWEST: list[tuple[float, str]] = []

# (id, algorithm of the base config, extra argv, the words the one error line must contain)
CASES = [
    ("rounds-zero", "DFML", ["--rounds", "0"], ["rounds", ">= 1"]),
    ("rounds-negative", "DFML", ["--rounds", "-1"], ["rounds"]),
    ("rounds-type", "DFML", ["--rounds", "abc"], ["rounds", "int"]),
    ("eval-every", "DFML", ["--eval_every", "0"], ["eval_every"]),
    ("checkpoint-every", "DFML", ["--checkpoint_every", "-1"], ["checkpoint_every"]),
    ("seed", "DFML", ["--seed", "-1"], ["seed"]),
    ("unknown-top-key", "DFML", ["--roundz", "3"], ["roundz", "unknown"]),
    ("beta-zero", "DFML", ["--data.beta", "0"], ["data.beta", "> 0"]),
    ("beta-nan", "DFML", ["--data.beta", "nan"], ["data.beta", "finite"]),
    ("options-misspelt", "DFML", ["--data.dataset", "synthetic", "--data.options", "{num_class: 10}"],
     ["data.options", "'num_class'", "allowed: num_classes"]),  # issue 37: was a TypeError traceback
    ("beta-inf", "DFML", ["--data.beta", "inf"], ["data.beta", "finite"]),
    ("dataset", "DFML", ["--data.dataset", "imagenet"], ["data.dataset", "mnist5k"]),
    ("partition", "DFML", ["--data.partition", "foo"], ["data.partition", "dirichlet"]),
    ("clients-zero", "DFML", ["--data.num_clients", "0"], ["data.num_clients"]),
    ("clients-one-decentralized", "DFML", ["--data.num_clients", "1"], ["data.num_clients", "2 clients"]),
    ("clients-more-than-data", "DFML", ["--data.num_clients", "1000"], ["data.num_clients", "at most 200"]),
    ("zeta-zero", "DFML", ["--data.partition", "shards", "--data.zeta", "0"], ["data.zeta"]),
    ("shards-too-many", "DFML", ["--data.partition", "shards", "--data.zeta", "300"], ["data.zeta", "at most"]),
    ("val-fraction", "DFML", ["--data.val_fraction", "1.0"], ["data.val_fraction"]),
    ("server-fraction", "DFML", ["--data.server_fraction", "1.5"], ["data.server_fraction"]),
    ("augment", "DFML", ["--data.augment", "mixup"], ["data.augment", "crop_flip"]),
    ("unknown-data-key", "DFML", ["--data.betta", "0.1"], ["data.betta", "beta"]),
    ("pool", "DFML", ["--models.pool", "[resnet99]"], ["models.pool", "resnet99"]),
    ("same-init", "DFML", ["--models.same_init", "maybe"], ["models.same_init"]),
    ("devices-above-the-cores", "DFML", ["--trainer.accelerator", "cpu", "--trainer.devices", "1000"],
     ["trainer.devices", "1000", "one process per device"]),  # it started a thousand processes
    ("accelerator-gpu", "DFML", ["--trainer.accelerator", "gpu"], ["trainer.accelerator", "CUDA"]),
    ("accelerator-cuda", "DFML", ["--trainer.accelerator", "cuda"], ["trainer.accelerator"]),
    ("accelerator-tpu", "DFML", ["--trainer.accelerator", "tpu"], ["trainer.accelerator", "torch_xla"]),
    ("accelerator-mps", "DFML", ["--trainer.accelerator", "mps"], ["trainer.accelerator", "macOS"]),
    ("accelerator-unknown", "DFML", ["--trainer.accelerator", "quantum"], ["trainer.accelerator", "cpu"]),
    ("precision", "DFML", ["--trainer.precision", "8-bit"], ["trainer.precision", "bf16-mixed"]),
    ("precision-16-on-cpu", "DFML", ["--trainer.precision", "16-mixed", "--trainer.accelerator", "cpu"],
     ["trainer.precision", "GPU"]),
    ("devices", "DFML", ["--trainer.devices", "0"], ["trainer.devices"]),
    ("num_nodes", "DFML", ["--trainer.num_nodes", "0"], ["trainer.num_nodes"]),
    ("strategy", "DFML", ["--trainer.strategy", "fsdp"], ["trainer.strategy", "ddp"]),
    ("fuse", "DFML", ["--trainer.fuse", "maybe"], ["trainer.fuse", "auto, on, off"]),
    ("tf32", "DFML", ["--trainer.tf32", "maybe"], ["trainer.tf32"]),
    ("cudnn-benchmark", "DFML", ["--trainer.cudnn_benchmark", "2"], ["trainer.cudnn_benchmark"]),
    ("name-parent", "DFML", ["--name", "../escape"], ["name", "path separators"]),
    ("name-slash", "DFML", ["--name", "a/b"], ["name"]),
    ("run-dir-is-a-file", "DFML", ["--run_dir", "{tmp}/a-file"], ["run_dir", "not a folder"]),
    ("run-dir-impossible", "DFML", ["--run_dir", "/dev/null/runs"], ["run_dir", "writable"]),
    ("drop-prob", "DFML", ["--faults.drop_prob", "2"], ["faults.drop_prob", "[0, 1]"]),
    ("return-drop-prob", "DFML", ["--faults.return_drop_prob", "-0.1"], ["faults.return_drop_prob"]),
    ("drop-prob-nan", "DFML", ["--faults.drop_prob", "nan"], ["faults.drop_prob", "finite"]),
    ("topology-name", "DFML", ["--topology.name", "star"], ["topology.name", "mesh"]),
    ("topology-degree-range", "DFML", ["--topology.degree", "0"], ["topology.degree"]),
    ("topology-degree-vs-clients", "DFML", ["--topology.name", "regular", "--topology.degree", "4"],
     ["topology.degree", "degree < 4"]),
    ("two-group-too-few", "DFML", ["--topology.name", "two_group", "--data.num_clients", "3"], ["data.num_clients"]),
    ("sender-fraction-high", "DFML", ["--algorithm.sender_fraction", "1.5"], ["algorithm.sender_fraction"]),
    ("sender-fraction-zero", "DFML", ["--algorithm.sender_fraction", "0"], ["algorithm.sender_fraction"]),
    ("alpha-max", "DFML", ["--algorithm.alpha_max", "1.5"], ["algorithm.alpha_max", "[0, 1]"]),
    ("alpha-max-inf", "DFML", ["--algorithm.alpha_max", "inf"], ["algorithm.alpha_max", "finite"]),
    ("lr", "DFML", ["--algorithm.lr", "-1"], ["algorithm.lr", "> 0"]),
    ("momentum", "DFML", ["--algorithm.momentum", "1.0"], ["algorithm.momentum"]),
    ("batch-size", "DFML", ["--algorithm.batch_size", "0"], ["algorithm.batch_size"]),
    ("loss", "DFML", ["--algorithm.loss", "foo"], ["algorithm.loss", "wsm"]),
    ("period", "DFML", ["--algorithm.period", "0"], ["algorithm.period"]),
    ("peak-updates", "DFML", ["--algorithm.peak_updates", "0"], ["algorithm.peak_updates"]),
    ("fixed-aggregator", "DFML", ["--algorithm.fixed_aggregator", "9"], ["algorithm.fixed_aggregator", "0..3"]),
    ("mutual-epochs", "DFML", ["--algorithm.mutual_epochs", "-1"], ["algorithm.mutual_epochs"]),
    ("temperature", "DFML", ["--algorithm.temperature", "0"], ["algorithm.temperature"]),
    ("unknown-algorithm-key", "DFML", ["--algorithm.alpha_maxx", "0.5"], ["algorithm.alpha_maxx", "alpha_max"]),
    ("class-path", "DFML", ["--algorithm.class_path", "lit_fl.algorithms.Nope"], ["algorithm", "DFML"]),
    ("logger-mode", "DFML", ["--logger.mode", "sometimes"], ["logger.mode", "offline"]),
    ("resume-missing", "DFML", ["--resume", "{tmp}/runs/none"], ["--resume"]),
    ("config-missing", "DFML", ["--config", "no-such-config.yaml"], ["--config", "lit-fl configs"]),
    ("fedorion-topology", "FedORION", ["--topology.name", "ring"], ["topology.name", "mesh"]),
    ("fedorion-global-lr", "FedORION", ["--algorithm.global_lr", "0"], ["algorithm.global_lr"]),
    ("fedorion-no-dml", "FedORION", ["--algorithm.no_dml", "[7]"], ["algorithm.no_dml"]),
    ("codist-without-server-data", "PeriodicCodist", [], ["data.server_fraction"]),
    ("fml-alpha", "DecentralizedFML", ["--algorithm.fml_alpha", "2"], ["algorithm.fml_alpha"]),
    ("partial-training-mixed-pool", "HeteroFL", ["--models.pool", "[cnn_4_8, vit_16_16]"], ["models.pool"]),
]


def _config(algorithm: str) -> dict:
    if algorithm in ("DFML", "DecentralizedFML", "HeteroFL"):
        return tiny_config(algorithm)
    config = tiny_config(algorithm)
    config["algorithm"]["init_args"] = {}
    if algorithm == "FedORION":
        config["algorithm"]["init_args"] = {"local_epochs": 1, "noise_batch_size": 16}
    return config


@pytest.mark.parametrize(("case", "algorithm", "argv", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_naming_the_key_and_writes_nothing(
    case: str, algorithm: str, argv: list[str], words: list[str], tmp_path: Path
) -> None:
    cfg = write_config(tmp_path / "cfg.yaml", _config(algorithm))
    (tmp_path / "a-file").write_text("not a folder")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    base = ["fit", "--config", cfg, "--run_dir", tmp_path / "runs", "--name", "run", "--logger.wandb", "false"]
    if "--config" in argv:  # the case replaces the config itself
        base = ["fit", "--run_dir", tmp_path / "runs"]
    if "--name" in argv or "--run_dir" in argv:
        base = [a for a in base if a not in ("--name", "run")]
        if "--run_dir" in argv:
            base = base[:3] + base[5:]
    before = snapshot(tmp_path)
    start = time.perf_counter()
    result = run_cli(*base, *argv)
    SLOWEST.append((time.perf_counter() - start, case))
    assert result.rc == 2, (result.rc, result.err[-2000:])
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("lit-fl: error: "), lines[0]
    for word in words:
        assert word in lines[0], f"{word!r} missing from {lines[0]!r}"
    assert snapshot(tmp_path) == before  # no run directory, nothing beside it


def test_the_suite_holds_at_least_40_cases() -> None:
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)
    assert TINY_POOL and TINY_OPTIONS["num_train"] == 400  # the data sizes the cases above are written for


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc (a virtual file system)")
def test_a_run_dir_on_a_file_system_that_refuses_folders_is_one_line(tmp_path: Path) -> None:
    """``/proc`` lets root through every permission check and still refuses ``mkdir``: the probe finds it first."""
    cfg = write_config(tmp_path / "c.yaml", tiny_config(rounds=1))
    result = run_cli("fit", "--config", cfg, "--run_dir", "/proc/lit-fl-runs")
    assert result.rc == 2 and "Traceback" not in result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert lines == ["lit-fl: error: run_dir: cannot create or write /proc/lit-fl-runs (/proc: No such file or "
                     "directory)"], lines


def test_a_nan_in_a_list_or_a_nested_section_is_named_by_its_dotted_key_and_index() -> None:
    from lit_fl.errors import ConfigError
    from lit_fl.validation import check_finite

    check_finite({"algorithm": {"betas": [0.9, 0.99]}, "rounds": 3})  # finite: nothing said
    with pytest.raises(ConfigError, match=r"^algorithm\.betas\[1\]: must be a finite number, got nan$"):
        check_finite({"algorithm": {"betas": [0.9, float("nan")]}})
    with pytest.raises(ConfigError, match=r"^data\.beta: must be a finite number, got inf$"):
        check_finite({"data": {"beta": float("inf")}})
