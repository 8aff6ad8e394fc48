"""``RoundLoop``: rounds, evaluation, logging, checkpoints, and a graceful stop on Ctrl-C, SIGTERM or SIGUSR1."""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lit_fl import stop_signals
from lit_fl.faultpoints import fault_point
from lit_fl.federation.callbacks import RoundCallback
from lit_fl.federation.evaluation import Evaluator
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.steps.runner import StepRunner
from lit_fl.stop_signals import STOP_SIGNALS

if TYPE_CHECKING:
    from lit_fl.federation.ledger import Leaving
    from lit_fl.federation.round import RoundAlgorithm

@dataclass
class LoopOutcome:
    """How the loop ended: the last completed round and whether the user interrupted it."""

    last_round: int
    interrupted: bool
    history: list[dict[str, float]] = field(default_factory=list)


class RoundLoop:
    """Runs rounds ``federation.round + 1 .. rounds``.

    After each round: evaluate (every ``eval_every`` rounds, the last one only when it is one of them), hand the
    metric row to every callback (:mod:`lit_fl.federation.callbacks`: metrics.csv, W&B, progress) and keep it in
    :attr:`history`; ask the callbacks for a checkpoint every ``checkpoint_every`` rounds. The first Ctrl-C (or SIGTERM,
    SIGUSR1) lets the running round finish, checkpoints it and stops; a second one aborts at once (the last
    checkpoint on disk stays intact because checkpoints are written atomically).
    """

    def __init__(
        self,
        federation: Federation,
        algorithm: RoundAlgorithm,
        runner: StepRunner,
        evaluator: Evaluator,
        ledger: CommunicationLedger,
        rounds: int,
        eval_every: int = 1,
        checkpoint_every: int = 1,
        callbacks: Sequence[RoundCallback] = (),
    ) -> None:
        self.federation, self.algorithm, self.runner = federation, algorithm, runner
        self.evaluator, self.ledger = evaluator, ledger
        # the federation's faults and network, for every method
        ledger.faults, ledger.rng, ledger.topology = federation.faults, federation.rng.faults, federation.topology
        self.rounds, self.eval_every, self.checkpoint_every = rounds, eval_every, checkpoint_every
        self.callbacks = list(callbacks)
        #: the metric rows of this loop's evaluated rounds, in order
        self.history: list[dict[str, float]] = []
        self._stop_requested = False
        self.stop_signal: str | None = None  # the signal that stopped the run (SIGINT, SIGTERM, SIGUSR1)

    def run(self) -> LoopOutcome:
        with self._graceful_interrupt():
            if self.runner.any(self._stop_requested):  # stopped before its first round: checkpoint where it is
                self._checkpoint()
                return LoopOutcome(self.federation.round, interrupted=True, history=self.history)
            for round_ in range(self.federation.round + 1, self.rounds + 1):
                self.run_round(round_)
                if self.runner.any(self._stop_requested):  # every process stops after the same round
                    self._stop_requested = True
                    self._checkpoint()
                    return LoopOutcome(round_, interrupted=True, history=self.history)
                if self.checkpoint_every and (round_ % self.checkpoint_every == 0 or round_ == self.rounds):
                    self._checkpoint()
        return LoopOutcome(self.federation.round, interrupted=False, history=self.history)

    def run_round(self, round_: int) -> dict[str, float] | None:
        """One round, then its metric row if the round is evaluated (``None`` otherwise)."""
        self.ledger.start_round(self._leaving())
        clock = self.federation.systems is not None
        self.runner.work_log = self.ledger.record_work if clock else None
        start = time.perf_counter()
        result = self.algorithm.run_round(round_, self.federation, self.runner, self.ledger)
        round_s = time.perf_counter() - start
        timed = self._charge_time() if clock else {}
        fault_point(f"round:{round_}")
        self.federation.round = round_
        if round_ % self.eval_every != 0:  # the last round too: a run pays for the evaluations it asks for
            for callback in self.callbacks:
                callback.on_round(round_, None)
            return None
        start = time.perf_counter()
        metrics = self.evaluator.evaluate(self.federation)
        row: dict[str, Any] = {
            "round": round_,
            **metrics,
            "alpha": result.alpha,
            "comm_mb": self.ledger.total_mb,
            "round_comm_mb": self.ledger.round_mb,
            "round_s": round_s,
            "eval_s": time.perf_counter() - start,
            "train_loss": result.train_loss,
            "aggregator": math.nan if result.aggregator is None else result.aggregator,
            "num_participants": result.participants(self.ledger.transfers),
            **self.ledger.round_faults.as_metrics(),  # every method's transfers fail in the ledger
            **result.extra,
            **self._privacy_metrics(),
            **timed,
        }
        self.history.append(row)
        for callback in self.callbacks:
            callback.on_round(round_, row)
        return row

    def _leaving(self) -> Leaving | None:
        """When the round's clients leave (availability windows on the virtual clock): the ledger fails a transfer
        that would end after one of its clients left. None without availability, or for an asynchronous method
        (which times its clients across rounds itself)."""
        fed = self.federation
        system = fed.system_config
        if fed.systems is None or system is None or system.availability_trace is None \
                or getattr(self.algorithm, "asynchronous", False):
            return None
        from lit_fl.federation.ledger import Leaving

        return Leaving(fed.systems, fed.virtual_s)

    def _charge_time(self) -> dict[str, float]:
        """The round on the virtual clock (:mod:`lit_fl.system.clock`): ``round_virtual_s`` and the run's
        ``virtual_s`` so far; with availability windows, ``left_clients`` (the clients that left mid-round)."""
        from lit_fl.federation.endpoints import SERVER
        from lit_fl.system.clock import round_time

        assert self.federation.systems is not None
        seconds = round_time(self.ledger.events, self.federation.systems, SERVER, self.ledger.cutoff_s).seconds
        self.federation.virtual_s += seconds
        left = {"left_clients": float(len(self.ledger.departed))} if self.ledger.leaving else {}
        return {"virtual_s": self.federation.virtual_s, "round_virtual_s": seconds, **left}

    def _privacy_metrics(self) -> dict[str, float]:
        """The columns of DP with a per-client accountant (DP-SGD, DP on decentralized exchanges): every client's
        epsilon so far and the largest; user-level DP on a server reports its own through the server pipeline."""
        fed = self.federation
        per_client = fed.sample_privacy or fed.exchange_privacy
        if per_client is None or fed.privacy_state is None:
            return {}
        return per_client.metrics(fed.privacy_state, fed.num_clients)

    def _checkpoint(self) -> None:
        for callback in self.callbacks:
            callback.on_checkpoint()

    def _graceful_interrupt(self) -> Any:
        loop = self

        class _Guard:
            """SIGINT (Ctrl-C), SIGTERM (SLURM, ``timeout``, ``docker stop``, Kubernetes), SIGUSR1 (SLURM's
            ``--signal``) and SIGHUP: the first one lets the round finish, checkpoint and stop; a second one aborts.
            One the command received before the loop started (:mod:`lit_fl.stop_signals`) stops it before round one."""

            def __enter__(self) -> None:
                self.previous: dict[int, Any] = {}
                if (name := stop_signals.requested()) is not None:
                    loop._stop_requested, loop.stop_signal = True, name
                if threading.current_thread() is threading.main_thread():
                    for signum in STOP_SIGNALS:
                        self.previous[signum] = signal.signal(signum, self._handle)

            def _handle(self, signum: int, frame: Any) -> None:
                if loop._stop_requested:
                    raise KeyboardInterrupt
                loop._stop_requested = True
                loop.stop_signal = signal.Signals(signum).name
                stop_signals.request(loop.stop_signal)

            def __exit__(self, *exc: Any) -> None:
                for signum, previous in self.previous.items():
                    signal.signal(signum, previous)

        return _Guard()
