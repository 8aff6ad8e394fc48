"""Federated methods, one file each. Configs name them by class (``class_path: DFML``).

An algorithm module imports no torch at module level: torch, the steps and the federation's state are imported
inside the methods that run a round (type hints import them under ``TYPE_CHECKING``), so that ``lit-fl fit --help``,
``--print_config`` and the config's checks build and check the algorithm in a fraction of a second.
"""

from lit_fl.algorithms.base import Algorithm, RoundResult
from lit_fl.algorithms.criticalfl import CriticalFL
from lit_fl.algorithms.decentralized import DecentralizedAlgorithm
from lit_fl.algorithms.defkt import DefKT
from lit_fl.algorithms.dfedavgm import DFedAvgM
from lit_fl.algorithms.dfml import DFML
from lit_fl.algorithms.dispfl import DisPFL
from lit_fl.algorithms.dsfl import DSFL
from lit_fl.algorithms.fdmeta import FDmeta
from lit_fl.algorithms.fedasync import FedAsync
from lit_fl.algorithms.fedavg import DecentralizedFedAvg
from lit_fl.algorithms.fedbuff import FedBuff
from lit_fl.algorithms.feddf import FedDF
from lit_fl.algorithms.fedkemf import FedKEMF
from lit_fl.algorithms.fedmd import FedMD
from lit_fl.algorithms.fedntd import FedNTD
from lit_fl.algorithms.fedorion import FedORION
from lit_fl.algorithms.fedper import FedPer
from lit_fl.algorithms.fedprox import DecentralizedFedProx
from lit_fl.algorithms.fml import DecentralizedFML
from lit_fl.algorithms.fullavg_combo import Combo, FullAvg
from lit_fl.algorithms.ktpfl import KTpFL
from lit_fl.algorithms.local import Local
from lit_fl.algorithms.merged_codist import MergedCodist
from lit_fl.algorithms.neighbours import NeighbourAlgorithm
from lit_fl.algorithms.partial_training import FederatedDropout, FedRolex, HeteroFL
from lit_fl.algorithms.peer import PeerAlgorithm, PeerRound
from lit_fl.algorithms.periodic_codist import PeriodicCodist
from lit_fl.algorithms.scaffold import SCAFFOLD
from lit_fl.algorithms.server import ServerAlgorithm
from lit_fl.algorithms.server_fedavg import ServerFedAvg
from lit_fl.algorithms.server_fedprox import ServerFedProx
from lit_fl.algorithms.uapdfl import UAPDFL

__all__ = [
    "Algorithm",
    "Combo",
    "CriticalFL",
    "DFML",
    "DFedAvgM",
    "DSFL",
    "DecentralizedAlgorithm",
    "DecentralizedFML",
    "DecentralizedFedAvg",
    "DecentralizedFedProx",
    "DefKT",
    "DisPFL",
    "FDmeta",
    "FedAsync",
    "FedBuff",
    "FedNTD",
    "FedDF",
    "FedKEMF",
    "FedMD",
    "FedORION",
    "FedPer",
    "FedRolex",
    "FederatedDropout",
    "FullAvg",
    "HeteroFL",
    "KTpFL",
    "Local",
    "NeighbourAlgorithm",
    "PeerAlgorithm",
    "PeerRound",
    "ServerAlgorithm",
    "MergedCodist",
    "PeriodicCodist",
    "RoundResult",
    "SCAFFOLD",
    "ServerFedAvg",
    "ServerFedProx",
    "UAPDFL",
]
