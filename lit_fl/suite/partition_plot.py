"""The client x class picture of a partition (DFML Fig. 10) and its per-client class counts."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from lit_fl.io import atomic_write_text


def class_counts(labels: np.ndarray, splits: list, num_classes: int) -> dict[str, np.ndarray]:
    """``{"train": (clients, classes), "val": (clients, classes)}`` sample counts."""
    return {
        split: np.stack([np.bincount(labels[getattr(s, split)], minlength=num_classes) for s in splits])
        for split in ("train", "val")
    }


def write_counts_csv(counts: dict[str, np.ndarray], path: Path) -> None:
    out = io.StringIO()
    writer = csv.writer(out)
    num_classes = counts["train"].shape[1]
    writer.writerow(["client", "split", *[f"class_{c}" for c in range(num_classes)], "total"])
    for split, table in counts.items():
        for client, row in enumerate(table):
            writer.writerow([client, split, *row.tolist(), int(row.sum())])
    atomic_write_text(path, out.getvalue())


def write_bubble_plot(counts: dict[str, np.ndarray], title: str, path: Path) -> None:
    """One bubble per (client, class), its area proportional to the client's samples of that class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    total = counts["train"] + counts["val"]
    clients, classes = np.nonzero(total)
    sizes = total[clients, classes]
    width = min(max(6.0, 0.25 * total.shape[0] + 2), 24.0)
    fig, ax = plt.subplots(figsize=(width, max(3.0, 0.3 * total.shape[1] + 1.5)))
    area = 400 * sizes / max(int(sizes.max()), 1)
    ax.scatter(clients, classes, s=area, alpha=0.6, color="tab:red", edgecolors="none")
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    ax.set_xticks(range(total.shape[0]) if total.shape[0] <= 50 else np.linspace(0, total.shape[0] - 1, 11, dtype=int))
    ax.set_yticks(range(total.shape[1]) if total.shape[1] <= 20 else np.linspace(0, total.shape[1] - 1, 11, dtype=int))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    tmp.replace(path)
    plt.close(fig)
