"""The closed sets of names that config keys accept, in one torch-free module.

The command line checks a config against these before a run starts (``lit-fl fit --help``, ``--print_config`` and
every config error answer without importing torch); the modules that implement each choice import them from here.
"""

from __future__ import annotations

from typing import Literal

#: ``algorithm.loss``: WSM (DFML Eq. 2) or plain cross-entropy
SupervisedLoss = Literal["wsm", "ce"]

#: ``data.partition``
PartitionName = Literal["iid", "dirichlet", "shards", "natural"]
PARTITIONS: tuple[str, ...] = ("iid", "dirichlet", "shards", "natural")

#: FedORION's ``bn_stats`` and ``student_running_stats``
BNStats = Literal["current", "running"]
StudentRunningStats = Literal["keep", "update"]
BN_STATS: tuple[str, ...] = ("current", "running")
STUDENT_RUNNING_STATS: tuple[str, ...] = ("keep", "update")

#: FedORION's ``noise``: the samples of the server's proxyless distillation (Table 4, left)
NoiseKind = Literal["gaussian", "dead_leaves"]
NOISES: tuple[str, ...] = ("gaussian", "dead_leaves")
