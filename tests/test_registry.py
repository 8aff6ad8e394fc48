"""One registry style (:mod:`lit_fl.registry`): models, model families, datasets, slicing rules, classifiers and
algorithms register at their definitions, and a taken name is refused in one line naming both definitions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import lit_fl.algorithms  # noqa: F401 - the built-in methods register on import
from lit_fl.algorithms.registry import ALGORITHMS, algorithm_class_paths, register_algorithm
from lit_fl.data.registry import DATASETS, register_dataset
from lit_fl.models.metadata import CLASSIFIER_PREFIXES, register_classifier
from lit_fl.models.registry import MODEL_FAMILIES, MODELS, register_model, register_model_family
from lit_fl.registry import DuplicateRegistration
from lit_fl.steps.slicing import PARTIAL_VIEWS, register_partial_view

ROOT = Path(__file__).resolve().parents[1]


def refused(register: Callable[[], object]) -> str:
    with pytest.raises(DuplicateRegistration) as info:
        register()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_taken_model_name_names_both_factories() -> None:
    def my_resnet(arch, input_shape, num_classes):  # noqa: ANN001, ANN202
        raise AssertionError

    message = refused(lambda: register_model("resnet18")(my_resnet))
    assert re.search(r"model 'resnet18' is registered twice: lit_fl\.models\.registry\._resnet_from_name "
                     r"\(.*lit_fl/models/registry\.py:\d+\) and test_registry\..*my_resnet \(.*test_registry\.py:\d+\)",
                     message), message
    assert refused(lambda: register_model_family(r"cnn(_[1-9][0-9]*)+", "cnn_<c>")(my_resnet)).startswith(
        "model family 'cnn(_[1-9][0-9]*)+' is registered twice")
    assert "my_resnet" not in str(MODELS["resnet18"])  # the first registration stays


def test_a_taken_dataset_name_names_both_loaders() -> None:
    import lit_fl.data.synthetic  # noqa: F401 - registers "synthetic"

    def my_loader(root, download, seed, **options):  # noqa: ANN001, ANN003, ANN202
        raise AssertionError

    message = refused(lambda: register_dataset("synthetic")(my_loader))
    assert "dataset 'synthetic' is registered twice: lit_fl.data.synthetic." in message
    assert "test_registry" in message and "my_loader" in message


def test_a_taken_algorithm_name_names_both_classes() -> None:
    message = refused(lambda: register_algorithm(type("DFML", (), {"__module__": "mine"})))
    assert message.startswith("algorithm 'DFML' is registered twice: lit_fl.algorithms.dfml.DFML (")
    assert message.endswith("and mine.DFML")


def test_slicing_rules_and_classifiers_refuse_a_second_rule() -> None:
    from lit_fl.models.cnn import CNN

    message = refused(lambda: register_partial_view(CNN, r"classifier\.weight")(lambda model, shape: shape))
    assert "slicing rule ('lit_fl.models.cnn.CNN', 'classifier\\\\.weight') is registered twice" in message
    message = refused(lambda: register_classifier("lit_fl.models.cnn.CNN", "head."))
    assert re.search(r"lit_fl/models/metadata\.py:\d+ and .*test_registry\.py:\d+", message), message


def test_what_is_registered_is_listed() -> None:
    assert "lit_fl.algorithms.DFML" in algorithm_class_paths() and "lit_fl.algorithms.PartialTraining" not in \
        algorithm_class_paths()  # abstract bases are not methods one can run
    assert len(ALGORITHMS) == 31 and "codist_small" in MODELS and len(MODEL_FAMILIES) >= 4
    assert "mnist5k" not in DATASETS or callable(DATASETS["mnist5k"])
    assert len(PARTIAL_VIEWS) == 3 and "lit_fl.models.cnn.CNN" in CLASSIFIER_PREFIXES


def test_lit_fl_configs_lists_the_registered_names(capsys: pytest.CaptureFixture[str]) -> None:
    from lit_fl.commands.configs import main

    assert main(["registered"]) == 0
    out = capsys.readouterr().out
    assert "algorithm.class_path: lit_fl.algorithms.Combo, lit_fl.algorithms.CriticalFL, lit_fl.algorithms.DFML" in out
    assert "models.pool: char_lstm, codist_large" in out and "data.dataset: caltech101, cifar10, cifar100" in out


#: A user's module that takes a built-in's name, imported in a fresh interpreter BEFORE the built-in's module:
#: ``(the module that registers the built-in, the user's module, what the refusal says)``. The first registration
#: is named by its place in lit_fl, the second by the user's file and line.
BEFORE_THE_BUILT_INS = {
    "dataset": (
        "lit_fl.data.torchvision_sets",
        "from lit_fl.data.registry import register_dataset\n@register_dataset('cifar10')\n"
        "def my_cifar(root, download, seed, **options):\n    raise AssertionError\n",
        r"dataset 'cifar10' is registered twice: lit_fl\.data\.torchvision_sets\.load_torchvision "
        r"\(\S*lit_fl/data/torchvision_sets\.py:\d+\) and user_registry\.my_cifar \(\S*user_registry\.py:2\)",
    ),
    "model a family builds": (
        "lit_fl.models.registry",
        "from lit_fl.models import register_model\n@register_model('cnn_32_64')\n"
        "def my_cnn(arch, input_shape, num_classes):\n    raise AssertionError\n",
        r"model 'cnn_32_64' is registered twice: the family 'cnn\(_\[1-9\]\[0-9\]\*\)\+' of "
        r"lit_fl\.models\.registry\._cnn_from_name \(\S*lit_fl/models/registry\.py:\d+\) and user_registry\.my_cnn "
        r"\(\S*user_registry\.py:2\) by name",
    ),
    "family that builds a model": (
        "lit_fl.models.registry",
        "from lit_fl.models import register_model_family\n@register_model_family('resnet[0-9]+', 'resnet<N>')\n"
        "def my_resnets(arch, input_shape, num_classes):\n    raise AssertionError\n",
        r"model 'resnet18' is registered twice: lit_fl\.models\.registry\._resnet_from_name "
        r"\(\S*lit_fl/models/registry\.py:\d+\) by name and the family 'resnet\[0-9\]\+' of "
        r"user_registry\.my_resnets \(\S*user_registry\.py:2\)",
    ),
    "algorithm": (
        "lit_fl.algorithms.dfml",
        "from lit_fl.algorithms.registry import register_algorithm\n@register_algorithm\nclass DFML:\n    pass\n",
        r"algorithm 'DFML' is registered twice: lit_fl\.algorithms\.dfml\.DFML \(\S*lit_fl/algorithms/dfml\.py:\d+\) "
        r"and user_registry\.DFML \(\S*user_registry\.py:2\)",
    ),
    "classifier": (
        "lit_fl.models.metadata",
        "from lit_fl.models.metadata import register_classifier\n\n"
        "register_classifier('lit_fl.models.cnn.CNN', 'head.')\n",
        r"classifier of model class 'lit_fl\.models\.cnn\.CNN' is registered twice: \S*lit_fl/models/metadata\.py:\d+ "
        r"and \S*user_registry\.py:3",
    ),
    "slicing rule": (
        "lit_fl.steps.slicing",
        "from lit_fl.models.cnn import CNN\nfrom lit_fl.steps.slicing import register_partial_view\n"
        "@register_partial_view(CNN, r'classifier\\.weight')\ndef my_view(model, shape):\n    return shape\n",
        r"slicing rule \('lit_fl\.models\.cnn\.CNN', 'classifier\\\\\.weight'\) is registered twice: "
        r"lit_fl\.steps\.slicing\.\S+ \(\S*lit_fl/steps/slicing\.py:\d+\) and user_registry\.my_view "
        r"\(\S*user_registry\.py:3\)",
    ),
}

PROBE = """import sys
from lit_fl.registry import DuplicateRegistration
assert {builtin!r} not in sys.modules, "the built-in is imported already"
try:
    import user_registry
except DuplicateRegistration as err:
    print(err)
else:
    print("accepted")
"""


@pytest.mark.parametrize("case", sorted(BEFORE_THE_BUILT_INS))
def test_a_taken_name_is_refused_whatever_the_import_order(case: str, tmp_path: Path) -> None:
    """The traps: a user's ``register_dataset("cifar10")`` imported before lit-fl's CIFAR module silently replaced
    the built-in (the refusal fired only if that module happened to be imported later), and an exact name that a
    family builds silently shadowed the family. Every registry refuses in one line naming both places."""
    builtin, source, expected = BEFORE_THE_BUILT_INS[case]
    (tmp_path / "user_registry.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    result = subprocess.run([sys.executable, "-c", PROBE.format(builtin=builtin)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    message = result.stdout.rstrip("\n")
    assert "\n" not in message and re.fullmatch(expected, message), message
