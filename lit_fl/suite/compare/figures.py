"""The dashboard's figures as PNG (matplotlib), for papers: per metric, against round and against MB (and against
the epsilon spent, for differentially private runs)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from lit_fl.suite.compare.curves import (
    AXIS_TITLES,
    EPSILON_AXIS,
    VIRTUAL_AXIS,
    axes,
    color,
    curve,
    methods,
    panels,
    title,
)
from lit_fl.suite.compare.results import Comparison


def write_figures(comparison: Comparison, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for metric, x_axes in axes(comparison, panels(comparison)).items():
        fig, subplots = plt.subplots(1, len(x_axes), figsize=(5.5 * len(x_axes), 4), sharey=True)
        for ax, axis in zip(subplots, x_axes):
            for i, group in enumerate(comparison.groups):
                c = curve(group, metric)
                if not c.rounds or all(math.isnan(v) for v in c.x(axis)):  # against epsilon: a run without privacy
                    continue
                x = c.x(axis)
                low = [m - s for m, s in zip(c.mean, c.std)]
                high = [m + s for m, s in zip(c.mean, c.std)]
                (line,) = ax.plot(x, c.mean, label=f"{group.label} (n={len(group.counted)})", color=color(i))
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
            ax.set_xlabel(AXIS_TITLES[axis])
            if axis == "round":  # rounds are whole numbers
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if axis in (EPSILON_AXIS, VIRTUAL_AXIS):  # epsilons and heavy-tailed times: orders of magnitude apart
                ax.set_xscale("log", nonpositive="mask")
            ax.grid(alpha=0.3)
        subplots[0].set_ylabel(metric)
        handles, labels = subplots[0].get_legend_handles_labels()
        fig.suptitle(title(metric, methods(comparison)))
        fig.tight_layout()
        if handles:  # below both panels; the saved image grows to hold it whatever the labels' length
            fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(labels), 2),
                       fontsize=8, frameon=False)
        path = folder / (re.sub(r"[^A-Za-z0-9_.-]+", "_", metric) + ".png")
        tmp = path.with_name(f".{path.name}.tmp.png")
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        tmp.replace(path)
        plt.close(fig)
        written.append(path)
    return written
