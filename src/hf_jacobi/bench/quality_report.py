"""The quality evaluation's table and its picture: tokens per forward against each quality figure, one point per
model, so that a faster model that answers worse shows as what it is."""

from __future__ import annotations

from pathlib import Path

from .quality_eval import ModelQuality, relative, targets_met


def _speed(model: ModelQuality, setting: str) -> float | None:
    return next((s.tokens_per_forward for s in model.speed if s.name == setting), None)


def _cell(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def markdown_table(models: list[ModelQuality], base: ModelQuality) -> str:
    """One row per model and request set: speed, then each quality figure (relative ones against the base)."""
    settings = [s.name for s in base.speed]
    head = ["model", *[f"{s} tokens/forward" for s in settings], "set", "collapsed", "distinct 3-grams (x base)"]
    head += ["base NLL of answers (x base)", "identical to base", "common prefix", "code passed", "quality bars met"]
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


def plot_front(models: list[ModelQuality], path: str | Path, setting: str, request_set: str) -> Path:
    """Tokens per forward of `setting` (x) against each quality figure on `request_set` (y), a point per model;
    code tasks passed are read from the code set, whichever `request_set` is."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(FRONT_FIGURES), figsize=(4.0 * len(FRONT_FIGURES), 3.8))
    for axis, (key, label) in zip(axes, FRONT_FIGURES, strict=True):
        for model in models:
            sets = [q for q in model.quality.values() if q.code_passed is not None] if key == "code_passed" else []
            quality = sets[0] if sets else model.quality[request_set]
            value = getattr(quality, key)
            if value is None:
                continue
            axis.scatter(_speed(model, setting), value, s=36)
            axis.annotate(
                model.name, (_speed(model, setting), value), fontsize=7, xytext=(4, 3), textcoords="offset points"
            )
        axis.set_xlabel(f"tokens per forward ({setting})")
        axis.set_title(label, fontsize=9)
        axis.grid(alpha=0.3)
    figure.suptitle(f"speed against quality ({request_set}; code tasks for the last panel)", fontsize=10)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
