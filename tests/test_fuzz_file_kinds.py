"""Issue 37, generation rather than enumeration: the kinds of input a new user brought (a path that is no regular
file, a YAML alias bomb, an option map with a misspelt key, links in a folder of runs) are drawn by Hypothesis, so the
next variant of a kind is found here and not by a user. Each property is the boundary's contract: the value, or one
:class:`ConfigError` line naming the path or key; never a hang, never another exception."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fuzz_inputs import budget
from hypothesis import given
from hypothesis import strategies as st

from lit_fl.errors import ConfigError

#: what a path given to lit-fl can be
KINDS = ("yaml", "empty", "binary", "directory", "fifo", "device", "link-to-yaml", "link-to-device", "broken-link",
         "link-loop", "missing")


class Hang(BaseException):
    """A block ran past its deadline: a BaseException, so no reader's ``except OSError`` (TimeoutError is one) or
    ``except Exception`` turns it into a refusal."""


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the block runs longer than ``seconds``."""
    def expired(signum: int, frame: object) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def make(kind: str, folder: Path) -> Path:
    """A path of ``kind`` in ``folder``."""
    path = folder / f"config-{kind}.yaml"
    if kind in ("yaml", "link-to-yaml"):
        target = folder / "real.yaml"
        target.write_text("rounds: 3\nseed: 1\n")
        if kind == "yaml":
            return target
        path.symlink_to(target)
    elif kind == "empty":
        path.write_text("")
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00rounds")
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        return Path("/dev/zero")
    elif kind == "link-to-device":
        path.symlink_to("/dev/zero")
    elif kind == "broken-link":
        path.symlink_to(folder / "nowhere.yaml")
    elif kind == "link-loop":
        path.symlink_to(path)
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@budget(40)
@given(kind=st.sampled_from(KINDS))
def test_every_kind_of_path_is_read_or_refused_in_one_line_naming_it(kind: str) -> None:
    from lit_fl.strict_yaml import load_yaml

    with tempfile.TemporaryDirectory() as tmp:
        path = make(kind, Path(tmp))
        with deadline(10):
            try:
                value = load_yaml(path, f"--config {path}")
            except ConfigError as err:
                message = str(err)
                assert "\n" not in message and str(path) in message, message
                assert kind not in ("yaml", "link-to-yaml", "empty"), message
                return
        assert kind in ("yaml", "link-to-yaml", "empty"), (kind, value)
        assert value == ({"rounds": 3, "seed": 1} if kind != "empty" else None)


@budget(40)
@given(levels=st.integers(1, 12), fanout=st.integers(1, 12))
def test_aliases_expand_to_the_documented_limit_and_a_bomb_is_refused_within_a_second(levels: int,
                                                                                       fanout: int) -> None:
    from lit_fl.strict_yaml import MAX_NODES, load_yaml

    lines = ["a0: &a0 [x]"]
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [{', '.join(f'*a{level - 1}' for _ in range(fanout))}]")
    expanded = sum(fanout**level for level in range(levels + 1))  # the leaves of the deepest list, roughly
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "aliases.yaml"
        path.write_text("\n".join(lines) + "\n")
        started = time.monotonic()
        try:
            value = load_yaml(path, f"--config {path}")
        except ConfigError as err:
            assert "alias" in str(err) and "\n" not in str(err), err
            assert expanded > MAX_NODES // 4, (levels, fanout, err)  # refused only when large
        else:
            assert expanded <= 2 * MAX_NODES, (levels, fanout)  # read only when small
            assert value[f"a{levels}"] is not None
        assert time.monotonic() - started < 2.0  # a guard against a hang; the canonical bomb's second is timed in
        # test_input_boundary


OPTION_NAMES = ("num_classes", "input_shape", "num_train", "num_test", "noise")
#: the synthetic dataset's options, and keys a hand could write instead (num_class, numclasses, ...)
OPTION_KEYS = st.one_of(st.sampled_from(OPTION_NAMES), st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12))


@budget(60)
@given(options=st.dictionaries(OPTION_KEYS, st.integers(1, 50), max_size=4))
def test_an_option_map_is_taken_or_its_first_unknown_key_is_named_with_the_allowed_ones(options: dict) -> None:
    from lit_fl.data.options import check_options
    from lit_fl.data.synthetic import load_synthetic as loader
    unknown = sorted(set(options) - set(OPTION_NAMES))
    try:
        check_options("synthetic", loader, options)
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message and message.startswith("data.options"), message
        if unknown:
            assert repr(unknown[0]) in message and "allowed: " + ", ".join(OPTION_NAMES) in message, message
        return
    assert not unknown, (options, "an unknown key was taken")


@budget(30)
@given(runs=st.integers(1, 4), links=st.lists(st.sampled_from(["to-run", "loop", "out", "broken"]), max_size=4))
def test_a_folder_of_runs_with_links_counts_each_real_run_once(runs: int, links: list[str]) -> None:
    from lit_fl.suite.compare.results import load_comparison

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        for i in range(runs):
            folder = root / f"run{i}"
            folder.mkdir(parents=True)
            (folder / "config.yaml").write_text(f"seed: {i}\n")
            (folder / "metrics.csv").write_text("round,global_acc,comm_mb\n1,0.5,1.0\n")
            (folder / "summary.json").write_text('{"status": "completed"}')
        outside = Path(tmp) / "outside"
        shutil.copytree(root / "run0", outside)
        for j, link in enumerate(links):
            path = root / f"link{j}"
            target = {"to-run": root / f"run{j % runs}", "loop": path, "out": outside, "broken": root / "gone"}[link]
            path.symlink_to(target)
        with deadline(30):
            comparison = load_comparison([root], metric="global_acc")
        counted = [run.path for group in comparison.groups for run in group.runs]
        assert len(counted) == runs, (runs, links, counted)
        assert len({os.path.realpath(p) for p in counted}) == runs
        skipped = {item.name for item in comparison.skipped}
        for j, link in enumerate(links):
            assert (f"link{j}" in " ".join(skipped)) == (link != "to-run"), (link, skipped)


#: the kinds a dataset file can be that its own reader (SQLite, NumPy, PIL) must never be handed
DATA_KINDS = ("empty", "binary", "directory", "fifo", "device", "link-to-device", "broken-link", "link-loop")


def _read_dataset_file(reader: str, path: Path, folder: Path) -> str:
    """``path`` read by one dataset reader that opens files itself; the name the reader knows the file by."""
    if reader == "sqlite":
        from lit_fl.data.fedjax_sqlite import FederatedSQLite

        FederatedSQLite(path).rows()
    elif reader == "npz":
        from lit_fl.data.pathmnist import FILE, load_pathmnist

        (folder / "root").mkdir()
        (folder / "root" / FILE).symlink_to(path)
        load_pathmnist(folder / "root", download=False, seed=0)
        return FILE
    else:
        from lit_fl.data.tiny_imagenet import decode

        decode([(path, 0)], 8)
    return path.name


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@budget(40)
@given(kind=st.sampled_from(DATA_KINDS), reader=st.sampled_from(["sqlite", "npz", "image"]))
def test_a_dataset_file_of_any_kind_is_refused_in_one_line_before_its_reader_opens_it(kind: str, reader: str) -> None:
    from lit_fl.errors import DatasetNotFoundError

    with tempfile.TemporaryDirectory() as tmp:
        path = make(kind, Path(tmp))
        name = "pathmnist.npz" if reader == "npz" else path.name
        with deadline(10), pytest.raises((ConfigError, DatasetNotFoundError)) as info:
            _read_dataset_file(reader, path, Path(tmp))
        message = str(info.value)
        assert "\n" not in message and name in message, (kind, reader, message)
