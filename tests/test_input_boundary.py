"""Issue 37: every file lit-fl reads passes one boundary (a regular file of bounded size, YAML with bounded alias
expansion, a ``<(...)`` pipe read once), errors that name their cause (a full disk, ``--resume`` of a folder that is
not a run), run folders read by real path, and labels outside the model's classes refused before training."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TINY_POOL, run_cli, tiny_config, write_config

from lit_fl.errors import ConfigError
from lit_fl.strict_yaml import load_yaml


def _within(seconds: float, fn: Callable[[], Any], unblock: Callable[[], None] = lambda: None) -> Any:
    """``fn()`` in a thread; a test failure when it has not returned after ``seconds`` (``unblock`` then frees it)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        unblock()
        pytest.fail(f"still running after {seconds} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# --- A: one boundary for every file read ---------------------------------------------------------------------------

def test_config_fifo_is_refused_in_one_line_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "c.yaml"
    os.mkfifo(fifo)

    def unblock() -> None:  # a reader blocked in open(): give it a writer so that the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    result = _within(20, lambda: run_cli("fit", "--config", fifo), unblock)
    line = _one_line(result.err)
    assert result.rc == 2 and "--config" in line and str(fifo) in line and "FIFO" in line, line


@pytest.mark.parametrize("kind", ["device", "directory"])
def test_config_that_is_no_regular_file_is_one_line(tmp_path: Path, kind: str) -> None:
    path = Path("/dev/zero") if kind == "device" else tmp_path
    result = _within(20, lambda: run_cli("fit", "--config", path))
    line = _one_line(result.err)
    assert result.rc == 2 and "--config" in line and str(path) in line and "regular file" in line, line


def test_text_file_above_the_size_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    from lit_fl.file_schema import MAX_TEXT_BYTES

    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:  # sparse: nothing is written to disk
        handle.truncate(MAX_TEXT_BYTES + 1)
    with pytest.raises(ConfigError, match=r"--config big.yaml.*larger than the limit of 64 MiB") as info:
        load_yaml(big, "--config big.yaml")
    assert "\n" not in str(info.value)


def _alias_bomb(levels: int = 9, width: int = 10) -> str:
    lines = ["seed: 0", "data:", "  options:", "    a0: &a0 [lol]"]
    for level in range(1, levels + 1):
        lines.append(f"    a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_refused_within_a_second(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_alias_bomb())
    assert bomb.stat().st_size < 1000
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=r"bomb.yaml.*aliases expand to more than 100,000 nodes") as info:
        _within(10, lambda: load_yaml(bomb, str(bomb)))
    assert time.perf_counter() - start < 1.0 and "\n" not in str(info.value)
    result = _within(20, lambda: run_cli("fit", "--config", bomb))
    assert result.rc == 2 and "aliases expand" in _one_line(result.err)
    assert load_yaml(_write(tmp_path / "ok.yaml", "a: &x [1, 2]\nb: *x\n"), "ok") == {"a": [1, 2], "b": [1, 2]}


def test_a_section_file_named_inside_a_config_passes_the_same_boundary(tmp_path: Path) -> None:
    """``data: data.yaml`` inside a config is read by jsonargparse, not by lit-fl's reader: a bomb there ran the
    machine out of memory (21 GB in 10 minutes) and a FIFO was opened."""
    body = _alias_bomb().split("data:\n", 1)[1].replace("\n  ", "\n")[2:]  # the data section on its own
    _write(tmp_path / "bomb.yaml", "name: synthetic\n" + body)
    os.mkfifo(tmp_path / "pipe.yaml")
    for section, line in (("bomb.yaml", "data: bomb.yaml: its aliases expand to more than 100,000 nodes"),
                          ("pipe.yaml", "data: pipe.yaml: is a FIFO")):
        config = write_config(tmp_path / f"uses-{section}", {**tiny_config("DecentralizedFedAvg"), "data": section})
        result = _within(20, lambda c=config: run_cli("fit", "--config", c, "--run_dir", tmp_path / "runs"))
        assert result.rc == 2 and line in _one_line(result.err), result.err
    assert not (tmp_path / "runs").exists()


def test_yaml_that_jsonargparse_reads_itself_is_bounded_too(tmp_path: Path) -> None:
    """Any text the config parser loads (a command-line value here) meets the alias bound and the repeated-key rule;
    other text keeps jsonargparse's own reading (a plain string stays a string)."""
    from lit_fl.strict_yaml import bound_jsonargparse, jsonargparse_yaml_load

    bound_jsonargparse()
    with pytest.raises(ConfigError, match="aliases expand to more than 100,000 nodes"):
        _within(10, lambda: jsonargparse_yaml_load(_alias_bomb()))
    with pytest.raises(ConfigError, match="line 2: duplicate key 'a'"):
        jsonargparse_yaml_load("a: 1\na: 2\n")
    assert jsonargparse_yaml_load("{beta: 0.5}") == {"beta": 0.5}
    assert jsonargparse_yaml_load("runs/x") == "runs/x"
    with pytest.raises(yaml.YAMLError):  # malformed: jsonargparse's own loader reports it as it always has
        jsonargparse_yaml_load("a: [1")
    config = write_config(tmp_path / "tiny.yaml", tiny_config("DecentralizedFedAvg"))
    result = _within(20, lambda: run_cli("fit", "--config", config, "--data.options", _alias_bomb()))
    assert result.rc == 2 and "aliases expand" in _one_line(result.err), result.err


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_config_from_a_process_substitution_pipe_is_read_once_and_used(tmp_path: Path) -> None:
    """``lit-fl fit --config <(cat tiny.yaml)``: bash passes /dev/fd/N, a pipe that can be read only once."""
    config = {**tiny_config(rounds=1), "run_dir": str(tmp_path / "runs"), "name": "piped"}
    read, write = os.pipe()
    try:
        os.write(write, yaml.safe_dump(config).encode())
        os.close(write)
        result = _within(120, lambda: run_cli("fit", "--config", f"/dev/fd/{read}"))
    finally:
        os.close(read)
    assert result.rc == 0, result.err
    assert json.loads((tmp_path / "runs" / "piped" / "summary.json").read_text())["status"] == "completed"


# --- B: errors that name their cause -------------------------------------------------------------------------------

def test_resume_of_a_folder_that_is_not_a_run_names_resume_and_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "not-a-run"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    result = run_cli("fit", "--resume", folder)
    line = _one_line(result.err)
    assert result.rc == 2 and "--resume" in line and str(folder) in line and "not a run" in line, line

class FullDisk:
    """A file handle on a disk with ``room`` bytes left: a write beyond them fails with ENOSPC, as a full disk's."""

    def __init__(self, handle: Any, room: int) -> None:
        self.handle, self.room = handle, room

    def write(self, data: Any) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.handle.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    def __enter__(self) -> FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()



def test_full_disk_during_a_checkpoint_names_the_path_and_keeps_the_previous_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import lit_fl.io as lit_io

    path = tmp_path / "last.ckpt"
    lit_io.atomic_torch_save({"round": 1, "w": torch.zeros(4)}, path)
    before = path.read_bytes()
    real_fdopen = os.fdopen

    monkeypatch.setattr(lit_io.os, "fdopen", lambda *a, **k: FullDisk(real_fdopen(*a, **k), room=64))
    with pytest.raises(OSError, match=r"(?i)no space left on device") as info:
        lit_io.atomic_torch_save({"round": 2, "w": torch.ones(10_000)}, path)
    assert info.value.errno == errno.ENOSPC and str(path) in str(info.value)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


# --- C: run folders read by real path ------------------------------------------------------------------------------

def _run(folder: Path, seed: int, accuracy: list[float]) -> None:
    from lit_fl.tracking import MetricsCSV

    folder.mkdir(parents=True)
    csv = MetricsCSV(folder / "metrics.csv")
    for r, a in enumerate(accuracy, 1):
        csv.append({"round": r, "global_acc": a, "reported_acc": a, "comm_mb": float(r)})
    (folder / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "data": {"beta": 0.5}}))
    (folder / "summary.json").write_text(json.dumps({"status": "completed"}))


def test_compare_counts_a_linked_run_once_and_skips_loops_and_links_out(tmp_path: Path) -> None:
    from lit_fl.suite.compare.results import load_comparison

    runs = tmp_path / "runs"
    _run(runs / "a", 0, [0.5, 0.6])
    _run(runs / "b", 1, [0.5, 0.7])
    (runs / "latest").symlink_to(runs / "b")
    (runs / "loop").symlink_to(runs / "loop")
    (runs / "proc").symlink_to("/proc")
    result = run_cli("compare", runs, "--out", tmp_path / "out")
    assert result.rc == 0, result.err
    warned = [line for line in result.err.splitlines() if "skipped" in line]
    assert len(warned) == 2 and any("loop" in line for line in warned) and any("proc" in line for line in warned)
    assert sorted(run.name for run in load_comparison([runs]).runs) == ["a", "b"]


def test_symlink_loop_as_run_dir_is_one_line(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    config = write_config(tmp_path / "c.yaml", {**tiny_config(rounds=1), "run_dir": str(loop)})
    result = _within(60, lambda: run_cli("fit", "--config", config))
    line = _one_line(result.err)
    assert result.rc == 2 and "run_dir" in line and str(loop) in line, line


# --- D: labels outside the model's classes -------------------------------------------------------------------------

def test_labels_outside_the_models_classes_stop_before_training(tmp_path: Path) -> None:
    """A digits-only EMNIST file (10 classes) whose labels reach 61: one line naming the dataset and label 61."""
    from fedjax_files import femnist_files

    from lit_fl.config import DataConfig, ModelsConfig
    from lit_fl.data.registry import load_dataset
    from lit_fl.federation.builder import build_federation

    femnist_files(tmp_path, sizes=(30, 30, 30, 30), test_size=40)
    for split in ("train", "test"):
        (tmp_path / f"federated_emnist_{split}.sqlite").rename(tmp_path / f"federated_emnist_digitsonly_{split}.sqlite")
    dataset = load_dataset("femnist", tmp_path, only_digits=True)
    assert dataset.num_classes == 10 and int(dataset.train_y.max()) == 61
    data = DataConfig(dataset="femnist", root=str(tmp_path), partition="natural", num_clients=4,
                      options={"only_digits": True})
    with pytest.raises(ConfigError, match=r"femnist.*label 61.*0\.\.9") as info:
        build_federation(dataset, data, ModelsConfig(pool=list(TINY_POOL)), seed=0)
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)


def test_full_disk_during_a_run_is_one_line_naming_the_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second checkpoint of a run meets a full disk: one line naming it, the first checkpoint stays."""
    import lit_fl.io as lit_io

    real_fdopen, saves = os.fdopen, []

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        handle = real_fdopen(fd, *args, **kwargs)
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(".last.ckpt."):
            saves.append(fd)
            return FullDisk(handle, room=0) if len(saves) > 1 else handle
        return handle

    monkeypatch.setattr(lit_io.os, "fdopen", fdopen)
    config = write_config(tmp_path / "c.yaml", {**tiny_config(rounds=2), "run_dir": str(tmp_path / "runs"),
                                                "name": "full", "checkpoint_every": 1})
    result = run_cli("fit", "--config", config)
    checkpoint = tmp_path / "runs" / "full" / "checkpoints" / "last.ckpt"
    line = _one_line(result.err)
    assert result.rc == 1 and "No space left on device" in line and str(checkpoint) in line, result.err
    assert checkpoint.is_file() and len(saves) == 2


def test_symlink_loop_as_the_run_folder_under_run_dir_is_one_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "x").symlink_to(runs / "x")
    config = write_config(tmp_path / "c.yaml", {**tiny_config(rounds=1), "run_dir": str(runs), "name": "x"})
    result = _within(60, lambda: run_cli("fit", "--config", config))
    line = _one_line(result.err)
    assert result.rc == 2 and "name" in line and str(runs / "x") in line and "symbolic links" in line, line


def test_labels_outside_the_models_classes_are_one_line_from_fit(tmp_path: Path) -> None:
    from fedjax_files import femnist_files

    femnist_files(tmp_path, sizes=(30, 30, 30, 30), test_size=40)
    for split in ("train", "test"):
        (tmp_path / f"federated_emnist_{split}.sqlite").rename(tmp_path / f"federated_emnist_digitsonly_{split}.sqlite")
    config = tiny_config(rounds=1)
    config["data"] = {"dataset": "femnist", "root": str(tmp_path), "partition": "natural", "num_clients": 4,
                      "options": {"only_digits": True}}
    path = write_config(tmp_path / "c.yaml", {**config, "run_dir": str(tmp_path / "runs")})
    result = run_cli("fit", "--config", path)
    line = _one_line(result.err)
    assert result.rc == 2 and "label 61" in line and "femnist" in line and str(tmp_path) in line, line


def test_yaml_alias_count_handles_shared_and_recursive_nodes(tmp_path: Path) -> None:
    shared = "base: &b {x: 1, y: [1, 2, 3]}\n" + "".join(f"k{i}: *b\n" for i in range(50))
    assert len(load_yaml(_write(tmp_path / "shared.yaml", shared), "shared")) == 51
    looped = load_yaml(_write(tmp_path / "loop.yaml", "a: &a [*a, 1]\n"), "loop")["a"]
    assert looped[0] is looped and looped[1] == 1
