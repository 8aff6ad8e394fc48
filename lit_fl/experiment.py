"""``Experiment``: builds data, models, algorithm and trackers from one typed config and owns the run
directory (DESIGN "Run directory contract")::

    runs/NAME/config.yaml             fully resolved config
    runs/NAME/metrics.csv             one row per evaluated round
    runs/NAME/summary.json            final and best values, wall time, rounds
    runs/NAME/checkpoints/last.ckpt   whole federation state
    runs/NAME/wandb/                  when W&B is on
"""

from __future__ import annotations

import math
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import yaml

from lit_fl.algorithms.base import Algorithm
from lit_fl.config import DataConfig, LoggerConfig, ModelsConfig, TrainerConfig
from lit_fl.constraints import Bounds, NonNegativeInt, PositiveInt, check_arguments
from lit_fl.errors import ConfigError
from lit_fl.faultpoints import fault_point
from lit_fl.federation.faults import FaultsConfig
from lit_fl.federation.topology import TopologyConfig
from lit_fl.io import atomic_write_text, strict_json
from lit_fl.lazy import eager_init_annotations
from lit_fl.privacy.config import PrivacyConfig
from lit_fl.run_dir import RunDir
from lit_fl.run_identity import IDENTITY_KEYS, RunIdentity, identity_sections
from lit_fl.system.config import SystemConfig
from lit_fl.tracking import MetricsCSV, RoundProgress, WandbTracker, read_metrics
from lit_fl.validation import check_output_folder

if TYPE_CHECKING:
    from lit_fl.federation.state import Client, Federation
    from lit_fl.privacy.plan import PrivacyPlan
    from lit_fl.privacy.sample_level import SamplePlan
    from lit_fl.steps.runner import StepRunner

# The data, the federation, the round loop and the runner (torch, Lightning) are imported when a run starts
# (``build``, ``fit``): building an Experiment from a config, and refusing a bad one, never imports torch.

#: Config keys that must match between a run directory and the config it is resumed with (``rounds`` may change,
#: said in one line; ``checkpoint_every``, ``trainer`` and ``logger`` are how, not what, a run computes).
RESUME_KEYS = IDENTITY_KEYS


@eager_init_annotations
class Experiment:
    """One federated run.

    Args:
        algorithm: the method (``class_path``/``init_args``), e.g. DFML or DecentralizedFedAvg.
        data: dataset and partition.
        models: client architectures.
        trainer: accelerator, devices, precision.
        logger: W&B and progress display.
        topology: who can reach whom (mesh, two_group, ring, regular).
        faults: simulated sender failures and lost returns.
        privacy: differential privacy (docs/privacy.md): user-level (DP-FedAvg on server methods, every release
            clipped and noised on decentralized ones) or sample-level (DP-SGD in every client training phase).
        system: client compute rates, links and availability; the virtual clock (docs/system.md).
        seed: seeds partition, initialisation, selection and data order.
        rounds: communication rounds T.
        eval_every: evaluate every this many rounds (round eval_every, 2 * eval_every, ...; the last round only when
            it is one of them: a run pays for the evaluations it asks for).
        checkpoint_every: write checkpoints/last.ckpt every this many rounds (and at the end and on Ctrl-C).
        run_dir: folder that holds run directories.
        name: run directory name (default: <algorithm>-<dataset>-<timestamp>).
    """

    def __init__(
        self,
        algorithm: Algorithm,
        data: DataConfig,
        models: ModelsConfig,
        trainer: TrainerConfig,
        logger: LoggerConfig,
        topology: TopologyConfig = TopologyConfig(),  # noqa: B008 - frozen defaults, never mutated
        faults: FaultsConfig = FaultsConfig(),  # noqa: B008
        privacy: PrivacyConfig = PrivacyConfig(),  # noqa: B008
        system: SystemConfig = SystemConfig(),  # noqa: B008
        seed: NonNegativeInt = 0,
        rounds: PositiveInt = 100,
        eval_every: PositiveInt = 1,
        checkpoint_every: Annotated[int, Bounds(0, note="(0 = only at the end)")] = 1,
        run_dir: str = "runs",
        name: str | None = None,
    ) -> None:
        check_arguments(Experiment.__init__, {"seed": seed, "rounds": rounds, "eval_every": eval_every,
                                              "checkpoint_every": checkpoint_every}, "")
        self.algorithm, self.data, self.models = algorithm, data, models
        self.trainer, self.logger = trainer, logger
        self.topology, self.faults = topology or TopologyConfig(), faults or FaultsConfig()
        self.privacy = privacy or PrivacyConfig()
        self.system = system or SystemConfig()
        self.seed, self.rounds, self.eval_every, self.checkpoint_every = seed, rounds, eval_every, checkpoint_every
        self.run_dir, self.name = Path(run_dir), name
        self.run_path: Path | None = None  #: the run directory, once :meth:`fit` has resolved it

    # -- paths -----------------------------------------------------------------------------------------

    def resolve_run_path(self, resume: str | None) -> Path:
        """The run directory; checks it without touching anything on disk. A run directory without a checkpoint
        (its config.yaml and whatever a run that stopped or crashed before its first checkpoint wrote) starts again
        from round 1 in the same folder."""
        if resume:
            path = Path(resume)
            run = RunDir(path)
            if not path.is_dir() or not (run.has_checkpoint() or run.config.is_file() or run.started_here()):
                raise ConfigError(f"--resume: no run directory at {path} (it holds neither a checkpoint nor a "
                                  "config.yaml)")
            if run.has_checkpoint() and not run.config.is_file():
                raise ConfigError(f"--resume: {path} has a checkpoint but no config.yaml, so nothing says which run it "
                                  "is; put back its config.yaml or start a new run")
            return path
        name = self.name or f"{self.algorithm.name.lower()}-{self.data.dataset}-{datetime.now():%Y%m%d-%H%M%S}"
        path = self.run_dir / name
        if path.exists() and not launched_follower():  # rank 0 of this run may have created it already
            raise ConfigError(f"run directory {path} exists; choose another --name or continue it with --resume {path}")
        return path

    # -- building --------------------------------------------------------------------------------------

    def build(self) -> tuple[Federation, StepRunner]:
        """The federation (on the runner's device) and the runner."""
        from lit_fl.algorithms.requirements import check_dataset
        from lit_fl.federation.builder import build_federation, load_configured
        from lit_fl.steps.runner import StepRunner

        dataset = load_configured(self.data, self.seed)
        check_dataset(self.algorithm, dataset)
        runner = StepRunner(
            self.trainer.accelerator,
            self.trainer.devices,
            self.trainer.precision,
            num_nodes=self.trainer.num_nodes,
            fuse=self.trainer.fuse,
            tf32=self.trainer.tf32,
            cudnn_benchmark=self.trainer.cudnn_benchmark,
        )
        federation = build_federation(
            dataset.to(runner.device),
            self.data,
            self.models,
            self.seed,
            topology=self.topology,
            faults=self.faults,
            same_init=self.algorithm.paper_same_init if self.models.same_init is None else self.models.same_init,
        )
        if self.privacy.enabled:
            self._private(federation, runner)
        if self.system.clock:
            from lit_fl.system.profiles import build_systems

            federation.systems = build_systems(self.system, federation.num_clients, self.seed)
            federation.system_config = self.system
            check_system(self.system, self.algorithm, federation)
        self.algorithm.setup(federation)
        runner.place(federation.client_costs())
        return federation, runner

    def _private(self, federation: Federation, runner: StepRunner) -> None:
        """Differential privacy's plan and state on the federation (user level: the server pipeline reads them;
        sample level: the phase runner too)."""
        from lit_fl.privacy.state import PrivacyState

        federation.privacy_state = PrivacyState.start(self.privacy.clip_norm, self.seed)
        if self.privacy.level == "user" and getattr(self.algorithm, "exchange_dp", False):
            from lit_fl.privacy.exchange import plan_exchange_privacy, start_references

            federation.exchange_privacy = plan_exchange_privacy(self.privacy, federation.num_clients, self.rounds)
            start_references({c.id: c.model for c in federation.clients}, federation.privacy_state)
            return
        if self.privacy.level == "user":
            federation.privacy = privacy_plan(self.algorithm, self.privacy, federation.num_clients, self.rounds)
            return
        from lit_fl.privacy.sample_level import SamplePrivacy

        federation.sample_privacy = sample_privacy_plan(self.algorithm, self.privacy, federation, self.rounds)
        runner.sample_privacy = SamplePrivacy(federation.sample_privacy, federation.privacy_state)

    # -- running ---------------------------------------------------------------------------------------

    def fit(self, config: dict[str, Any], resume: str | None = None) -> dict[str, Any]:
        """Run (or continue) the experiment; ``config`` is the resolved config written to config.yaml."""
        run_path = self.run_path = self.resolve_run_path(resume)
        check_output_folder(run_path.parent, "run_dir")  # before anything is built: one line, nothing written
        rounds_note = check_resume_config(run_path, config) if resume else None
        federation, runner = self.build()
        if not runner.is_global_zero:
            return self._fit_follower(federation, runner, run_path, config, resume)
        with RunDir(run_path).lock(fresh=not resume):  # one writer per run directory, from its first write
            return self._fit_leader(federation, runner, run_path, config, resume, rounds_note)

    def _fit_leader(
        self,
        federation: Federation,
        runner: StepRunner,
        run_path: Path,
        config: dict[str, Any],
        resume: str | None,
        rounds_note: str | None,
    ) -> dict[str, Any]:
        """Rank 0 (or the only process): the rounds, with the run directory, W&B and the progress bar."""
        from lit_fl.federation.callbacks import Checkpointer, MetricsFile, ProgressDisplay, WandbLog
        from lit_fl.federation.checkpoint import load_checkpoint
        from lit_fl.federation.evaluation import Evaluator
        from lit_fl.federation.ledger import CommunicationLedger
        from lit_fl.federation.loop import RoundLoop

        ledger = CommunicationLedger.of(federation)
        run = RunDir(run_path)
        ckpt_path = run.checkpoint
        identity = RunIdentity.of(config)
        extra: dict[str, Any] = {}
        if resume and ckpt_path.is_file():
            extra = load_checkpoint(ckpt_path, federation, self.algorithm, ledger, identity)
            check_rows_up_to(run, federation.round, self.eval_every)
            check_rounds_left(run, federation.round, self.rounds)
        elif resume:
            print(f"lit-fl: --resume: {run_path} holds no checkpoint (the run stopped before its first one); it starts "
                  "again from round 1 in the same folder", file=sys.stderr)
        if rounds_note:
            print(rounds_note, file=sys.stderr)
        run_path.mkdir(parents=True, exist_ok=True)
        config = {**config, "run_dir": str(run_path.parent), "name": run_path.name}
        atomic_write_text(run.config, yaml.safe_dump(config, sort_keys=False))

        csv = MetricsCSV(run.metrics)
        if resume and csv.torn:
            print(f"lit-fl: --resume: {run.metrics} ended in a half-written row (a kill between two writes); it is "
                  "left out and its round computed again", file=sys.stderr)
        if resume:
            csv.truncate_after(federation.round)  # the rows after the resume point are computed again
        tracker = self._start_wandb(run_path, config, extra.get("wandb_id"))
        progress = RoundProgress(self.rounds, federation.round + 1, f"{self.algorithm.name}", self.logger.progress)
        elapsed_before = float(extra.get("wall_s", 0.0))
        start = time.perf_counter()

        def wall_s() -> float:
            return elapsed_before + time.perf_counter() - start

        def checkpoint_extra() -> dict[str, Any]:
            return {"wandb_id": (tracker.run_id if tracker else None) or extra.get("wandb_id"), "wall_s": wall_s(),
                    "identity": identity.to_dict()}

        callbacks = [MetricsFile(csv), ProgressDisplay(progress),
                     Checkpointer(ckpt_path, federation, self.algorithm, ledger, checkpoint_extra)]
        if tracker:
            callbacks.insert(1, WandbLog(tracker))
        loop = RoundLoop(
            federation,
            self.algorithm,
            runner,
            Evaluator(autocast=runner.autocast, placement=runner.placement, fuse=runner.fuse,
                      reports=self.algorithm.reports),
            ledger,
            self.rounds,
            self.eval_every,
            self.checkpoint_every,
            callbacks,
        )
        status = "failed"
        error: str | None = None
        try:
            outcome = loop.run()
            status = "interrupted" if outcome.interrupted else "completed"
        except KeyboardInterrupt:  # a second Ctrl-C: the last checkpoint stays and resumes
            status = "interrupted"
            raise
        except BaseException as err:  # a crash keeps its evidence: the checkpoint, the error, the traceback
            error = f"{type(err).__name__}: {err}"
            raise
        finally:
            progress.close()
            # the rows as metrics.csv holds them (rounded), so a resumed run's summary equals an uninterrupted one's
            rows = read_metrics(run.metrics) if run.has_metrics() else []
            summary = _summary(rows, status, federation.round, self.rounds, wall_s(), ledger.total_mb)
            summary["reports"] = self.algorithm.reports
            summary["run_dir"] = str(run_path)
            summary["topology"] = topology_used(self.algorithm, federation)
            if federation.privacy is not None:
                summary["privacy"] = {**federation.privacy.settings(),
                                      "epsilon": federation.privacy.epsilon(federation.round)}
            per_client = federation.sample_privacy or federation.exchange_privacy
            if per_client is not None and federation.privacy_state is not None:
                spent = per_client.epsilons(federation.privacy_state, federation.num_clients)
                summary["privacy"] = {**per_client.settings(), "epsilon": max(spent), "epsilon_per_client": spent}
            if loop.stop_signal:
                summary["stop_signal"] = loop.stop_signal
            if error:
                summary["error"] = error
            fault_point("summary")
            atomic_write_text(run.summary, strict_json(summary))
            if tracker:
                tracker.summarize(summary)
                tracker.finish(exit_code=0 if status != "failed" else 1)
        return summary

    def _fit_follower(
        self, federation: Federation, runner: StepRunner, run_path: Path, config: dict[str, Any], resume: str | None
    ) -> dict[str, Any]:
        """A process other than rank 0: the same rounds on the same state, writing nothing (rank 0 owns the run
        directory, W&B and the progress bar). Every process reads the checkpoint it resumes from."""
        from lit_fl.federation.checkpoint import load_checkpoint
        from lit_fl.federation.evaluation import Evaluator
        from lit_fl.federation.ledger import CommunicationLedger
        from lit_fl.federation.loop import RoundLoop

        ledger = CommunicationLedger.of(federation)
        ckpt_path = RunDir(run_path).checkpoint
        if resume and ckpt_path.is_file():
            load_checkpoint(ckpt_path, federation, self.algorithm, ledger, RunIdentity.of(config))
            check_rows_up_to(RunDir(run_path), federation.round, self.eval_every)
            check_rounds_left(RunDir(run_path), federation.round, self.rounds)
        evaluator = Evaluator(autocast=runner.autocast, placement=runner.placement, fuse=runner.fuse,
                              reports=self.algorithm.reports)
        loop = RoundLoop(federation, self.algorithm, runner, evaluator, ledger, self.rounds, self.eval_every)
        outcome = loop.run()
        return {"status": "interrupted" if outcome.interrupted else "completed", "rank": runner.placement.rank}

    def _start_wandb(self, run_path: Path, config: dict[str, Any], run_id: str | None) -> WandbTracker | None:
        """The W&B run, or None when W&B is off. It starts on a thread while the first round runs; one that
        cannot start says so in one warning line and the run goes on without it."""
        if not self.logger.wandb:
            return None
        tracker = WandbTracker(self.logger.project, self.logger.mode, self.logger.entity)
        tracker.start_in_background(
            run_path, run_path.name, config, run_id, group=self.logger.group, job_type=self.algorithm.name,
            tags=self.wandb_tags(),
        )
        return tracker

    def wandb_tags(self) -> list[str]:
        """The dataset, partition (with beta or zeta) and pool, then ``logger.tags``."""
        partition = self.data.partition
        if partition == "dirichlet":
            partition = f"dirichlet-{self.data.beta:g}"
        elif partition == "shards":
            partition = f"shards-{self.data.zeta}"
        pool = self.models.pool if isinstance(self.models.pool, str) else "+".join(self.models.pool)
        return list(dict.fromkeys([self.data.dataset, partition, pool[:64], *self.logger.tags]))


def _summary(
    history: list[dict[str, float]], status: str, last_round: int, rounds: int, wall_s: float, comm_mb: float
) -> dict[str, Any]:
    """``final``: the last evaluated row; ``best``: the row of the highest ``reported_acc`` (its value and round);
    ``best_<column>``: the same for ``global_acc`` and every server model's accuracy."""
    evaluated = [r for r in history if not math.isnan(r.get("reported_acc", math.nan))]
    best = max(evaluated, key=lambda r: r["reported_acc"]) if evaluated else None
    return {
        "status": status,
        "rounds_completed": last_round,
        "rounds": rounds,
        "wall_s": round(wall_s, 3),
        "comm_mb": comm_mb,
        "final": dict(history[-1]) if history else {},
        "best": {"reported_acc": best["reported_acc"], "round": int(best["round"])} if best else {},
        **_best_of(evaluated),
    }


def _best_of(rows: list[dict[str, float]]) -> dict[str, Any]:
    """Best value and round of ``global_acc`` and of every server model's accuracy (FedORION, codistillation)."""
    keys = sorted({k for r in rows for k in r if k == "global_acc" or k.startswith("server_acc/")})
    out = {}
    for key in keys:
        best = max(rows, key=lambda r: _or_below(r.get(key, math.nan)))
        if not math.isnan(best.get(key, math.nan)):
            out[f"best_{key}"] = {"value": best[key], "round": int(best["round"])}
    return out


def _or_below(value: float) -> float:
    """``value``, or below every accuracy where it is NaN (not evaluated), for ``max``."""
    return -1.0 if math.isnan(value) else value


def privacy_plan(algorithm: Algorithm, config: PrivacyConfig, num_clients: int, rounds: int) -> PrivacyPlan:
    """The plan of ``config`` for ``algorithm``; a method that cannot take user-level DP is one line."""
    from lit_fl.algorithms.registry import ALGORITHMS
    from lit_fl.privacy.plan import plan_privacy

    if not getattr(algorithm, "user_level_dp", False):
        takers = sorted(str(name) for name in ALGORITHMS if getattr(ALGORITHMS[name], "user_level_dp", False))
        peers = sorted(str(name) for name in ALGORITHMS if getattr(ALGORITHMS[name], "exchange_dp", False))
        raise ConfigError(f"privacy.level: user takes a server method whose uploads are model weights ("
                          f"{', '.join(takers)}) or a decentralized method whose exchanges are ({', '.join(peers)}); "
                          f"{algorithm.name} sends none the server averages")
    return plan_privacy(config, num_clients, algorithm.client_fraction, rounds)  # type: ignore[attr-defined]


def sample_privacy_plan(algorithm: Algorithm, config: PrivacyConfig, federation: Federation,
                        rounds: int) -> SamplePlan:
    """The DP-SGD plan of ``config`` for ``algorithm`` on ``federation``'s clients; a method whose training phases
    cannot all take DP-SGD, or a BatchNorm model, is one line."""
    from lit_fl.algorithms.registry import ALGORITHMS
    from lit_fl.privacy.sample_level import plan_sample_privacy
    from lit_fl.steps.dp_sgd import per_sample_refusal

    if not getattr(algorithm, "sample_level_dp", False):
        takers = sorted(str(name) for name in ALGORITHMS if getattr(ALGORITHMS[name], "sample_level_dp", False))
        raise ConfigError(f"privacy.level: sample takes a method whose every client training phase is DP-SGD-ready "
                          f"({', '.join(takers)}); {algorithm.name} trains on private data in a step without it")
    refusal = per_sample_refusal([c.model for c in federation.clients], [c.arch for c in federation.clients])
    if refusal:
        raise ConfigError(refusal)
    return plan_sample_privacy(config, [c.num_train for c in federation.clients], algorithm.batch_size,
                               algorithm.local_epochs, rounds)


def check_system(config: SystemConfig, algorithm: Algorithm, federation: Federation) -> None:
    """The clock's policies: a server method's that waits for its round's uploads only; partial work only with a
    deadline and for a method that defines it; availability only for a method that selects by it; and a deadline
    some client can meet (its download, its local epochs over its data, or one batch with partial work, and its
    upload, at its rate and link). One line otherwise."""
    from lit_fl.algorithms.server import ServerAlgorithm

    server = isinstance(algorithm, ServerAlgorithm)
    if config.policies and not (server and not algorithm.asynchronous):
        raise ConfigError(f"system.deadline_s, system.over_selection: the round policies of a server that waits for "
                          f"its updates; {algorithm.name} has none (docs/system.md)")
    if config.partial_work and config.deadline_s is None:
        raise ConfigError("system.partial_work: cuts a client's work to the round's deadline; give system.deadline_s")
    if config.partial_work and not (server and algorithm.partial_work):  # type: ignore[attr-defined]
        raise ConfigError(f"system.partial_work: {algorithm.name} defines no partial work; the methods that do: "
                          "ServerFedProx (give it mu 0 for FedAvg with partial work)")
    if config.availability_trace is not None and not algorithm.selects_available:
        raise ConfigError(f"system.availability_trace: {algorithm.name} draws its participants without regard to "
                          "who is there; the methods that select among the clients there: docs/system.md")
    if config.deadline_s is None or federation.systems is None:
        return
    best = min(_fastest_round_s(algorithm, federation, c, config.partial_work) for c in federation.clients)
    if best > config.deadline_s:
        raise ConfigError(f"system.deadline_s: {config.deadline_s:g} s is shorter than any client's round (the "
                          f"fastest takes {best:.3g} s to download, train and upload); raise it")


def _fastest_round_s(algorithm: Algorithm, federation: Federation, client: Client, partial: bool) -> float:
    """Seconds ``client`` needs for a round: download, its local epochs over its data (one batch with partial
    work), upload."""
    from lit_fl.federation.ledger import model_megabytes
    from lit_fl.system.clock import round_trip_s

    system = federation.systems[client.id]  # type: ignore[index]
    params = sum(p.numel() for p in client.model.parameters()) / 1e6
    samples = min(algorithm.batch_size, client.num_train) if partial else algorithm.local_epochs * client.num_train
    return round_trip_s(system, model_megabytes(client.model), samples * params)


def topology_used(algorithm: Algorithm, federation: Federation) -> str:
    """The network the run's transfers took, as ``summary.json`` records it: ``none`` for a method that sends
    nothing (Local: ``requires`` :data:`~lit_fl.algorithms.requirements.NOTHING_SENT`), ``server`` for a server method
    (:data:`~lit_fl.algorithms.requirements.SERVER_BASED`, or any method with a server model), else the topology's
    name."""
    from lit_fl.algorithms.requirements import NOTHING_SENT, SERVER_BASED

    if NOTHING_SENT in algorithm.requires:
        return "none"
    if SERVER_BASED in algorithm.requires or federation.server:
        return "server"
    return federation.topology.name


def launched_follower() -> bool:
    """Whether a launcher started this process as one of several and not as rank 0 (torchrun: WORLD_SIZE and
    RANK; Fabric's own launcher: WORLD_SIZE, NODE_RANK and LOCAL_RANK; SLURM: SLURM_NTASKS and SLURM_PROCID).
    A stray rank variable in a single-process run does not count."""
    env = os.environ
    if _env_int("WORLD_SIZE") > 1:
        if "RANK" in env:
            return _env_int("RANK") > 0
        return _env_int("NODE_RANK") > 0 or _env_int("LOCAL_RANK") > 0
    return _env_int("SLURM_NTASKS") > 1 and _env_int("SLURM_PROCID") > 0


def _env_int(name: str) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else 0


def check_rows_up_to(run: RunDir, round_: int, eval_every: int) -> None:
    """A checkpoint at ``round_`` follows the ``metrics.csv`` rows of every round it evaluated (a row is written before
    its round's checkpoint): missing rows mean the checkpoint came from elsewhere, refused in one line."""
    from lit_fl.tracking.csv_metrics import read_metrics

    have = {int(row["round"]) for row in read_metrics(run.metrics)} if run.has_metrics() else set()
    missing = [r for r in range(eval_every, round_ + 1, eval_every) if r not in have]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
        raise ConfigError(f"--resume: {run.checkpoint} is at round {round_} but {run.metrics} has no row for round "
                          f"{shown}: the checkpoint is not this run's; put back its own or start a new run")


def check_rounds_left(run: RunDir, round_: int, rounds: int) -> None:
    """``--rounds`` below the rounds a resumed run has done would make an impossible run (``2/1 rounds``): refused in
    one line, before anything is written."""
    if rounds < round_:
        raise ConfigError(f"--rounds: {run.path} has done {round_} rounds, so --rounds must be at least {round_} "
                          f"(got {rounds}); its results up to round {rounds} are in {run.metrics}")


def check_resume_config(run_path: Path, config: dict[str, Any]) -> str | None:
    """Refuse a resume whose config differs from the run's ``config.yaml`` in a key of :data:`RESUME_KEYS` (one
    line naming them); returns the line that says a changed ``rounds`` (``config.yaml`` then records the new one)."""
    saved_path = RunDir(run_path).config
    if not saved_path.is_file():
        return None
    saved_config = RunDir(run_path).read_config()
    saved, given = identity_sections(saved_config), identity_sections(config)
    differing = [key for top in RESUME_KEYS for key in _differences(saved.get(top), given.get(top), top)]
    if differing:
        raise ConfigError(
            f"--resume: the config differs from {saved_path} in {', '.join(differing)}; "
            "resume with the run's own config (only rounds, checkpoint_every, trainer and logger may change)"
        )
    saved_rounds = saved_config.get("rounds")
    if saved_rounds != config.get("rounds") and (given.get("privacy") or {}).get("target_epsilon") is not None:
        raise ConfigError(f"--rounds: privacy.target_epsilon calibrated the noise of {run_path} to its {saved_rounds} "
                          "rounds; a resume cannot change rounds (give privacy.noise_multiplier to extend a run)")
    if saved_rounds != config.get("rounds"):
        return f"lit-fl: --resume: rounds {saved_rounds} -> {config.get('rounds')} (config.yaml records it)"
    return None


def _differences(a: Any, b: Any, prefix: str) -> list[str]:
    """Dotted keys where two nested config values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = list(dict.fromkeys([*a, *b]))
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{prefix}.{k}")]
    return [] if a == b else [prefix.replace(".init_args", "")]
