"""Stage 1: the prompt set. Magpie instructions sampled from the base model at large batch, plus the committed
`packages` train prompts, deduplicated and disjoint from every held-out set; and a held-out judging set of plain
requests built the same way.

Why this mix: the shipped adapter learned from code-heavy data and drifted on plain chat (docs/results.md); the model's
own instructions (Magpie, `hf_jacobi.data.magpie`) cover what users ask it, and the `packages` prompts keep code in.
Why the checks: a training prompt that shares a word 13-gram with a held-out text would flatter the judged figures, so
sampled instructions are filtered at once (`InstructionFilter(exclude=...)`), training prompts that overlap the new
judging set are dropped, and the final sets are checked again and refused if anything still overlaps.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hf_jacobi import (
    FUNCTION_PROMPT_INSTRUCTION,
    InstructionFilter,
    encode_chat,
    evaluation_texts,
    find_overlaps,
    load_prompts,
    magpie_prompts,
    prompt_dataset,
    prompt_texts,
)

from .budget import StageTimer

PROMPT_SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("text", pa.string()),
        ("source", pa.string()),
        ("kind", pa.string()),
        ("split", pa.string()),
    ]
)
"""prompts.parquet: every prompt of the campaign; split 'train' (trajectories) or 'judge' (held out, judged)."""
HELD_OUT_SOURCES = ("requests", "code-tasks", "packages", "magpie")
"""Prompt sources whose test split is held out (HumanEval's prompts are added by `held_out_texts`)."""
_CODE = re.compile(
    r"```|\b(python|javascript|typescript|java|c\+\+|rust|golang|sql|regex|html|css|bash|code|coding|function|"
    r"program|programming|script|algorithm|implement|class|method|compile|debug|bug|api|json|array|string|loop|"
    r"variable|parse|def)\b",
    re.IGNORECASE,
)
_SPACES = re.compile(r"\s+")


def kind_of(text: str) -> str:
    """'code' for a request about code (a programming word or a code fence), else 'plain'."""
    return "code" if _CODE.search(text) else "plain"


def _key(text: str) -> str:
    return _SPACES.sub(" ", text.strip().lower())


@dataclass
class CollectingFilter(InstructionFilter):
    """`InstructionFilter` that also lists every instruction it accepts: `magpie_prompts` returns at most the count
    it was asked for, but judges (and remembers, for deduplication) every row of its batch."""

    accepted: list[str] = field(default_factory=list, init=False, repr=False)

    def accept(self, text: str, ended: bool) -> str | None:
        kept = super().accept(text, ended)
        if kept is not None:
            self.accepted.append(kept)
        return kept

    def take(self) -> list[str]:
        """The instructions accepted since the last call."""
        taken, self.accepted = self.accepted, []
        return taken


def comparable(texts: dict[str, str]) -> dict[str, str]:
    """Texts as the overlap check reads them: without the instruction line every `packages` prompt shares (the
    committed split is decontaminated the same way, `function_prompts._clean_held_out_rows`)."""
    return {key: text.replace(FUNCTION_PROMPT_INSTRUCTION, "") for key, text in texts.items()}


def held_out_texts() -> dict[str, str]:
    """id -> text of every held-out prompt: the quality sets, the `packages` and `magpie` test splits, HumanEval
    (as `comparable` reads them)."""
    texts = {}
    for source in HELD_OUT_SOURCES:
        texts.update({f"{source}:{k}": v for k, v in prompt_texts(load_prompts(source, split="test")).items()})
    texts.update({f"humaneval:{k}": v for k, v in evaluation_texts().items()})
    return comparable(texts)


def check_disjoint(candidates: dict[str, str], references: dict[str, str], what: str) -> None:
    """Refuses (ValueError naming the first pairs) candidates sharing a word 13-gram with a reference text."""
    overlaps = find_overlaps(comparable(candidates), comparable(references))
    if overlaps:
        shown = "; ".join(f"{o.candidate} ~ {o.reference} ({o.ngram!r})" for o in overlaps[:3])
        raise ValueError(f"{len(overlaps)} {what} prompts overlap held-out text: {shown}")


@dataclass
class PromptSettings:
    """How the prompt set is sampled and how large it is."""

    num_prompts: int = 20000
    judge_prompts: int = 400
    batch_size: int = 1024
    max_new_tokens: int = 96
    temperature: float = 1.0
    top_p: float = 0.99
    min_words: int = 4
    max_prompt_tokens: int = 512
    """Longer prompts are left out: one long row pads a whole training batch (and its logits) to its length."""
    seed: int = 0
    packages: int | None = None
    """How many `packages` train prompts to take (None: all)."""


@dataclass
class PromptSet:
    """The campaign's prompts as rows of `PROMPT_SCHEMA`."""

    rows: list[dict[str, str]] = field(default_factory=list)

    def of(self, split: str) -> list[dict[str, str]]:
        return [row for row in self.rows if row["split"] == split]

    def texts(self, split: str) -> dict[str, str]:
        return {row["prompt_id"]: row["text"] for row in self.of(split)}

    def dataset(self, split: str):
        """The split as a prompt dataset (`prompt_id`, `messages`), what collection and `hf-jacobi quality` read."""
        return prompt_dataset([(row["prompt_id"], row["text"]) for row in self.of(split)])

    def write(self, path: Path) -> None:
        table = pa.Table.from_pylist(self.rows, schema=PROMPT_SCHEMA)
        tmp = path.with_name(f".{path.name}.tmp")
        pq.write_table(table, tmp, compression="zstd")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> PromptSet:
        return cls(pq.read_table(path).cast(PROMPT_SCHEMA).to_pylist())

    def summary(self) -> dict[str, object]:
        """Counts by split, source and kind, and the plain share of the training split."""
        counts: dict[str, int] = {}
        for row in self.rows:
            key = f"{row['split']}/{row['source']}/{row['kind']}"
            counts[key] = counts.get(key, 0) + 1
        train = self.of("train")
        plain = sum(row["kind"] == "plain" for row in train)
        share = plain / max(len(train), 1)
        return {
            "train": len(train),
            "judge": len(self.of("judge")),
            "counts": counts,
            "train_plain_share": round(share, 4),
            "plain_at_least_half": share >= 0.5,
        }


def _package_rows(
    settings: PromptSettings, references: dict[str, str], fits: Callable[[str], bool], seen: set[str]
) -> tuple[list[dict[str, str]], int]:
    """The committed `packages` train prompts not overlapping a held-out text nor seen yet; and how many were
    dropped."""
    texts = prompt_texts(load_prompts("packages", split="train", limit=settings.packages))
    overlapping = {overlap.candidate for overlap in find_overlaps(comparable(texts), references)}
    rows = []
    for prompt_id, text in texts.items():
        if prompt_id in overlapping or _key(text) in seen or not fits(text):
            continue
        seen.add(_key(text))
        rows.append({"prompt_id": prompt_id, "text": text, "source": "packages", "kind": "code", "split": "train"})
    return rows, len(texts) - len(rows)


def _next_batch(prompt_set: PromptSet) -> int:
    """The first Magpie batch number not sampled yet (ids are campaign-magpie/<seed>/<batch>/<k>): a resumed set
    continues the seeds instead of drawing the same instructions again."""
    numbers = [int(row["prompt_id"].split("/")[2]) for row in prompt_set.rows if row["source"] == "magpie"]
    return max(numbers, default=-1) + 1


def _sample_batch(model, tokenizer, settings: PromptSettings, keep: CollectingFilter, batch: int) -> list[str]:
    """One generate call of `settings.batch_size` Magpie samples; the instructions `keep` accepted from it."""
    try:
        magpie_prompts(
            model,
            tokenizer,
            1,
            batch_size=settings.batch_size,
            max_new_tokens=settings.max_new_tokens,
            temperature=settings.temperature,
            top_p=settings.top_p,
            seed=settings.seed * 1_000_003 + batch,
            keep=keep,
            max_batches=1,
            progress=False,
        )
    except RuntimeError as error:  # "kept 0 of 1 ...": no row of the batch was kept, nothing to add
        if not str(error).startswith("kept "):
            raise  # a CUDA error or out of memory is not an empty batch
    return keep.take()


def _assign(prompt_set: PromptSet, settings: PromptSettings, texts: list[str], batch: int, fits) -> int:
    """Adds sampled instructions: plain ones fill the judging set first, the rest the training set; returns how many
    were too long for the token limit."""
    too_long = 0
    judge, train = len(prompt_set.of("judge")), len(prompt_set.of("train"))
    for index, text in enumerate(texts):
        if not fits(text):
            too_long += 1
            continue
        kind = kind_of(text)
        split = "judge" if kind == "plain" and judge < settings.judge_prompts else "train"
        if split == "train" and train >= settings.num_prompts:
            continue
        judge, train = judge + (split == "judge"), train + (split == "train")
        prompt_id = f"campaign-magpie/{settings.seed}/{batch}/{index}"
        prompt_set.rows.append(
            {"prompt_id": prompt_id, "text": text, "source": "magpie", "kind": kind, "split": split}
        )
    return too_long


def make_disjoint(prompt_set: PromptSet, references: dict[str, str]) -> int:
    """Drops training prompts that share a word 13-gram with the judging set, then checks both splits against every
    held-out text (and training against judging), refusing any overlap left; returns how many were dropped."""
    judge = prompt_set.texts("judge")
    overlapping = {overlap.candidate for overlap in find_overlaps(comparable(prompt_set.texts("train")), judge)}
    prompt_set.rows = [row for row in prompt_set.rows if row["prompt_id"] not in overlapping]
    check_disjoint(prompt_set.texts("train"), {**references, **judge}, "training")
    check_disjoint(judge, references, "judging")
    return len(overlapping)


def build_prompt_set(
    model,
    tokenizer,
    settings: PromptSettings,
    timer: StageTimer,
    previous: PromptSet | None = None,
    save: Callable[[PromptSet, dict], None] | None = None,
    save_every_s: float = 15.0,
) -> tuple[PromptSet, dict]:
    """Stage 1: samples Magpie batches until the set is full or `timer` expires (an earlier call's `previous` set is
    kept and completed); `save(set, record)` is called every `save_every_s` and at the end. Returns the set and the
    stage's record (batches, acceptance, drops, why it stopped)."""
    references = held_out_texts()
    prompt_set = PromptSet(list(previous.rows)) if previous is not None else PromptSet()
    seen = {_key(row["text"]) for row in prompt_set.rows}

    def fits(text: str) -> bool:
        return len(encode_chat(tokenizer, text)) <= settings.max_prompt_tokens

    record: dict = {"resumed_rows": len(prompt_set.rows), "batches": 0, "accepted": 0, "too_long": 0}
    if not any(row["source"] == "packages" for row in prompt_set.rows):
        rows, record["packages_dropped"] = _package_rows(settings, references, fits, seen)
        prompt_set.rows += rows
    keep = CollectingFilter(min_words=settings.min_words, exclude=references)
    for row in prompt_set.rows:  # what the set holds already counts as seen
        keep.accept(row["text"], ended=True)
    keep.take()
    batch, last_save = _next_batch(prompt_set), time.monotonic()
    record["stopped"] = "full"
    while len(prompt_set.of("judge")) < settings.judge_prompts or len(prompt_set.of("train")) < settings.num_prompts:
        if timer.expired():
            record["stopped"] = "deadline"
            break
        texts = _sample_batch(model, tokenizer, settings, keep, batch)
        record["too_long"] += _assign(prompt_set, settings, texts, batch, fits)
        record["batches"], record["accepted"], batch = (
            record["batches"] + 1,
            record["accepted"] + len(texts),
            batch + 1,
        )
        if save is not None and time.monotonic() - last_save > save_every_s:
            save(prompt_set, record)
            last_save = time.monotonic()
    record["sampled"] = record["batches"] * settings.batch_size
    record["dropped_overlapping_judge"] = make_disjoint(prompt_set, references)
    record["held_out_references"] = len(references)
    if save is not None:
        save(prompt_set, record)
    return prompt_set, record
