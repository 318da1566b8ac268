"""Writing a matplotlib figure the way every plot of the project is written: laid out, at one resolution, into a folder
made for it, and closed, so that a long benchmark that draws many figures does not keep them all in memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save_figure(figure: Any, path: str | Path) -> Path:
    """Lays out `figure`, writes it to `path` (creating its folder) at 120 dpi, closes it and returns the path."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
