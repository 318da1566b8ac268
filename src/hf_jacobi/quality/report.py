"""The quality evaluation's table and its picture: tokens per forward against each quality figure, one point per
model, so that a faster model that answers worse shows as what it is."""

from __future__ import annotations

from pathlib import Path

from ..bench.report import save_figure
from .answers import AnswerQuality
from .protocol import ModelQuality, relative, targets_met


def _speed(model: ModelQuality, setting: str) -> float | None:
    return next((s.tokens_per_forward for s in model.speed if s.name == setting), None)


def _cell(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _own_greedy(quality: AnswerQuality) -> str:
    """The "identical to its own greedy" cell: set on rows of Jacobi answers only."""
    same = quality.identical_to_own_greedy
    return "-" if same is None else f"{same} of {quality.answers}"


def markdown_table(models: list[ModelQuality], base: ModelQuality) -> str:
    """One row per model and request set: speed, then each quality figure (relative ones against the base). Rows of
    Jacobi answers (`--jacobi-answers`) add a column: how many equal their own model's greedy answers (those of
    "identical to base" equal the base's greedy answers)."""
    settings = [s.name for s in base.speed]
    jacobi = any(model.jacobi_of is not None for model in models)
    head = ["model", *[f"{s} tokens/forward" for s in settings], "set", "collapsed", "distinct 3-grams (x base)"]
    head += ["base NLL of answers (x base)", "identical to base", *(["identical to its own greedy"] * jacobi)]
    head += ["common prefix", "code passed", "quality bars met"]
    rule = "|---|" + "---:|" * len(settings) + "---|" + "---:|" * (len(head) - len(settings) - 2)
    lines = ["| " + " | ".join(head) + " |", rule]
    for model in models:
        checks = targets_met(model, base) if model is not base else {}
        for name, quality in model.quality.items():
            reference = base.quality[name]
            met = [v for k, v in checks.items() if k.startswith(f"{name}/")]
            cells = [model.name, *[_cell(_speed(model, s), 2) for s in settings], name]
            cells.append(f"{quality.collapsed} of {quality.answers}")
            ratio = relative(quality.distinct_3grams, reference.distinct_3grams)
            cells.append(f"{quality.distinct_3grams:.3f} ({_cell(ratio, 2, 'x')})")
            cells.append(f"{quality.base_nll:.3f} ({_cell(relative(quality.base_nll, reference.base_nll), 2, 'x')})")
            cells.append("-" if quality.identical_to_base is None else f"{quality.identical_to_base}")
            cells += [_own_greedy(quality)] * jacobi
            cells.append(_cell(quality.mean_common_prefix, 1))
            cells.append("-" if quality.code_passed is None else f"{quality.code_passed} of {quality.answers}")
            cells.append("-" if not met else f"{sum(met)} of {len(met)}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


FRONT_FIGURES = (
    ("collapse_rate", "answers collapsed into a loop (share)"),
    ("distinct_3grams", "distinct 3-grams"),
    ("base_nll", "base model's NLL of the answers"),
    ("code_passed", "code tasks passed"),
)


def plot_front(models: list[ModelQuality], path: str | Path, request_set: str) -> Path:
    """Tokens per forward (x) against each quality figure on `request_set` (y): one colour per model, one marker per
    Jacobi setting joined by a line (the same answers, decoded faster or slower); a row of Jacobi answers sits at its
    model's speed with hollow markers on a dashed line. Code tasks passed are read from the code set, whichever
    `request_set` is."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    markers = ("o", "s", "^", "D")
    settings = [s.name for s in models[0].speed]
    figure, axes = plt.subplots(1, len(FRONT_FIGURES), figsize=(4.0 * len(FRONT_FIGURES), 4.0))
    for axis, (key, label) in zip(axes, FRONT_FIGURES, strict=True):
        for index, model in enumerate(models):
            sets = [q for q in model.quality.values() if q.code_passed is not None] if key == "code_passed" else []
            quality = sets[0] if sets else model.quality.get(request_set)
            value = None if quality is None else getattr(quality, key)
            speeds = [_speed(model, setting) for setting in settings]
            if value is None or None in speeds:
                continue
            colour = f"C{index % 10}"
            jacobi = model.jacobi_of is not None
            axis.plot(speeds, [value] * len(speeds), "--" if jacobi else "-", color=colour, alpha=0.4)
            for speed, marker in zip(speeds, markers, strict=False):
                face = "none" if jacobi else colour
                axis.scatter(speed, value, s=36, facecolors=face, edgecolors=colour, marker=marker)
            axis.annotate(model.name, (speeds[-1], value), fontsize=7, xytext=(4, 3), textcoords="offset points")
        axis.set_xlabel(
            "tokens per forward (" + ", ".join(f"{m} {s}" for m, s in zip(markers, settings, strict=False)) + ")"
        )
        axis.set_title(label, fontsize=9)
        axis.grid(alpha=0.3)
    figure.suptitle(f"speed against quality ({request_set}; code tasks for the last panel)", fontsize=10)
    return save_figure(figure, path)
