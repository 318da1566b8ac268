"""The model card of a published Jacobi Forcing checkpoint, rendered from the template in `model_cards/`.

The card is where a reader decides whether the checkpoint is worth its download, so it carries what was measured for
this very checkpoint (the bench table, with its machine and command) rather than the paper's figures, and says how to
use the checkpoint both with and without hf_jacobi installed. It claims Jacobi Forcing training only for a checkpoint
that was trained (`CardInfo.trained`); any other is presented as its base model with Jacobi decoding settings.

The bench table is read from the bench.json that `hf-jacobi bench` writes (`BenchResults`), not from the bench package:
publishing then depends on a file format that bench keeps stable rather than on the benchmark's code, and `hub` never
imports `bench` (bench renders its own table with the same `markdown_table`).
"""

from __future__ import annotations

import importlib.resources
import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData

from ._version import __version__
from .checkpoint import TUNE_REPORT
from .decoding.config import JacobiConfig

# ------------------------------------------------------------ a bench run as the card quotes it


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _spread(row: dict[str, Any], key: str, spec: str, suffix: str = "") -> str:
    """A median with the slowest and fastest round beside it when the run timed several rounds."""
    value = _fmt(row.get(key), spec) + suffix
    spread = row.get(f"{key}_range")
    if row.get("rounds", 1) > 1 and spread:
        value += f" ({format(spread[0], spec)}-{format(spread[1], spec)})"
    return value


def markdown_table(rows: list[dict[str, Any]], metric: str) -> str:
    """One line per setting: the score, tokens per forward, tokens/s with and without the prefill, speedups and how
    many samples were identical to greedy; with several timing rounds, medians with their range."""
    rounds = max((r.get("rounds", 1) for r in rows), default=1)
    median = f" (median of {rounds} rounds, range)" if rounds > 1 else ""
    # at batch > 1 a batch runs as many forwards as its slowest row: shown only where that differs from the rows' sum
    batched = any(r.get("batch_forwards") not in (None, r.get("forwards")) for r in rows)
    lines = [
        f"| setting | {metric} | tokens/forward |{' batch forwards |' if batched else ''} tok/s{median} "
        f"| tok/s excl. prefill | speedup vs AR | speedup vs best AR{median} | identical to greedy |",
        f"|---|---:|---:|{'---:|' if batched else ''}---:|---:|---:|---:|:---:|",
    ]
    for r in rows:
        score = "-" if r["score"] is None else f"{100 * r['score']:.1f}%"
        batch_cell = f" {_fmt(r.get('batch_forwards'), 'd')} |" if batched else ""
        lines.append(
            f"| {r['setting']} | {score} | {_fmt(r['tokens_per_forward'], '.2f')} |{batch_cell} "
            f"{_spread(r, 'tokens_per_s', '.1f')} | {_fmt(r['decode_tokens_per_s'], '.1f')} "
            f"| {_fmt(r['speedup_vs_ar'], '.2f')}x | {_spread(r, 'speedup_vs_best_ar', '.2f', 'x')} "
            f"| {r['identical']}/{r['samples']} |"
        )
    return "\n".join(lines)


@dataclass
class BenchResults:
    """One bench run: its summary rows (one per setting), what it ran on and under which command, and its plot.

    Args:
        rows: the "summary" rows of bench.json (setting, score, tokens_per_forward, tokens_per_s, ...).
        meta: the run's "meta" (machine, command, task, metric, batch_size, max_new_tokens).
        notes: caveats the run recorded (e.g. a baseline that could not run).
        plot: bench.png beside the JSON file, when there is one.
    """

    rows: list[dict[str, Any]]
    meta: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    plot: Path | None = None

    @classmethod
    def from_json(cls, path: str | Path) -> BenchResults:
        """Reads a bench.json, naming the file when it is missing or is not one."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"bench results {str(path)!r} do not exist (write them with hf-jacobi bench)")
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
            meta, rows = payload["meta"], payload["summary"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise ValueError(f"{str(path)!r} is not a hf-jacobi bench JSON file ({error})") from None
        plot = path.with_suffix(".png")
        return cls(rows, meta, list(payload.get("notes", [])), plot if plot.is_file() else None)

    def table(self) -> str:
        return markdown_table(self.rows, self.meta.get("metric", "score"))

    def description(self) -> str:
        """What a reader needs to trust the table: the machine, the command, the sample set, what was counted."""
        meta = self.meta
        lines = [
            f"Measured on {meta.get('machine', 'unrecorded hardware')} with `{meta.get('command', 'hf-jacobi bench')}`: "
            f"{meta.get('task', '?')}, {self.rows[0]['samples'] if self.rows else 0} samples, "
            f"batch {meta.get('batch_size', '?')}, at most {meta.get('max_new_tokens', '?')} new tokens; every sample "
            "counted, prefill included in tok/s unless marked."
        ]
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)


# ------------------------------------------------------------------------------------- the card

TEMPLATE_PACKAGE = "hf_jacobi.model_cards"
TEMPLATE_NAME = "jacobi_forcing.md"

CITATION = textwrap.dedent("""\
    @article{jacobiforcing2025,
        title   = {{Fast and Accurate Causal Parallel Decoding using Jacobi Forcing}},
        journal = {arXiv preprint arXiv:2512.14681},
        year    = {2025}
    }""")

CARD_TAGS = ("jacobi-forcing", "hf_jacobi", "custom_generate", "parallel-decoding")


@dataclass
class CardInfo:
    """What the card says about one checkpoint.

    Args:
        repo_id: where it is published (the usage snippets load it from there).
        base_model: the model it was trained from (a Hub id or a local path; only Hub ids are linked).
        adapter: True for a LoRA adapter, whose usage goes through peft and the base model.
        jacobi: the Jacobi defaults written into generation_config.json (None: the card lists none).
        training_data: one line about the trajectories it was trained on.
        datasets: Hub datasets for the card's metadata.
        recipe: Markdown describing the recipe (e.g. the YAML files, fenced).
        bench: what `hf-jacobi bench` measured on this checkpoint (its bench.json), or None when not measured.
        tuning_note: how the defaults were chosen (e.g. by `hf-jacobi tune`, on which hardware).
        license: an SPDX id or "other".
        model_name: the card's title (default: the repository's name).
        trained: whether the checkpoint was post-trained with Jacobi Forcing. The card says so only when True;
            otherwise it presents the base model with Jacobi decoding settings and leaves out the training data. The
            trainer, which has just trained, leaves the default; `publish_checkpoint` sets it from the training
            record the checkpoint carries (`hub.export.jacobi_forcing_record`: its `checkpoint.TRAINING_RECORD`).
    """

    repo_id: str
    base_model: str | None = None
    adapter: bool = False
    jacobi: JacobiConfig | None = None
    training_data: str = "the model's own Jacobi decoding trajectories (`hf-jacobi collect`)"
    datasets: list[str] = field(default_factory=list)
    recipe: str = ""
    bench: BenchResults | None = None
    tuning_note: str = ""
    license: str = "apache-2.0"
    model_name: str | None = None
    trained: bool = True


def template_text(template: str | Path | None = None) -> str:
    """The template file given, else the one installed with the package (model_cards/jacobi_forcing.md)."""
    if template is not None:
        path = Path(template)
        if not path.is_file():
            raise FileNotFoundError(f"model card template {str(path)!r} does not exist")
        return path.read_text(encoding="utf-8")
    try:
        return importlib.resources.files(TEMPLATE_PACKAGE).joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")
    except ModuleNotFoundError:
        # Run from a source checkout without installing (PYTHONPATH=src, e.g. on a bare GPU machine), the template
        # package is not mapped; the file is beside src/. A missing card must not end a training run at its first
        # checkpoint.
        source = Path(__file__).resolve().parents[2] / "model_cards" / TEMPLATE_NAME
        if not source.is_file():
            raise
        return source.read_text(encoding="utf-8")


def tuning_note(folder: Path) -> str:
    """One sentence on where the defaults came from, from the tune report when there is one."""
    path = folder / TUNE_REPORT
    if not path.is_file():
        return "These defaults were not tuned for particular hardware (`hf-jacobi tune` measures and picks them)."
    report = json.loads(path.read_text(encoding="utf-8"))
    choice = report.get("choice", {})
    speedup = choice.get("predicted_speedup")
    said = f", predicted {speedup:.2f}x greedy tokens/s there" if isinstance(speedup, (int, float)) else ""
    return f"Chosen by `hf-jacobi tune` on {report.get('hardware', 'unrecorded hardware')}{said}; see `{TUNE_REPORT}`."


def _is_hub_id(name: str | None) -> bool:
    return bool(name) and not Path(name).expanduser().exists() and name.count("/") == 1 and " " not in name


def _generation_config_settings(jacobi: JacobiConfig | None) -> dict[str, Any]:
    """The settings by the names a user passes to generate() and finds in generation_config.json."""
    if jacobi is None:
        return {}
    settings = jacobi.to_generate_kwargs()
    del settings["decoding"]  # the card says it in prose: the table lists the values a user may tune
    return settings


def _base_section(info: CardInfo) -> str:
    """The anchor of the section that names the base model: "Training" on a trained checkpoint's card."""
    return "training" if info.trained else "base-model"


def render_model_card(info: CardInfo, template: str | Path | None = None) -> ModelCard:
    """The card as a `huggingface_hub.ModelCard` (YAML metadata + Markdown), ready to `save()` or push."""
    hub_base = info.base_model if _is_hub_id(info.base_model) else None
    data = ModelCardData(
        base_model=hub_base,
        library_name="peft" if info.adapter else "transformers",
        license=info.license,
        tags=list(CARD_TAGS),
        datasets=info.datasets or None,
        pipeline_tag="text-generation",
    )
    base_name = info.base_model or "an unknown base model"
    return ModelCard.from_template(
        data,
        template_str=template_text(template),
        model_name=info.model_name or info.repo_id.split("/")[-1],
        repo_id=info.repo_id,
        base_model=base_name,
        base_model_url=f"https://huggingface.co/{hub_base}" if hub_base else f"#{_base_section(info)}",
        adapter=info.adapter,
        trained=info.trained,
        hf_jacobi_version=__version__,
        bench_table=info.bench.table() if info.bench else None,
        bench_notes=info.bench.description() if info.bench else "",
        jacobi_settings=_generation_config_settings(info.jacobi),
        tuning_note=info.tuning_note,
        training_data=info.training_data,
        recipe=info.recipe,
        license=info.license,
        citation=CITATION,
    )


def fenced_files(paths: list[Path]) -> str:
    """Recipe files as fenced Markdown blocks, each under its file name, so the card shows exactly what was run."""
    blocks = []
    for path in paths:
        language = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".py": "python"}.get(path.suffix, "")
        blocks.append(f"`{path.name}`:\n```{language}\n{path.read_text(encoding='utf-8').rstrip()}\n```")
    return "\n\n".join(blocks)
