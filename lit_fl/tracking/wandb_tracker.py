"""Weights & Biases tracking: the same metrics as ``metrics.csv``, the resolved config and the summary.

W&B runs offline unless the user is logged in (``mode="auto"``), so a run never needs the network; the
offline run lands in ``runs/NAME/wandb/`` and ``wandb sync`` uploads it later.
"""

from __future__ import annotations

import netrc
import os
import sys
import threading
from pathlib import Path
from typing import Any, Literal

#: seconds ``wandb.init`` may take before the run goes on without W&B
INIT_TIMEOUT_S = float(os.environ.get("LIT_FL_WANDB_INIT_TIMEOUT", "60"))

WandbMode = Literal["auto", "offline", "online", "disabled"]


def resolve_mode(mode: WandbMode) -> str:
    """``auto`` -> ``online`` when an API key is configured (env or ~/.netrc), else ``offline``.

    An explicit ``WANDB_MODE`` in the environment wins over ``auto``.
    """
    if mode != "auto":
        return mode
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        if netrc.netrc().authenticators("api.wandb.ai"):
            return "online"
    except (FileNotFoundError, netrc.NetrcParseError):
        pass
    return "offline"


class WandbTracker:
    """A thin wrapper over one ``wandb`` run; ``run_id`` is kept in the checkpoint so resume continues it."""

    def __init__(self, project: str, mode: WandbMode = "auto", entity: str | None = None) -> None:
        self.project, self.mode, self.entity = project, mode, entity
        self.run: Any = None
        self._starting: threading.Thread | None = None

    def start_in_background(self, *args: Any, **kwargs: Any) -> None:
        """``start`` on a thread, so W&B's 1-2 s of start-up (importing it, its service process) overlaps the
        first round instead of delaying it. Every other method waits for the start first; a start that fails
        prints its warning line and leaves the tracker off, as ``start`` does."""
        self._starting = threading.Thread(target=self.start, args=args, kwargs=kwargs, name="lit-fl-wandb-start",
                                          daemon=True)
        self._starting.start()

    def _started(self) -> None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None

    def start(
        self,
        run_dir: Path,
        name: str,
        config: dict[str, Any],
        run_id: str | None = None,
        group: str | None = None,
        job_type: str | None = None,
        tags: list[str] | None = None,
    ) -> bool:
        """Start (or, with ``run_id``, continue) the run. ``round`` is the step metric of every logged key, so
        W&B charts use rounds on the x axis and any chart can switch to ``comm_mb`` (logged in every row).

        Returns False, after one warning line, when W&B cannot start (unreachable server, bad key): the run
        goes on without it, metrics.csv and summary.json stay complete.
        """
        try:
            import wandb

            self.run = wandb.init(
                project=self.project,
                entity=self.entity,
                name=name,
                id=run_id,
                resume="allow" if run_id else None,
                dir=str(run_dir),
                config=config,
                group=group,
                job_type=job_type,
                tags=tags or None,
                mode=resolve_mode(self.mode),
                settings=wandb.Settings(console="off", silent=True, init_timeout=INIT_TIMEOUT_S),
            )
            self.run.define_metric("round")
            self.run.define_metric("*", step_metric="round")
        except Exception as err:  # noqa: BLE001 - any W&B failure must not cost the run
            self._off(err)
            return False
        return True

    @property
    def run_id(self) -> str | None:
        self._started()
        return None if self.run is None else self.run.id

    def log(self, metrics: dict[str, float], round_: int) -> None:
        self._started()
        if self.run is None:
            return
        try:
            self.run.log({**metrics, "round": round_}, step=round_)
        except Exception as err:  # noqa: BLE001
            self._off(err)

    def summarize(self, summary: dict[str, Any]) -> None:
        self._started()
        if self.run is None:
            return
        try:
            for key, value in _flatten(summary).items():
                self.run.summary[key] = value
        except Exception as err:  # noqa: BLE001
            self._off(err)

    def finish(self, exit_code: int = 0) -> None:
        """Finish the run and wait until W&B has written it (offline runs are complete on disk after this)."""
        self._started()
        if self.run is None:
            return
        try:
            import wandb

            self.run.finish(exit_code=exit_code)
            wandb.teardown()
        except Exception as err:  # noqa: BLE001
            self._off(err)
        self.run = None

    def _off(self, err: BaseException) -> None:
        """One warning line, then no more W&B calls in this run."""
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        print(f"lit-fl: warning: W&B is off for this run ({type(err).__name__}: {reason}); "
              "metrics.csv and summary.json are complete", file=sys.stderr)
        run, self.run = self.run, None
        if run is not None:
            try:
                run.finish(exit_code=1, quiet=True)
            except Exception:  # noqa: BLE001, S110 - already off
                pass


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}/"))
        else:
            out[name] = value
    return out
