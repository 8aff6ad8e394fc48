"""One registry style (:mod:`lit_fl.registry`): models, model families, datasets, slicing rules, classifiers and
algorithms register at their definitions, and a taken name is refused in one line naming both definitions."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

import lit_fl.algorithms  # noqa: F401 - the built-in methods register on import
from lit_fl.algorithms.registry import ALGORITHMS, algorithm_class_paths, register_algorithm
from lit_fl.data.registry import DATASETS, register_dataset
from lit_fl.models.metadata import CLASSIFIER_PREFIXES, register_classifier
from lit_fl.models.registry import MODEL_FAMILIES, MODELS, register_model, register_model_family
from lit_fl.registry import DuplicateRegistration
from lit_fl.steps.slicing import PARTIAL_VIEWS, register_partial_view


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
    assert len(ALGORITHMS) == 29 and "codist_small" in MODELS and len(MODEL_FAMILIES) >= 4
    assert "mnist5k" not in DATASETS or callable(DATASETS["mnist5k"])
    assert len(PARTIAL_VIEWS) == 3 and "lit_fl.models.cnn.CNN" in CLASSIFIER_PREFIXES


def test_lit_fl_configs_lists_the_registered_names(capsys: pytest.CaptureFixture[str]) -> None:
    from lit_fl.commands.configs import main

    assert main(["registered"]) == 0
    out = capsys.readouterr().out
    assert "algorithm.class_path: lit_fl.algorithms.Combo, lit_fl.algorithms.CriticalFL, lit_fl.algorithms.DFML" in out
    assert "models.pool: char_lstm, codist_large" in out and "data.dataset: caltech101, cifar10, cifar100" in out
