"""The shipped adapter's evaluation and quality rows beside the earlier rounds' (the README's glance, the eval
tables and the quality study), quoted alike by the README, the results page and the model card."""

from __future__ import annotations

from .campaign_cpu import glance_loops_row, glance_ship_row, judge_loops_sentence
from .core import (
    JF,
    PREVIOUS,
    REPAIR,
    RESULTS,
    ROUND2,
    ROUND3,
    ROUND4,
    SHIPPED,
    Page,
    base,
    block,
    bold_if,
    evaluation,
    load,
    markdown_table,
    run_folder,
    shipped_when,
    trained,
)
from .cpu_fast_path import shipped_glance_row
from .gpu_graph_greedy import glance_row as gpu_glance_row

QUALITY_FRONT = "quality-cpu/front"
"""The answer-quality study of every adapter (`hf-jacobi quality`, merged with --merge)."""
SHIPPED_QUALITY = "lora-r16-kl30-n9999"
"""The shipped adapter's name in that study (the CPU campaign's point)."""
PREVIOUS_QUALITY = "base-scale-kl10"
"""The adapter it replaced (the GPU-trained fresh adapter), on which the GPU and AVX-512 BF16 wall times were
measured."""
REPAIR_QUALITY = "repair-100-steps"
"""The adapter before that (the repair round's step 100)."""


def quality_model(name: str) -> dict:
    return next(m for m in load(f"{QUALITY_FRONT}/quality.json")["models"] if m["name"] == name)


PACKAGES_ROWS = [  # (label, evaluation of the 16 `packages` test prompts at 64 tokens, or None for the base)
    ("base SmolLM2-135M-Instruct", None),
    ("round 1 (LoRA r16)", "evaluate-lora-r16"),
    ("full fine-tune instead of round 1 (not shipped)", "evaluate-full"),
    ("round 2, KL anchor", f"evaluate-{ROUND2}"),
    ("round 3, on-policy, KL anchor + anchor texts", f"evaluate-{ROUND3}"),
    (f"round 4, on-policy, noise window 16 (shipped {shipped_when(ROUND4)})", f"evaluate-{ROUND4}"),
]
HUMANEVAL_ROWS = [
    ("base SmolLM2-135M-Instruct", None),
    ("round 1 (LoRA r16)", "evaluate-humaneval"),
    ("round 2, KL anchor", f"evaluate-humaneval-{ROUND2}"),
    ("round 3, on-policy, KL anchor + anchor texts", f"evaluate-humaneval-{ROUND3}"),
    (f"round 4, on-policy, noise window 16 (shipped {shipped_when(ROUND4)})", f"evaluate-humaneval-{ROUND4}"),
    (
        f"repair round: round 4 on the base's own answers (shipped {shipped_when(REPAIR)})",
        f"evaluate-humaneval-{REPAIR}",
    ),
    (
        f"a fresh adapter on the base's own answers, KL x10 (shipped {shipped_when(PREVIOUS)})",
        f"evaluate-humaneval-{PREVIOUS}",
    ),
    (
        "**the CPU campaign's: 9,999 prompts' trajectories, one epoch, KL x30 (shipped)**",
        f"evaluate-humaneval-{SHIPPED}",
    ),
]


@block("eval-packages")
def eval_packages(page: Page) -> str:
    rows = [
        "| model | plain tokens/forward | 2 blocks + recycling tokens/forward | distinct 3-grams | NLL of base answers |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, name in PACKAGES_ROWS:
        side = base(f"evaluate-{ROUND4}") if name is None else trained(name)
        plain, both = side.tpf("plain"), side.tpf("both", 2)
        rows.append(
            f"| {label} | {bold_if(label, plain)} ({side.counts('plain')}) | {bold_if(label, both)} "
            f"({side.counts('both')}) | {side.distinct:.3f} | {side.reference_nll:.3f} |"
        )
    files = ", ".join(page.ref(f"{JF}/{name}.json") for _, name in PACKAGES_ROWS if name)
    return "\n".join(rows) + f"\n\nFiles: {files}."


@block("eval-humaneval")
def eval_humaneval(page: Page) -> str:
    rows = [
        "| model | plain n=8 tokens/forward | recycling n=8, pool 4 tokens/forward | distinct 3-grams "
        "| NLL of HumanEval's canonical solutions |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, name in HUMANEVAL_ROWS:
        side = base(f"evaluate-humaneval-{ROUND4}") if name is None else trained(name)
        plain, rec = side.tpf("plain"), side.tpf("recycling", 2)
        nll = f"{side.canonical_nll:.3f}"
        if name is not None:
            nll += f" ({bold_if(label, f'{side.canonical_ratio:.3f}x')} base)"
        rows.append(
            f"| {label} | {bold_if(label, plain)} ({side.counts('plain')}) | {bold_if(label, rec)} "
            f"({side.counts('recycling')}) | {side.distinct:.3f} | {nll} |"
        )
    files = ", ".join(page.ref(f"{JF}/{name}.json") for _, name in HUMANEVAL_ROWS if name)
    return "\n".join(rows) + f"\n\nFiles: {files}."


def quality_speed(name: str, setting: str, digits: int) -> str:
    """`tokens/forward (tokens / forwards)` of one model and Jacobi setting in the quality study (its speed is measured
    on the same 16 `packages` test prompts, 128 tokens, block 16, as `evaluate-128-tokens-*`)."""
    entry = next(s for s in quality_model(name)["speed"] if s["name"] == setting)
    return f"{entry['tokens_per_forward']:.{digits}f} ({entry['new_tokens']:,} / {entry['forwards']:,})"


@block("eval-128-tokens")
def eval_128_tokens(page: Page) -> str:
    r3, r4 = evaluation("evaluate-128-tokens-shipped"), evaluation(f"evaluate-128-tokens-{ROUND4}")
    rows = [
        "| model | plain tokens/forward | 2 blocks + recycling tokens/forward |",
        "|---|---:|---:|",
        f"| base SmolLM2-135M-Instruct | {r4[0].tpf('plain')} ({r4[0].counts('plain')}) | "
        f"{r4[0].tpf('both', 2)} ({r4[0].counts('both')}) |",
        f"| round 3 | {r3[1].tpf('plain')} ({r3[1].counts('plain')}) | {r3[1].tpf('both', 2)} ({r3[1].counts('both')}) |",
        f"| round 4 | {r4[1].tpf('plain')} ({r4[1].counts('plain')}) | {r4[1].tpf('both', 2)} ({r4[1].counts('both')}) |",
        f"| repair round (shipped {shipped_when(REPAIR)}) | {quality_speed(REPAIR_QUALITY, 'plain', 3)} | "
        f"{quality_speed(REPAIR_QUALITY, 'both', 2)} |",
        f"| fresh adapter, KL x10 (shipped {shipped_when(PREVIOUS)}) | "
        f"{quality_speed(PREVIOUS_QUALITY, 'plain', 3)} | "
        f"{quality_speed(PREVIOUS_QUALITY, 'both', 2)} |",
        f"| **the CPU campaign's, KL x30 (shipped)** | **{quality_speed(SHIPPED_QUALITY, 'plain', 3)}** | "
        f"**{quality_speed(SHIPPED_QUALITY, 'both', 2)}** |",
    ]
    files = f"{page.ref(f'{JF}/evaluate-128-tokens-{ROUND4}.json')}, {page.ref(f'{QUALITY_FRONT}/quality.json')}"
    shipped = page.ref(f"{JF}/evaluate-128-tokens-shipped.json")
    return "\n".join(rows) + f"\n\nFiles: {files}; round 3's: {shipped} (named for the adapter it shipped as then)."


@block("untrained-acceptance")
def untrained_acceptance(page: Page) -> str:
    packages = base(f"evaluate-{ROUND4}").setting("plain")["tokens_per_forward"]
    humaneval = base(f"evaluate-humaneval-{ROUND4}")
    bench = base(f"evaluate-bench-prompts-{ROUND4}").setting("recycling")["tokens_per_forward"]
    recycling = humaneval.setting("recycling")["tokens_per_forward"]
    low, high = sorted((recycling, bench))
    return f"about {packages:.2f} tokens per forward, {low:.2f}-{high:.2f} with rejection recycling"


@block("glance")
def glance(page: Page) -> str:
    he = evaluation(f"evaluate-humaneval-{SHIPPED}")
    fhe, fq = f"{JF}/evaluate-humaneval-{SHIPPED}.json", f"{QUALITY_FRONT}/quality.json"
    base_q, shipped_q = quality_model("base")["quality"], quality_model(SHIPPED_QUALITY)["quality"]
    rows = [
        "| held out, every output identical to greedy (in float32) | untrained | shipped adapter | file |",
        "|---|---:|---:|---|",
        f"| plain Jacobi, tokens per forward (16 `packages` prompts, 128 tokens, block 16) | "
        f"{quality_speed('base', 'plain', 3).split()[0]} | **{quality_speed(SHIPPED_QUALITY, 'plain', 3).split()[0]}** | "
        f"{page.ref(fq)} |",
        f"| 2 blocks + recycling, tokens per forward (same prompts) | {quality_speed('base', 'both', 2).split()[0]} | "
        f"**{quality_speed(SHIPPED_QUALITY, 'both', 2).split()[0]}** | {page.ref(fq)} |",
        f"| plain Jacobi, tokens per forward (16 HumanEval problems, block 8) | {he[0].tpf('plain')} | "
        f"**{he[1].tpf('plain')}** | {page.ref(fhe)} |",
        f"| block 8 + recycling, tokens per forward (same problems) | {he[0].tpf('recycling', 2)} | "
        f"**{he[1].tpf('recycling', 2)}** | {page.ref(fhe)} |",
        f"| answers collapsed into a loop, 48 plain chat requests (128 tokens) | "
        f"{base_q['requests']['collapsed']} | {shipped_q['requests']['collapsed']} | {page.ref(fq)} |",
        f"| answers collapsed into a loop / passing their tests, 32 code requests | "
        f"{base_q['code-tasks']['collapsed']} / {base_q['code-tasks']['code_passed']} | "
        f"{shipped_q['code-tasks']['collapsed']} / {shipped_q['code-tasks']['code_passed']} | {page.ref(fq)} |",
        glance_loops_row(page),
        glance_ship_row(page),
        shipped_glance_row(page),
        previous_adapter(gpu_glance_row(page)),
    ]
    return "\n".join(rows)


def previous_adapter(row: str) -> str:
    """A glance row measured on the adapter shipped before (where the shipped one has no such figure), said in its
    label."""
    return row.replace("| ", "| the adapter shipped before (`base-scale-kl10-step250`), ", 1)


@block("quality-summary")
def quality_summary(page: Page) -> str:
    base_q, ours = quality_model("base")["quality"], quality_model(SHIPPED_QUALITY)["quality"]
    previous = quality_model(PREVIOUS_QUALITY)["quality"]
    chat, code, base_chat, base_code = ours["requests"], ours["code-tasks"], base_q["requests"], base_q["code-tasks"]
    he = trained(f"evaluate-humaneval-{SHIPPED}")
    return (
        f"On 48 plain chat requests no training run saw (greedy, 128 tokens), the shipped adapter's answers collapse "
        f"into a loop {chat['collapsed']} times (base {base_chat['collapsed']}, the adapter it replaced "
        f"{previous['requests']['collapsed']}), their distinct 3-grams are "
        f"{chat['distinct_3grams'] / base_chat['distinct_3grams']:.2f}x the base's and the base model's NLL of them "
        f"{chat['base_nll'] / base_chat['base_nll']:.2f}x its NLL of its own (bars: 3 points, 0.9x, 1.2x). On 32 code "
        f"requests run against their tests it passes {code['code_passed']} (base {base_code['code_passed']}, the "
        f"adapter before {previous['code-tasks']['code_passed']}) and {code['collapsed']} of its answers loop (base "
        f"{base_code['collapsed']}); distinct 3-grams {code['distinct_3grams'] / base_code['distinct_3grams']:.2f}x, "
        f"NLL {code['base_nll'] / base_code['base_nll']:.2f}x. HumanEval's canonical solutions: "
        f"{he.canonical_ratio:.3f}x the base's NLL. The price of keeping the base's answers is speed: adapters "
        f"anchored less to the base accepted more tokens per forward with answers that looped. Every adapter side by "
        f"side: {page.ref(f'{QUALITY_FRONT}/quality.md')} and {page.ref(f'{QUALITY_FRONT}/quality.png', 'its plot')}. "
        f"{judge_loops_sentence(page)}"
    )


@block("quality-front")
def quality_front(page: Page) -> str:
    files = ", ".join(
        page.ref(f"{QUALITY_FRONT}/{name}") for name in ("quality.json", "quality.md", "answers.json", "quality.png")
    )
    return f"{markdown_table(f'{QUALITY_FRONT}/quality.md')}\n\nFiles: {files}."


@block("demo-counts")
def demo_counts(page: Page) -> str:
    b, t = evaluation(f"evaluate-bench-prompts-{SHIPPED}")
    rows = [
        "| model | new tokens | greedy forwards | Jacobi forwards | tokens/forward | forwards saved | identical |",
        "|---|---:|---:|---:|---:|---:|:---:|",
    ]
    for label, side in (("untrained", b), ("+ Jacobi Forcing adapter", t)):
        s = side.setting("recycling")
        greedy = s["new_tokens"] - 4  # one greedy forward per token after the first, per prompt
        rows.append(
            f"| {label} | {s['new_tokens']} | {greedy} | {s['forwards']} | {s['tokens_per_forward']:.2f} | "
            f"{(1 - s['forwards'] / greedy):.1%} | {'yes' if s['identical_to_greedy'] else 'no'} |"
        )
    return "\n".join(rows) + (
        f"\n\nFile: {page.ref(f'{JF}/evaluate-bench-prompts-{SHIPPED}.json')} (the same prompts and setting, "
        f"batched); the GPU demo's transcript: {page.ref(run_folder('gpu-first') + '/demo-batch1.md')}."
    )


TRAINED_FURTHER = [  # (label in the table, name in the quality study, evaluation of the 48 other held-out prompts)
    (f"shipped {shipped_when(PREVIOUS)} (step 250)", PREVIOUS_QUALITY, "evaluate-heldout48-shipped"),
    ("trained further, step 150", "base-scale-more-step150", "evaluate-heldout48-base-scale-more-step150"),
    ("trained further, step 300", "base-scale-more-step300", "evaluate-heldout48-base-scale-more-step300"),
    ("KL x7 anchor, step 250", "base-scale-kl7-step250", "evaluate-heldout48-base-scale-kl7-step250"),
    ("KL x5 anchor, step 250", "base-scale-kl5-step250", "evaluate-heldout48-base-scale-kl5-step250"),
]


@block("trained-further")
def trained_further(page: Page) -> str:
    """The adapter shipped before the CPU campaign's against itself trained on and against weaker anchors: acceptance
    at the shipped default's setting on prompts no other figure uses, beside every quality count of the study."""
    rows = [
        "| adapter | block 8 + pool 4 tokens/forward, 48 other held-out prompts | their distinct 3-grams | base NLL of "
        "their answers | plain / 2 blocks + recycling tokens/forward (quality study) | loops: chat / code | "
        "code passed | quality bars met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    # the base's side of every evaluation is the same model on the same prompts: the first file's stands for all
    models = [("base (untrained)", "base", base(TRAINED_FURTHER[0][2]))]
    models += [(label, name, trained(evaluated)) for label, name, evaluated in TRAINED_FURTHER]
    for label, name, side in models:
        speed = " / ".join(quality_speed(name, setting, 2).split()[0] for setting in ("plain", "both"))
        rows.append(
            f"| {label} | {side.tpf('recycling', 2)} ({side.counts('recycling')}) | {side.distinct:.3f} | "
            f"{side.reference_nll:.3f} | {speed} | {_loops(name)} | "
            f"{quality_model(name)['quality']['code-tasks']['code_passed']} | "
            f"{'-' if name == 'base' else _bars_met(name)} |"
        )
    files = ", ".join(page.ref(f"{JF}/{evaluated}.json") for _, _, evaluated in TRAINED_FURTHER)
    return "\n".join(rows) + f"\n\nFiles: {files}, {page.ref(f'{QUALITY_FRONT}/quality.json')}."


def _loops(name: str) -> str:
    q = quality_model(name)["quality"]
    return f"{q['requests']['collapsed']} / {q['code-tasks']['collapsed']}"


def _bars_met(name: str) -> str:
    """`met of all` over both request sets, as the study's table counts them per set (its last column)."""
    met = total = 0
    for line in markdown_table(f"{QUALITY_FRONT}/quality.md").splitlines():
        if line.startswith(f"| {name} |"):
            done, _, of = line.rstrip(" |").rsplit("|", 1)[-1].strip().partition(" of ")
            met, total = met + int(done), total + int(of)
    return f"{met} of {total}"


QUALITY_HUMANEVAL = "quality-cpu/humaneval/quality.json"
"""`quality-humaneval`: the base, the shipped adapter and the one before it on HumanEval's 164 problems as users ask."""


@block("quality-humaneval-loops")
def quality_humaneval_loops(page: Page) -> str:
    """The README's clause: the shipped adapter's HumanEval loops against the base's, with the file."""
    if not (RESULTS / QUALITY_HUMANEVAL).is_file():
        return "not measured yet"
    models = {m["name"]: m["quality"]["humaneval"] for m in load(QUALITY_HUMANEVAL)["models"]}
    return (
        f"{models[SHIPPED]['collapsed']} of {models['base']['answers']} answers loop against the base's "
        f"{models['base']['collapsed']}; {page.ref(QUALITY_HUMANEVAL)}"
    )
