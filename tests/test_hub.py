"""Publishing: the rendered folder (card, generation config, custom_generate), the loop it ships running without
hf_jacobi and equal to greedy, and the push paths (CLI and trainer) against the fake Hub."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from transformers import GenerationConfig

from hf_jacobi import JacobiConfig, JacobiForcingTrainer
from hf_jacobi.card import BenchResults, CardInfo, render_model_card
from hf_jacobi.checkpoint import CUSTOM_GENERATE_DIR, decoding_sources, jacobi_generation_config
from hf_jacobi.cli import main
from hf_jacobi.hub.export import prepare_publish_folder
from hf_jacobi.hub.push import publish_checkpoint
from tiny_models import fresh_tiny_model, tiny_model, tiny_tokenizer

REPO = "acme/tiny-jacobi"
TESTS = Path(__file__).parent


def saved_checkpoint(folder: Path, family: str = "llama") -> Path:
    tiny_model(family).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    (folder / "optimizer.pt").write_bytes(b"state")
    (folder / "checkpoint-3").mkdir()
    (folder / "checkpoint-3" / "trainer_state.json").write_text("{}")
    return folder


def bench_json(folder: Path) -> Path:
    rows = [
        {"setting": "AR (generate)", "kind": "ar", "block_size": None, "variant": None, "samples": 2, "score": 0.5,
         "tokens_per_forward": 1.0, "tokens_per_s": 10.0, "decode_tokens_per_s": 11.0, "speedup_vs_ar": 1.0,
         "speedup_vs_best_ar": 1.0, "identical": 2},
        {"setting": "Jacobi plain n=16", "kind": "jacobi", "block_size": 16, "variant": "plain", "samples": 2,
         "score": 0.5, "tokens_per_forward": 2.5, "tokens_per_s": 21.0, "decode_tokens_per_s": 24.0,
         "speedup_vs_ar": 2.1, "speedup_vs_best_ar": 2.1, "identical": 2},
    ]  # fmt: skip
    meta = {"machine": "TestGPU", "command": "hf-jacobi bench --limit 2", "task": "humaneval", "metric": "pass@1",
            "batch_size": 1, "max_new_tokens": 64}  # fmt: skip
    path = folder / "bench.json"
    path.write_text(json.dumps({"meta": meta, "summary": rows, "notes": []}))
    (folder / "bench.png").write_bytes(b"\x89PNG fake")
    return path


# --- rendering -------------------------------------------------------------------------------------------------------


def test_generation_config_carries_jacobi_defaults_and_rejects_bad_ones():
    base = GenerationConfig(eos_token_id=2, jacobi_num_blocks=2)
    config = jacobi_generation_config(base, JacobiConfig.from_generation_config(base, ngram_pool_size=4))
    assert config.decoding == "jacobi" and config.eos_token_id == 2 and not config._from_model_config
    assert (config.jacobi_block_size, config.jacobi_num_blocks, config.jacobi_ngram_pool_size) == (16, 2, 4)
    assert not hasattr(base, "decoding")  # the caller's config is left alone
    with pytest.raises(ValueError, match="jacobi_block_size must be an integer >= 1, got 0"):
        JacobiConfig.from_generation_config(None, block_size=0)
    with pytest.raises(ValueError, match=r"Unknown Jacobi setting\(s\) \['blok_size'\]"):
        JacobiConfig.from_generation_config(None, blok_size=8)


def test_bench_results_read_back_what_bench_wrote(tmp_path):
    results = BenchResults.from_json(bench_json(tmp_path))
    assert results.plot == tmp_path / "bench.png" and results.meta["task"] == "humaneval"
    assert results.table().splitlines()[0].startswith("| setting | pass@1 | tokens/forward |")
    assert "| Jacobi plain n=16 | 50.0% | 2.50 | 21.0 | 24.0 | 2.10x | 2.10x | 2/2 |" in results.table()
    assert results.description().startswith(
        "Measured on TestGPU with `hf-jacobi bench --limit 2`: humaneval, 2 samples"
    )
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="is not a hf-jacobi bench JSON file"):
        BenchResults.from_json(tmp_path / "other.json")


def test_card_says_what_a_user_needs(tmp_path):
    card = render_model_card(
        CardInfo(
            repo_id=REPO,
            base_model="Qwen/Qwen2.5-Coder-7B-Instruct",
            jacobi=JacobiConfig(block_size=32),
            bench=BenchResults.from_json(bench_json(tmp_path)),
            recipe="  - lr 1e-5",
            license="mit",
        )
    )
    text = str(card)
    assert card.data.base_model == "Qwen/Qwen2.5-Coder-7B-Instruct" and card.data.library_name == "transformers"
    assert "jacobi-forcing" in card.data.tags and card.data.license == "mit"
    for expected in (
        "| Jacobi plain n=16 | 50.0% | 2.50 |",
        "Measured on TestGPU",
        f'custom_generate="{REPO}",\n    trust_remote_code=True,',
        f'model_id = "{REPO}"',
        "AutoModelForCausalLM.from_pretrained(model_id)",
        "| `jacobi_block_size` | 32 |",
        "lr 1e-5",
        "arXiv:2512.14681",
        "mit",
    ):
        assert expected in text, expected
    adapter = str(render_model_card(CardInfo(repo_id=REPO, base_model="org/base", adapter=True)))
    assert 'base_model = "org/base"\nadapter = "acme/tiny-jacobi"' in adapter
    assert "PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_model), adapter)" in adapter
    assert "Not measured for this checkpoint yet" in adapter
    assert "library_name: peft" in adapter


@pytest.mark.parametrize("adapter", [True, False])
def test_the_cards_code_is_as_ruff_formats_it_whatever_the_names(adapter):
    """Cards land in the repository (the CPU campaign commits each finished run's) and `ruff format --check .`, part of
    the test command, formats the Python blocks of Markdown files: a card's code must not depend on its names'
    lengths to pass."""
    long_path = "/root/.cache/hf_jacobi/smollm2-135m-instruct"
    card = str(
        render_model_card(CardInfo(repo_id="lora-r16-n2000-" + "x" * 40, base_model=long_path, adapter=adapter))
    )
    blocks = [block.split("\n", 1)[1] for block in card.split("```python")[1:]]
    assert blocks
    for block in blocks:
        code = block.split("```", 1)[0]
        result = subprocess.run(
            [sys.executable, "-m", "ruff", "format", "--diff", "--stdin-filename", "card.py", "-"],
            input=code,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout


def test_dry_run_renders_a_complete_folder_without_touching_the_source(tmp_path):
    source = saved_checkpoint(tmp_path / "ckpt")
    before = sorted(p.relative_to(source) for p in source.rglob("*"))
    out = tmp_path / "rendered"
    recipe = tmp_path / "train.yaml"
    recipe.write_text("learning_rate: 1.0e-5\n")
    result = publish_checkpoint(
        source,
        REPO,
        base_model="org/base",
        recipe_files=[recipe],
        bench_json=bench_json(tmp_path),
        jacobi=JacobiConfig(block_size=8, ngram_pool_size=2),
        output_dir=out,
        dry_run=True,
    )
    assert result.url is None and result.folder == out
    assert sorted(p.relative_to(source) for p in source.rglob("*")) == before
    names = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "README.md"} <= names
    assert {"bench.json", "bench.png", "train.yaml", f"{CUSTOM_GENERATE_DIR}/requirements.txt"} <= names
    assert not {"optimizer.pt", "checkpoint-3/trainer_state.json"} & names
    for source_file in decoding_sources():
        assert (out / CUSTOM_GENERATE_DIR / source_file.name).read_bytes() == source_file.read_bytes()
    saved = json.loads((out / "generation_config.json").read_text())
    assert saved["decoding"] == "jacobi" and saved["jacobi_block_size"] == 8 and saved["jacobi_ngram_pool_size"] == 2
    assert "jacobi_verify_size" not in saved  # unset: it follows the pool size when decoding
    assert result.jacobi == JacobiConfig(block_size=8, ngram_pool_size=2)
    readme = (out / "README.md").read_text()
    for name, value in saved.items():  # the card lists exactly what generation_config.json carries
        if name.startswith("jacobi_"):
            assert f"| `{name}` | {value} |" in readme, name
    assert "| Jacobi plain n=16 | 50.0% | 2.50 |" in readme and "`hf-jacobi bench --limit 2`" in readme
    assert "learning_rate: 1.0e-5" in readme


def test_push_refuses_bad_input(tmp_path):
    with pytest.raises(ValueError, match="is not a saved checkpoint"):
        publish_checkpoint(tmp_path, REPO, output_dir=tmp_path / "x", dry_run=True)
    source = saved_checkpoint(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="dry run keeps nothing without --output-dir"):
        publish_checkpoint(source, REPO, dry_run=True)
    with pytest.raises(FileNotFoundError, match="bench results"):
        publish_checkpoint(source, REPO, bench_json=tmp_path / "none.json", output_dir=tmp_path / "y", dry_run=True)
    GenerationConfig(jacobi_block_size=-1).save_pretrained(source)  # a bad default the checkpoint carries
    with pytest.raises(ValueError, match="jacobi_block_size must be an integer >= 1"):
        publish_checkpoint(source, REPO, output_dir=tmp_path / "z", dry_run=True)


# --- custom_generate: the shipped loop, without hf_jacobi ------------------------------------------------------------

CHECK_WITHOUT_HF_JACOBI = textwrap.dedent("""
    import sys, torch
    sys.modules["hf_jacobi"] = None  # importing hf_jacobi now fails: the folder must carry everything
    sys.path.insert(0, {tests!r})
    from tiny_models import random_prompts
    from transformers import AutoModelForCausalLM
    folder = {folder!r}
    ids, mask = random_prompts(3, 10, seed=1)
    plain = AutoModelForCausalLM.from_pretrained(folder)
    greedy = plain.generate(input_ids=ids, attention_mask=mask, max_new_tokens=40, do_sample=False)
    by_repo = plain.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=40, do_sample=False,
        custom_generate=folder, trust_remote_code=True, return_dict_in_generate=True,
    )
    assert torch.equal(by_repo.sequences, greedy), "custom_generate= differs from greedy"
    assert by_repo.forward_passes.tolist() and max(by_repo.forward_passes.tolist()) < 39, by_repo.forward_passes
    loaded = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    jacobi = loaded.generate(ids, attention_mask=mask, max_new_tokens=40, do_sample=False, return_dict_in_generate=True)
    assert torch.equal(jacobi.sequences, greedy), "from_pretrained(trust_remote_code=True) differs from greedy"
    assert torch.equal(jacobi.forward_passes, by_repo.forward_passes)
    assert torch.equal(loaded.generate(ids, attention_mask=mask, max_new_tokens=40, decoding="greedy"), greedy)
    print("ok", jacobi.forward_passes.tolist())
""")


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_custom_generate_runs_without_hf_jacobi_and_equals_greedy(tmp_path, family):
    folder = tmp_path / "repo"
    tiny_model(family).save_pretrained(folder)
    prepare_publish_folder(folder, CardInfo(repo_id=REPO), JacobiConfig(block_size=4, num_blocks=2, ngram_pool_size=2))
    script = CHECK_WITHOUT_HF_JACOBI.format(tests=str(TESTS), folder=str(folder))
    env = {"HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    # the caller's thread limits go along: a child with every core's worth of torch threads beside a busy machine
    # runs many times slower (the timeout is a hang guard, not a speed check)
    env.update({name: os.environ[name] for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if name in os.environ})
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")


# --- pushing to the (fake) Hub ---------------------------------------------------------------------------------------


def test_cli_push_uploads_the_rendered_folder(tmp_path, fake_hub, capsys):
    source = saved_checkpoint(tmp_path / "ckpt")
    code = main(
        [
            "push", str(source), "--repo-id", REPO, "--base-model", "org/base", "--bench", str(bench_json(tmp_path)),
            "--block-size", "32", "--ngram-pool-size", "4", "--private", "--token", "hf_fake",
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert "pushed to" in capsys.readouterr().out
    assert fake_hub.repos[REPO].private
    files = fake_hub.files(REPO)
    assert {"README.md", "generation_config.json", "model.safetensors", "bench.json", "bench.png"} <= files.keys()
    assert files["custom_generate/generate.py"] == (decoding_sources()[0].parent / "generate.py").read_bytes()
    assert not any(name.startswith("checkpoint-") or name == "optimizer.pt" for name in files)
    config = json.loads(files["generation_config.json"])
    assert (config["decoding"], config["jacobi_block_size"], config["jacobi_ngram_pool_size"]) == ("jacobi", 32, 4)
    assert b"| `jacobi_block_size` | 32 |" in files["README.md"]


# Every setting away from its default, so that a default written in place of the checkpoint's shows.
OWN_SETTINGS = JacobiConfig(
    block_size=8,
    num_blocks=2,
    spawn_ratio=0.5,
    ngram_pool_size=4,
    verify_size=2,
    ngram_size=3,
    ngram_key_size=1,
    draft_seed=7,
)


def checkpoint_with_own_settings(folder: Path, kind: str) -> Path:
    """A checkpoint whose generation_config.json carries OWN_SETTINGS, saved the ways a user saves one: a model whose
    settings `write_to` stored (what `load_default_model(jacobi_forcing=True)` holds), one whose attributes were set by
    hand as the README shows (the file still says `_from_model_config: true`, which makes transformers drop unknown
    keys on load), and a LoRA adapter with the merged model's generation config beside it."""
    model = fresh_tiny_model("llama")
    if kind == "write_to":
        OWN_SETTINGS.write_to(model.generation_config, decoding="greedy")
    else:
        model.generation_config.decoding = "jacobi"
        for name, value in OWN_SETTINGS.to_generate_kwargs().items():
            setattr(model.generation_config, name, value)
    if kind == "adapter":
        from peft import LoraConfig, get_peft_model

        get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(folder)
        model.generation_config.save_pretrained(folder)
    else:
        model.save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kind", ["write_to", "attributes", "adapter"])
def test_cli_push_keeps_the_checkpoints_own_jacobi_settings_unless_a_flag_overrides_one(tmp_path, capsys, kind):
    source = checkpoint_with_own_settings(tmp_path / "ckpt", kind)
    if kind == "write_to":  # settings hf_jacobi stored load back with the model, not only through push
        from transformers import AutoModelForCausalLM

        loaded = AutoModelForCausalLM.from_pretrained(source).generation_config
        assert JacobiConfig.from_generation_config(loaded) == OWN_SETTINGS and loaded.decoding == "greedy"

    def pushed(name: str, *flags: str) -> dict:
        out = tmp_path / name
        assert main(["push", str(source), "--repo-id", REPO, "--dry-run", "--output-dir", str(out), *flags]) == 0
        return json.loads((out / "generation_config.json").read_text())

    # write_to leaves out what is None (static_widths here), so that the device's default keeps applying
    own = {f"jacobi_{name}": value for name, value in OWN_SETTINGS.to_dict().items() if value is not None}
    saved = pushed("plain")
    assert {k: v for k, v in saved.items() if k.startswith("jacobi_")} == own
    assert saved["decoding"] == "jacobi" and not saved["_from_model_config"]
    assert "Jacobi defaults: block_size=8, num_blocks=2, spawn_ratio=0.5, ngram_pool_size=4" in capsys.readouterr().out
    assert pushed("block", "--block-size", "4") == {**saved, "jacobi_block_size": 4}  # only what the flag names
    assert pushed("blocks", "--num-blocks", "3") == {**saved, "jacobi_num_blocks": 3}
    no_pool = {k: v for k, v in saved.items() if k != "jacobi_verify_size"}  # the pool's verify size goes with it
    assert pushed("no-pool", "--ngram-pool-size", "0") == {**no_pool, "jacobi_ngram_pool_size": 0}


def test_export_weights_keeps_the_adapters_own_jacobi_settings_unless_a_flag_overrides_one(tmp_path, capsys):
    source = checkpoint_with_own_settings(tmp_path / "adapter", "adapter")

    def exported(name: str, *flags: str) -> JacobiConfig:
        out = tmp_path / name
        assert main(["export-weights", str(source), "--output-dir", str(out), *flags]) == 0, capsys.readouterr().err
        saved = GenerationConfig.from_pretrained(out)
        assert saved.decoding == "jacobi"
        return JacobiConfig.from_generation_config(saved)

    assert exported("plain") == OWN_SETTINGS
    assert exported("block", "--block-size", "4", "--ngram-size", "2") == OWN_SETTINGS.replace(
        block_size=4, ngram_size=2
    )
    assert exported("no-pool", "--ngram-pool-size", "0") == dataclasses.replace(
        OWN_SETTINGS, ngram_pool_size=0, verify_size=None
    )
    assert exported("auto", "--cache-implementation", "auto") == OWN_SETTINGS.replace(cache_implementation="auto")
    fallback = ("cpu:float32", "cpu:bfloat16:none")
    assert exported("greedy", "--greedy-devices", *fallback) == OWN_SETTINGS.replace(greedy_devices=fallback)
    out = tmp_path / "greedy"  # an earlier export's fallback is the adapter's own; the flag alone clears it
    assert main(["export-weights", str(out), "--output-dir", str(tmp_path / "again")]) == 0
    assert JacobiConfig.from_generation_config(
        GenerationConfig.from_pretrained(tmp_path / "again")
    ).greedy_devices == (fallback)
    assert exported("nowhere", "--greedy-devices") == OWN_SETTINGS.replace(greedy_devices=())
    assert (
        main(["export-weights", str(source), "--output-dir", str(tmp_path / "bad"), "--greedy-devices", "cpu:x"]) == 1
    )
    assert "jacobi_greedy_devices entry 'cpu:x' is not understood" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    with pytest.raises(SystemExit):
        main(["export-weights", "--help"])
    assert " ".join(capsys.readouterr().out.split()).count("default: the adapter's, else") == 7
    with pytest.raises(SystemExit):
        main(["export-weights", str(source), "--cache-implementation", "paged"])
    assert "invalid choice: 'paged'" in capsys.readouterr().err


def test_push_help_says_the_checkpoints_settings_are_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["push", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--block-size", "--num-blocks", "--ngram-pool-size"):
        assert f"{flag} " in text
    assert text.count("(default: the checkpoint's, else ") == 3  # the library's default where it carries none


def test_cli_push_reports_bad_input_in_one_line(tmp_path, capsys):
    assert main(["push", str(tmp_path), "--repo-id", REPO, "--dry-run", "--output-dir", str(tmp_path / "o")]) == 1
    assert "is not a saved checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["push", str(tmp_path), "--repo-id", REPO, "--block-size", "0"])
    assert exit_info.value.code == 2


def test_trainer_push_to_hub_publishes_adapter_card_and_custom_generate(tmp_path, fake_hub):
    from peft import LoraConfig

    from hf_jacobi import collect_trajectories, load_trajectories
    from test_training import config, tiny_prompts

    model = fresh_tiny_model("llama")
    collect_trajectories(
        model, tiny_tokenizer(), tiny_prompts(2), tmp_path / "traj", block_size=4, max_new_tokens=8, progress=False
    )
    args = config(
        tmp_path / "out", max_steps=1, push_to_hub=True, hub_model_id=REPO, hub_token="hf_fake", hub_strategy="end"
    )
    trainer = JacobiForcingTrainer(
        model,
        args=args,
        train_dataset=load_trajectories(tmp_path / "traj"),
        processing_class=tiny_tokenizer(),
        peft_config=LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"),
    )
    trainer.train()
    trainer.push_to_hub()
    files = fake_hub.files(REPO)
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "generation_config.json"} <= files.keys()
    assert "custom_generate/loop.py" in files
    config_json = json.loads(files["generation_config.json"])
    assert config_json["decoding"] == "jacobi" and config_json["jacobi_block_size"] == 4
    readme = files["README.md"].decode()
    assert "library_name: peft" in readme and "LoRA r=2" in readme and "block size n=4" in readme
    assert "arXiv:2512.14681" in readme


def test_card_template_is_found_in_a_source_checkout_that_was_not_installed(monkeypatch):
    """With PYTHONPATH=src (no install) the template package is not mapped; a training run then saved no checkpoint."""
    from hf_jacobi import card

    installed = card.template_text()

    def not_mapped(package):
        raise ModuleNotFoundError(f"No module named {package!r}")

    monkeypatch.setattr(card.importlib.resources, "files", not_mapped)
    assert card.template_text() == installed


def test_export_weights_replaces_the_shipped_adapter_only_when_asked_by_name(tmp_path, capsys, monkeypatch):
    """A user exporting their own adapter who forgets --output-dir must not overwrite what the package ships."""
    import hf_jacobi.adapters

    source = checkpoint_with_own_settings(tmp_path / "adapter", "adapter")
    shipped = tmp_path / "package-weights"
    shipped.mkdir()
    (shipped / "adapter_model.safetensors").write_bytes(b"the shipped weights")
    monkeypatch.setattr(hf_jacobi.adapters, "JACOBI_FORCING_WEIGHTS", shipped)
    for flags in ([], ["--output-dir", str(tmp_path / "out"), "--replace-shipped"]):
        assert main(["export-weights", str(source), *flags]) == 1
        error = capsys.readouterr().err
        assert "export-weights writes to --output-dir DIR, or with --replace-shipped" in error, error
        assert str(shipped) in error and ("give one of the two" if not flags else "not both") in error
    assert (shipped / "adapter_model.safetensors").read_bytes() == b"the shipped weights"
    assert not (tmp_path / "out").exists()
    assert main(["export-weights", str(source), "--replace-shipped"]) == 0, capsys.readouterr().err
    assert JacobiConfig.from_generation_config(GenerationConfig.from_pretrained(shipped)) == OWN_SETTINGS
    assert (shipped / "adapter_model.safetensors").read_bytes() == (source / "adapter_model.safetensors").read_bytes()
