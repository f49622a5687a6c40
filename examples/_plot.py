"""The loss-curve plot the training examples write with ``--plot`` (matplotlib optional)."""

from __future__ import annotations

import numpy as np


def plot_losses(losses, path, *, title: str, ylabel: str = "cross-entropy loss",
                target: float | None = None) -> bool:
    """Write ``losses`` per step to the PNG ``path`` on a log scale, with a dashed line at
    ``target``; False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(np.arange(1, len(losses) + 1), losses, lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if target is not None:
        ax.axhline(target, color="gray", ls="--", lw=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
