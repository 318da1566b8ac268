"""The shipped recipes parse into the settings their steps expect, so they cannot rot silently."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from accelerate.commands.config.config_args import ClusterConfig
from trl import ModelConfig, TrlParser

from hf_jacobi import JacobiForcingConfig
from hf_jacobi.cli.collect import CollectArguments
from hf_jacobi.cli.evaluate import EvaluateArguments
from hf_jacobi.cli.recipe_args import parse_step_arguments
from hf_jacobi.cli.train import TrainScriptArguments

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
STEPS = {
    "collect": (CollectArguments, ModelConfig),
    "train": (TrainScriptArguments, JacobiForcingConfig, ModelConfig),
    "evaluate": (EvaluateArguments, ModelConfig),
}


def recipe_files():
    return sorted(p for p in RECIPES.glob("*/jacobi_forcing/*.yaml"))


def test_every_model_has_collect_and_train_steps():
    folders = {p.parent.parent.name for p in recipe_files()}
    assert folders == {"smollm2-135m", "qwen2.5-coder-7b"}
    for folder in folders:
        names = {p.stem.split("_")[0] for p in (RECIPES / folder / "jacobi_forcing").glob("*.yaml")}
        assert {"collect", "train"} <= names


@pytest.mark.parametrize("path", recipe_files(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_recipe_parses(path):
    step = path.stem.split("_")[0]
    # TrainingArguments refuses bf16 on a machine without a GPU unless told to run on the CPU
    extra = ["--use_cpu", "true"] if step == "train" else []
    parsed = parse_step_arguments(step, STEPS[step], ["--config", str(path), *extra])  # what the step runs
    keys = set(yaml.safe_load(path.read_text()))
    fields = {f for p in parsed for f in vars(p)}
    assert keys <= fields, f"unknown keys {keys - fields}"
    if step == "train":
        assert parsed[1].noise_schedule == "progressive"


def test_qwen_rounds_follow_the_paper():
    folder = RECIPES / "qwen2.5-coder-7b" / "jacobi_forcing"
    load = lambda name: yaml.safe_load((folder / name).read_text())  # noqa: E731
    r1, r2 = load("train_round1.yaml"), load("train_round2.yaml")
    assert load("collect_round1.yaml")["block_size"] == 16 and load("collect_round2.yaml")["block_size"] == 32
    assert (r1["noise_window"], r2["noise_window"]) == (16, 16)
    assert load("collect_round2.yaml")["model_name_or_path"] == r1["output_dir"] == r2["model_name_or_path"]
    assert r2["trajectories"] == load("collect_round2.yaml")["output_dir"]
    for r in (r1, r2):
        assert (r["learning_rate"], r["adam_beta2"], r["weight_decay"], r["lr_scheduler_type"]) == (
            1e-5,
            0.95,
            0.0,
            "cosine",
        )


@pytest.mark.parametrize("name", ["single_gpu", "multi_gpu", "fsdp", "deepspeed_zero3"])
def test_accelerate_configs_load(name):
    config = ClusterConfig.from_yaml_file(RECIPES / "accelerate_configs" / f"{name}.yaml")
    assert config.mixed_precision == "bf16"


def test_steps_default_to_the_embedded_model(monkeypatch):
    """Like `hf-jacobi generate`, collect / train / evaluate without --model_name_or_path use the embedded model."""
    from hf_jacobi.cli import recipe_args as scripts

    seen = {}
    monkeypatch.setattr(scripts, "load_model", lambda name, **kwargs: seen.setdefault("name", name))
    scripts.load_model_and_tokenizer(ModelConfig())
    assert seen["name"] == "embedded"


def test_named_sources_in_recipes_exist():
    from hf_jacobi.data.prompts import PROMPT_SOURCES

    for path in recipe_files():
        recipe = yaml.safe_load(path.read_text())
        named = recipe.get("trajectory_prompts") or []
        named = [named] if isinstance(named, str) else named
        for source in [recipe.get("prompts"), recipe.get("heldout_prompts"), *named]:
            if source is not None and "/" not in source and "." not in source:
                assert source in PROMPT_SOURCES, f"{path}: unknown prompt source {source!r}"


def test_resume_last_skips_a_checkpoint_killed_while_saving(tmp_path, caplog):
    from hf_jacobi.cli.train import resolve_checkpoint

    for step, complete in ((3, True), (6, True), (9, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    assert resolve_checkpoint(str(tmp_path), "last") == str(tmp_path / "checkpoint-6")
    assert resolve_checkpoint(str(tmp_path), "true") == str(tmp_path / "checkpoint-6")
    assert "checkpoint-9: it has no trainer_state.json" in caplog.text
    assert resolve_checkpoint(str(tmp_path), None) is None
    assert resolve_checkpoint(str(tmp_path), str(tmp_path / "checkpoint-3")) == str(tmp_path / "checkpoint-3")
    assert resolve_checkpoint(str(tmp_path / "empty"), "last") is None
    with pytest.raises(ValueError, match="is not a folder"):
        resolve_checkpoint(str(tmp_path), str(tmp_path / "nope"))


def committed_training_sets():
    """Train recipes whose trajectories are committed folders in the repo (the others collect theirs first)."""
    root = RECIPES.parent
    for path in recipe_files():
        recipe = yaml.safe_load(path.read_text())
        folders = recipe.get("trajectories")
        folders = [folders] if isinstance(folders, str) else folders
        if path.stem.startswith("train") and folders and all((root / f).is_dir() for f in folders):
            yield path


@pytest.mark.parametrize("path", list(committed_training_sets()), ids=lambda p: p.name)
def test_committed_recipes_train_on_committed_trajectories(path, monkeypatch):
    """A recipe that trains on the repo's trajectory folders finds every prompt it names there, and no other."""
    monkeypatch.chdir(RECIPES.parent)
    args = TrlParser(STEPS["train"]).parse_args_and_config(args=["--config", str(path), "--use_cpu", "true"])[0]
    counts = args.num_trajectory_prompts
    assert args.trajectory_prompts is not None and counts is not None, "a committed recipe names its prompts"
    assert len(args.load()) == sum(counts)


def _archived(path: str) -> bool:
    """Whether `path` left the working tree with a manifest entry that `restore-data` brings back."""
    manifest = json.loads((RECIPES / "smollm2-135m" / "data" / "ARCHIVED.json").read_text(encoding="utf-8"))
    return any(path == e["path"] or path.startswith(e["path"].rstrip("/") + "/") for e in manifest["entries"])


REPRODUCE_TARGETS = ["reproduce-rounds12", "reproduce-round3-collect", "reproduce-round3-train", "reproduce-round4"]


@pytest.mark.parametrize("target", REPRODUCE_TARGETS)
def test_each_reproduction_target_compares_with_committed_outputs(target, tmp_path):
    """The `reproduce-*` targets of lab/Makefile check a stage against the committed outputs: every
    reference one names must be in the repo, and every re-run output it compares must be written under REPRO (never
    over the committed files)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    root = RECIPES.parent
    repro = tmp_path / "repro"
    # -n prints the commands; the stamp file's rule is told up to date so that a fresh clone does not set up first
    printed = subprocess.run(
        [
            "make",
            "-n",
            "-f",
            "lab/Makefile",
            "-o",
            ".venv/.hf_jacobi-installed",
            target,
            f"REPRO={repro}",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.replace("\\\n", " ")
    compares = [line for line in printed.splitlines() if " compare " in line and " -m lab " in line]
    assert len(compares) == 1, printed
    words = shlex.split(compares[0])
    paths = words[words.index("compare") + 1 : words.index("--output")]
    assert paths and len(paths) % 2 == 0
    for reproduced, reference in zip(paths[::2], paths[1::2], strict=True):
        assert reproduced.startswith(str(repro)), reproduced
        assert (root / reference).exists() or _archived(reference), (
            f"{target} compares with {reference}, which is not committed"
        )
    # and the stage itself writes where it compares
    assert str(repro) in printed.split(compares[0])[0]


@pytest.mark.parametrize("step", sorted(STEPS))
def test_steps_take_every_flag_dashed_as_the_other_commands_do(step, tmp_path):
    """The recipe steps take each flag in the dashed spelling of the argparse commands (`--max-new-tokens`) as well as
    in the underscored one, which is also the key of a YAML recipe (`max_new_tokens:`)."""
    parser = TrlParser(STEPS[step])
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--") and "_" in option:
                assert option.replace("_", "-") in action.option_strings, f"{step}: {option} has no dashed spelling"
    out = str(tmp_path)
    dashed = {
        "collect": ["--max-new-tokens", "7", "--no-chat-template", "--model-name-or-path", "m"],
        "train": ["--noise-window", "4", "--base-kl-weight", "0.5", "--use-cpu", "true", "--output-dir", out],
        "evaluate": ["--max-new-tokens", "5", "--output-file", "out.json", "--settings", "plain"],
    }[step]
    parsed = {name: value for p in parser.parse_args_and_config(args=dashed) for name, value in vars(p).items()}
    expected = {
        "collect": {"max_new_tokens": 7, "chat_template": False, "model_name_or_path": "m"},
        "train": {"noise_window": 4, "base_kl_weight": 0.5, "use_cpu": True, "output_dir": out},
        "evaluate": {"max_new_tokens": 5, "output_file": "out.json", "settings": ["plain"]},
    }[step]
    assert {name: parsed[name] for name in expected} == expected


def test_the_working_tree_stays_light():
    """What is committed is what ships and what it was trained on: the tracked files stay under 50 MB (a user clones
    them to try `make demo`), and no resume checkpoint (optimizer states, checkpoint-N folders) is tracked."""
    root = RECIPES.parent
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    paths = [root / f.decode() for f in files if f]
    total = sum(p.stat().st_size for p in paths if p.is_file())
    assert total < 50e6, f"the tracked files hold {total / 1e6:.1f} MB; heavy data leaves with data/ARCHIVED.json"
    checkpoints = [str(p.relative_to(root)) for p in paths if p.name == "optimizer.pt" or "/checkpoint-" in str(p)]
    assert not checkpoints, f"resume checkpoints are tracked: {checkpoints[:5]}"
