"""The CPU campaign: its collection rate, the padding of its training batches, and the scaling curve of
its judged runs (what `lab/campaigns/cpu_campaign.py` writes to docs/results/campaign-cpu/)."""

from __future__ import annotations

from .core import RESULTS, Page, bench_rows, block, labels, load, markdown_table, run_folder, run_machine


def _collections() -> list[tuple[str, str, str]]:
    """The campaign's own measurements of both collection methods on the same 64 prompts, in the order labels.json
    lists them: `(date, code)` (the date its file started on), its file, the machine it ran on (README beside them)."""
    return [
        (f"{load(c['file'])['started'][:10]}, {c['code']}", c["file"], c["machine"])
        for c in labels()["campaign_collections"]
    ]


PADDING = "campaign-cpu/padding.json"
PHASES = "campaign-cpu/collection-rate"
"""`lab/benchmarks/collection_rate.py` runs, named `<sample>-<commit>[-check]-<k>.json` (README beside them)."""
CODE = {
    "85cec3e": "before",
    "3b095c3": "first wrong token from the answer, `greedy_choice`, reserved cache",
    "f0958db": "the same code (the benchmark's `--sample` added)",
    "2c3d746": "and prompts prefilled in runs of like length, groups by prompt length",
    "3038484": "2c3d746's method",
}
"""The commits the runs measured, in order, and what each changed in the parallel method."""


@block("campaign-collection-rate")
def campaign_collection_rate(page: Page) -> str:
    """Both collection methods on the campaign's same 64 prompts in bfloat16, each measurement, and the float32
    check of the newest."""
    lines = [
        "| measured (bfloat16, one batch of 64, 128 tokens, block 16) | machine | method | answer tokens | seconds "
        "| tokens/s |",
        "|---|---|---|---:|---:|---:|",
    ]
    for date, path, machine in _collections():
        measured = load(path)["stages"]["trajectories"]["measured"]
        for method in ("sequential", "parallel"):
            row = measured[method]
            lines.append(
                f"| {date} ({page.ref(path)}) | {machine} | {method} | {row['tokens']:,} | {row['seconds']:.0f} | "
                f"{row['tokens_per_s']:.1f} |"
            )
    newest = _collections()[-1][1]
    check = load(newest)["stages"]["trajectories"]["float32_check"]
    par = check["parallel"]
    return "\n".join(lines) + (
        f"\n\nFloat32 check of the newest on {check['batch_size']} prompts: Jacobi answers identical to greedy "
        f"{check['jacobi_answers_equal_greedy']}, argmax disagreements of the parallel method {par['disagreements']}, "
        f"exact: {check['exact']}."
    )


@block("campaign-collection-phases")
def campaign_collection_phases(page: Page) -> str:
    """The parallel method's two phases at each commit, on both samples, every run."""
    lines = [
        "| sample | CPU | code | greedy s | iterations s | query tokens per answer token | tokens/s | file |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    order = list(CODE)
    reports = [(path.name, load(f"{PHASES}/{path.name}")) for path in (RESULTS / PHASES).glob("*.json")]
    reports.sort(key=lambda item: (item[1]["sample"], order.index(item[1]["commit"]), item[0]))
    for name, report in reports:
        m = report["measured"]
        code = f"{report['commit']}: {CODE[report['commit']]}"
        if report["check_first_wrong"]:
            code += ", `--check-first-wrong`"
        per_token = m["query_tokens_per_answer_token"]
        lines.append(
            f"| {report['sample']} | {report['cpu']} | {code} | {m['greedy_seconds']:.1f} | {m['iteration_seconds']:.1f} | "
            f"{'not counted' if per_token is None else per_token} | {m['tokens_per_s']:.1f} | {page.ref(f'{PHASES}/{name}')} |"
        )
    return "\n".join(lines)


@block("campaign-padding")
def campaign_padding(page: Page) -> str:
    """The tokens a training epoch's batches pad to, random against length-grouped batches."""
    report = load(PADDING)
    lines = [
        f"| batches of {report['batch_size']} rows ({report['accumulation']} a step) | tokens the forwards run over "
        "| over the rows' own |",
        "|---|---:|---:|",
    ]
    for name, label in (("random", "random (transformers' default)"), ("group_by_length", "grouped by length")):
        row = report[name]
        lines.append(f"| {label} | {row['padded_tokens']:,} | {row['padded_over_real']:.3f}x |")
    return "\n".join(lines) + (
        f"\n\n{report['rows']:,} rows ({report['rows'] - report['anchor_texts']:,} trajectories of the first "
        f"{report['trajectories']:,} prompts that hold a block, {report['anchor_texts']:,} anchor texts), {report['real_tokens']:,} tokens of their own: grouped batches run "
        f"{report['random_over_grouped']:.2f}x fewer token-forwards an epoch. File: {page.ref(PADDING)}."
    )


SCALING = "campaign-cpu/scaling"


@block("campaign-scaling")
def campaign_scaling(page: Page) -> str:
    """The scaling curve as the judge step wrote it: its table (scaling.md) and its plot, so far as it has grown."""
    curve = load(f"{SCALING}.json")
    runs = [p for p in curve["points"] if p["variant"] != "base"]
    sentence = (RESULTS / f"{SCALING}.md").read_text(encoding="utf-8").strip().splitlines()[-1]
    return (
        f"{markdown_table(f'{SCALING}.md')}\n\n{sentence} Campaign runs judged so far: {len(runs)}.\n\n"
        f"![the scaling curve]({page.url(f'{SCALING}.png')})\n\n"
        f"Files: {page.ref(f'{SCALING}.json')}, {page.ref(f'{SCALING}.md')}, {page.ref(f'{SCALING}.png')}."
    )


def _judge_loops() -> tuple[int, int, int, int]:
    """Loops on the campaign's judging requests of the base, of the shipped adapter (the campaign's SHIP_RUN) and of
    the adapter it replaced (the curve's reference, judged as `shipped` while it was), and how many requests: a larger
    held-out set of plain requests than the 48, where the adapter before loops more than the base's share + 3 points
    allows, which a user should read beside its speed."""
    curve = load(f"{SCALING}.json")
    base = next(p for p in curve["points"] if p["variant"] == "base")
    shipped = next((p for p in curve["points"] if p["name"] == SHIP_RUN), None)
    previous = curve["reference"]
    if shipped is None or previous is None or previous.get("judge_loops") is None:
        raise ValueError(
            f"{SCALING}.json lacks the judge of {SHIP_RUN} or of the adapter it replaced: run "
            f"cpu_campaign.py judge --run {SHIP_RUN} (and --run shipped, with that adapter's weights)"
        )
    (base_loops, total), (shipped_loops, _) = base["judge_loops"], shipped["judge_loops"]
    return base_loops, shipped_loops, previous["judge_loops"][0], total


def judge_loops_sentence(page: Page) -> str:
    """The quality summary's sentence on the judging requests (the README's, the results page's, the model card's)."""
    base_loops, shipped_loops, previous_loops, total = _judge_loops()
    within = shipped_loops / total <= base_loops / total + 0.03
    return (
        f"On {total} other held-out plain requests (the CPU campaign's judging set) its answers loop {shipped_loops} "
        f"times against the base's {base_loops}, {'within' if within else 'more than'} the 3 points that bar allows "
        f"(the adapter it replaced: {previous_loops}; {page.ref(f'{SCALING}.json')})."
    )


def glance_loops_row(page: Page) -> str:
    """The README glance's row of loops on the campaign's judging requests, the base's and the shipped adapter's."""
    base_loops, shipped_loops, previous_loops, total = _judge_loops()
    return (
        f"| answers collapsed into a loop, {total} other held-out plain requests (the CPU campaign's judging set, "
        f"128 tokens; the adapter shipped before: {previous_loops}) | {base_loops} | {shipped_loops} | "
        f"{page.ref(f'{SCALING}.json')} |"
    )


@block("campaign-best-sentence")
def campaign_best_sentence(page: Page) -> str:
    """The README's sentence on the campaign: its best point that meets every quality bar (most tokens per forward with
    plain Jacobi on the `packages` prompts: the adapter that shipped) beside the adapter shipped before it, and the
    curve's variant over its sizes with its trend, so that a reader sees at once whether data is the lever and how
    far the targets are."""
    curve = load(f"{SCALING}.json")
    kept = [p for p in curve["points"] if p["variant"] != "base" and p["bars"]["met"] == p["bars"]["of"]]
    if not kept:
        raise ValueError(f"{SCALING}.json has no campaign run that meets every quality bar yet")
    best = max(kept, key=lambda p: p["tokens_per_forward"]["plain"])
    shipped = curve["reference"]
    variant = best["variant"]
    sizes = sorted((p for p in curve["points"] if p["variant"] == variant), key=lambda p: p["prompts"])
    trend = (curve["trends"].get(variant) or {}).get("plain")
    along = " / ".join(f"{p['tokens_per_forward']['plain']:.3f}" for p in sizes)
    counts = " / ".join(f"{p['prompts']:,}" for p in sizes)
    text = (
        f"Its best point that meets every quality bar, `{best['name']}` ({best['prompts']:,} prompts, "
        f"{best['steps']} steps of {best['rows_per_step']} rows), loops on {best['judge_loops'][0]} of the "
        f"{best['judge_loops'][1]} judging requests (the adapter shipped before {shipped['judge_loops'][0]}, the bar "
        f"allows the base's share + 3 points) and accepts {best['tokens_per_forward']['plain']:.3f} tokens per forward "
        f"with plain Jacobi on the `packages` prompts (the adapter before {shipped['tokens_per_forward']['plain']:.3f}); "
        f"`{variant}` over {counts} prompts: {along}"
    )
    if trend:
        text += (
            f", {trend['per_doubling']:+.3f} per doubling of the data, against a target of {curve['targets']['plain']}"
        )
    return f"{text} ({page.ref(f'{SCALING}.json')})."


SHIP_RUN = "lora-r16-kl30-n9999"
SHIP = run_folder("campaign-ship")
"""`make -f recipes/smollm2-135m/Makefile cpu-campaign-ship`: the candidate exported with the shipped Jacobi defaults,
its quality by the package guard's protocol, and both adapters timed in the same rounds (README beside them). The
candidate ships since `cpu-campaign-swap`; the folders named `shipped` hold the adapter it replaced."""
SHIP_DEFAULT = "Jacobi recycling n=8"
"""The shipped default (block 8 + pool 4) as the bench's explicit row: what a plain call runs on a CPU."""


def _ship_bench(dtype: str, weights: str) -> str:
    """The bench.json of `weights` ("candidate", or "shipped": the adapter the package shipped then) in `dtype`, as the
    recipe names its folders."""
    return f"{SHIP}/compiled-{dtype}-{weights}/bench.json"


@block("campaign-ship")
def campaign_ship(page: Page) -> str:
    """The campaign's best point against the adapter the package shipped then, at the shipped default, wall time in
    both dtypes on the same held-out prompts in the same rounds, and their answers by the quality guard's protocol:
    what the choice to ship it rested on."""
    lines = [
        "| adapter | dtype | tokens/forward | tok/s (median of 2 rounds) | vs greedy (`generate`) | vs compiled greedy "
        "| identical to greedy in its dtype | file |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for dtype in ("float32", "bfloat16"):
        for weights, label in (("candidate", f"`{SHIP_RUN}` (shipped since)"), ("shipped", "the adapter before")):
            path = _ship_bench(dtype, weights)
            row = bench_rows(path)[SHIP_DEFAULT]
            lines.append(
                f"| {label} | {dtype} | {row['tokens_per_forward']:.2f} | {row['tokens_per_s']:.1f} | "
                f"{row['speedup_vs_ar']:.2f}x | {row['speedup_vs_best_ar']:.2f}x | {row['identical']}/{row['samples']} | "
                f"{page.ref(path, 'bench.json')} |"
            )
    quality = load(f"{SHIP}/quality/quality.json")
    models = {m["name"]: m["quality"] for m in quality["models"]}
    ours, base_q = models[SHIP_RUN], models["base"]
    chat, code = ours["requests"], ours["code-tasks"]
    return "\n".join(lines) + (
        f"\n\n{load(_ship_bench('float32', 'candidate'))['meta']['machine']}; batch 1, 128 new tokens, `packages` test prompts 33-40. By the quality guard's protocol "
        f"(float32, batch 8) its answers loop on {chat['collapsed']} of the 48 chat requests (base "
        f"{base_q['requests']['collapsed']}) and {code['collapsed']} of the 32 code requests (base "
        f"{base_q['code-tasks']['collapsed']}), and {code['code_passed']} code answers pass their tests (base "
        f"{base_q['code-tasks']['code_passed']}) ({page.ref(f'{SHIP}/quality/quality.json')})."
    )


def _ship_rows(dtype: str) -> tuple[dict, dict]:
    """The shipped default's bench row of the candidate and of the adapter shipped then, in `dtype`."""
    return tuple(bench_rows(_ship_bench(dtype, weights))[SHIP_DEFAULT] for weights in ("candidate", "shipped"))


@block("campaign-ship-sentence")
def campaign_ship_sentence(page: Page) -> str:
    """The README's sentence on the candidate against the adapter it replaced, at the shipped default."""
    (f32, f32_shipped), (bf16, bf16_shipped) = _ship_rows("float32"), _ship_rows("bfloat16")
    return (
        f"it runs {f32['tokens_per_s'] / f32_shipped['tokens_per_s']:.2f}x the previous adapter's speed at the "
        f"shipped default (block 8 + pool 4) on 8 held-out code prompts in float32 "
        f"({f32['speedup_vs_best_ar']:.2f}x compiled greedy against {f32_shipped['speedup_vs_best_ar']:.2f}x) and "
        f"{bf16['tokens_per_s'] / bf16_shipped['tokens_per_s']:.2f}x in bfloat16 ({bf16['speedup_vs_best_ar']:.2f}x "
        f"against {bf16_shipped['speedup_vs_best_ar']:.2f}x), on a {run_machine('campaign-ship')} "
        f"({page.ref(_ship_bench('float32', 'candidate'), 'bench.json')})"
    )


def glance_ship_row(page: Page) -> str:
    """The README glance's CPU row: the shipped adapter at its default against compiled greedy in both dtypes, on
    the machine and prompts of the ship comparison (the eager loop, as a call with `jacobi_greedy_devices=[]` runs it
    in float32 and a plain call in bfloat16 on a CPU with bfloat16 units)."""
    (f32, _), (bf16, _) = _ship_rows("float32"), _ship_rows("bfloat16")
    return (
        f"| {run_machine('campaign-ship')}, batch 1, 8 other held-out code prompts: the shipped default (block 8 + "
        f"pool 4, dynamic cache) vs compiled greedy (static cache + `torch.compile`), float32 ({f32['identical']}/"
        f"{f32['samples']} identical) and bfloat16 ({bf16['identical']}/{bf16['samples']} identical to bfloat16 "
        f"greedy) | - | {f32['speedup_vs_best_ar']:.2f}x, {bf16['speedup_vs_best_ar']:.2f}x | "
        f"{page.ref(_ship_bench('float32', 'candidate'), 'bench.json')}, "
        f"{page.ref(_ship_bench('bfloat16', 'candidate'), 'bench.json')} |"
    )
