"""Every algorithm key is documented in ``--algorithm.help`` (inherited ones included), a user's new method trains
with cross-entropy unless it says otherwise, and every built-in keeps the loss its paper uses."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

import lit_fl.algorithms as algorithms
from lit_fl.algorithms import Algorithm
from lit_fl.algorithms.decentralized import DecentralizedAlgorithm
from lit_fl.cli import main
from lit_fl.commands.fit import ALGORITHMS
from lit_fl.federation.ledger import CommunicationLedger

#: the loss each built-in trains with by default: DFML runs all its baselines with WSM (sec. 4); FedORION, UA-PDFL
#: (and its Local/FedPer baselines) and codistillation use cross-entropy
PAPER_LOSS = {
    "DFML": "wsm", "DecentralizedFedAvg": "wsm", "DecentralizedFedProx": "wsm", "DecentralizedFML": "wsm",
    "DefKT": "wsm", "FullAvg": "wsm", "Combo": "wsm", "HeteroFL": "wsm", "FedRolex": "wsm",
    "FederatedDropout": "wsm", "Local": "ce", "FedPer": "ce", "UAPDFL": "ce", "DFedAvgM": "ce", "FedORION": "ce",
    "PeriodicCodist": "ce", "MergedCodist": "ce", "SCAFFOLD": "ce", "DisPFL": "ce", "CriticalFL": "ce",
    "ServerFedAvg": "ce", "ServerFedProx": "ce", "FedNTD": "ce", "FedDF": "ce", "KTpFL": "ce", "FedKEMF": "ce",
    "FDmeta": "ce", "FedMD": "ce", "DSFL": "ce", "FedAsync": "ce", "FedBuff": "ce",
}


@pytest.mark.parametrize("name", sorted(PAPER_LOSS))
def test_every_builtin_keeps_its_papers_loss(name: str) -> None:
    assert getattr(algorithms, name)().loss == PAPER_LOSS[name]


def test_the_built_ins_are_all_listed() -> None:
    assert sorted(path.rsplit(".", 1)[1] for path in ALGORITHMS) == sorted(PAPER_LOSS)


#: the metrics.csv column each built-in's paper reports (docs/metrics.md, "reported_acc"): the server's model for
#: FedORION and its server baselines (FedORION sec. 4.1, App. D), the clients' mean for FedMD and KT-pFL (sec. 4.1),
#: the clients' own data for UA-PDFL and its baselines (Tables 1-5), DFML's peak models, codistillation's large model
PAPER_REPORTS = {
    **dict.fromkeys(["DFML", "DecentralizedFedAvg", "DecentralizedFedProx", "DecentralizedFML", "HeteroFL", "FedRolex",
                     "FederatedDropout", "DefKT", "FullAvg", "Combo", "FedMD", "KTpFL"], "global_acc"),
    **dict.fromkeys(["UAPDFL", "FedPer", "Local", "CriticalFL", "DFedAvgM", "DisPFL"], "local_acc"),
    **dict.fromkeys(["FedORION", "FedDF", "DSFL", "FedKEMF", "FDmeta", "ServerFedAvg", "ServerFedProx", "FedNTD",
                     "SCAFFOLD", "FedAsync", "FedBuff"], "server_acc/global"),
    **dict.fromkeys(["PeriodicCodist", "MergedCodist"], "server_acc/large"),
}


def test_every_builtin_declares_the_column_its_paper_reports() -> None:
    """Each built-in says which column it reports on a class of its own (not Algorithm's default by omission)."""
    assert {name: getattr(algorithms, name).reports for name in PAPER_LOSS} == PAPER_REPORTS
    undeclared = [name for name in PAPER_LOSS
                  if not any("reports" in vars(k) for k in getattr(algorithms, name).__mro__ if k is not Algorithm)]
    assert not undeclared


def test_a_new_method_trains_with_cross_entropy_unless_it_says_otherwise() -> None:
    class Mine(DecentralizedAlgorithm):
        def run_round(self, round_, federation, runner, ledger: CommunicationLedger):  # noqa: ANN001, ANN201
            raise NotImplementedError

    class Plain(Algorithm):
        def run_round(self, round_, federation, runner, ledger: CommunicationLedger):  # noqa: ANN001, ANN201
            raise NotImplementedError

    assert Mine().loss == Plain().loss == "ce"
    assert Mine(loss="wsm").loss == "wsm"


@pytest.mark.parametrize("name", sorted(PAPER_LOSS))
def test_algorithm_help_documents_every_key_inherited_ones_included(name: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main(["fit", "--algorithm.help", name])
    assert exit_.value.code == 0
    text = re.sub(r"\s+", " ", out.getvalue().split("Help for", 1)[1])
    options = re.findall(r"--algorithm\.(\w+) (?:\{[\w,]+\}|[A-Z_]+)? ?(.*?)(?= --algorithm\.|$)", text)
    documented = dict(options)
    for key in ("local_epochs", "loss", "lr", "momentum", "weight_decay", "batch_size"):
        assert key in documented, (name, key)
    undocumented = [key for key, doc in documented.items() if doc.startswith("(type:")]
    assert not undocumented, (name, undocumented)
