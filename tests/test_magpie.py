"""Magpie instructions: the template prefix, the filter, sampling on a tiny model, and the command's prompt file."""

from __future__ import annotations

import json

import pytest

from hf_jacobi.cli import main
from hf_jacobi.data.magpie import InstructionFilter, magpie_prompts, user_turn_prefix
from hf_jacobi.data.prompts import load_prompts
from tiny_models import tiny_model, tiny_tokenizer

ROLE_TEMPLATE = "{% for m in messages %}t5 t{{ 10 if m['role'] == 'user' else 11 }} {{ m['content'] }} t6 {% endfor %}"


def chat_tokenizer():
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = ROLE_TEMPLATE  # a role header before the user's text, as real templates have
    return tokenizer


def test_the_prefix_is_the_template_up_to_the_users_text():
    tokenizer = chat_tokenizer()
    prefix = user_turn_prefix(tokenizer)
    assert prefix == "t5 t10 "
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "t40 t41"}], tokenize=False)
    assert rendered.startswith(prefix + "t40 t41")
    bare = tiny_tokenizer()  # its template shows the message alone: nothing to continue
    with pytest.raises(ValueError, match="puts nothing before a user's message"):
        user_turn_prefix(bare)
    bare.chat_template = None
    with pytest.raises(ValueError, match="need a chat template"):
        user_turn_prefix(bare)


def test_the_filter_drops_cut_short_long_repeated_and_evaluation_text():
    evaluation = " ".join(f"w{i}" for i in range(20))
    keep = InstructionFilter(min_words=3, max_chars=60, exclude={"HumanEval/0": evaluation})
    assert keep.accept("  Write a poem about rain. ", ended=True) == "Write a poem about rain."
    assert keep.accept("Write a poem about", ended=False) is None  # cut by the token budget
    assert keep.accept("Hi there", ended=True) is None  # too short
    assert keep.accept("word " * 30, ended=True) is None  # too long
    assert keep.accept("write  a POEM about rain.", ended=True) is None  # a repeat after case/space folding
    assert keep.accept("Please " + " ".join(f"w{i}" for i in range(2, 15)), ended=True) is None  # shares a 13-gram
    assert keep.accept("Please " + " ".join(f"w{i}" for i in range(2, 14)), ended=True) is not None  # 12 words only
    with pytest.raises(ValueError, match="min_words and max_chars must be >= 1"):
        InstructionFilter(min_words=0)


def test_sampling_on_a_tiny_model_gives_distinct_finished_instructions_reproducibly():
    model, tokenizer = tiny_model("qwen3", 0), chat_tokenizer()
    keep = dict(min_words=1, max_chars=10_000)
    first = magpie_prompts(model, tokenizer, 5, batch_size=4, max_new_tokens=200, seed=3,
                           keep=InstructionFilter(**keep), progress=False)  # fmt: skip
    again = magpie_prompts(model, tokenizer, 5, batch_size=4, max_new_tokens=200, seed=3,
                           keep=InstructionFilter(**keep), progress=False)  # fmt: skip
    assert first["prompt_id"] == [f"magpie/3/{i}" for i in range(5)]
    texts = [m[0]["content"] for m in first["messages"]]
    assert len(set(texts)) == 5 and all(t.strip() for t in texts)
    assert all(m[0]["role"] == "user" and len(m) == 1 for m in first["messages"])
    assert texts == [m[0]["content"] for m in again["messages"]]  # same seed, same instructions
    with pytest.raises(RuntimeError, match=r"kept 0 of 2 instructions after 1 batches of 2"):
        magpie_prompts(model, tokenizer, 2, batch_size=2, max_new_tokens=1, max_batches=1,
                       keep=InstructionFilter(min_words=50), progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="count must be an integer >= 1, got 0"):
        magpie_prompts(model, tokenizer, 0)


def test_the_command_writes_a_prompt_file_that_collect_reads_back(tmp_path, monkeypatch, capsys):
    from hf_jacobi.cli import magpie as command
    from hf_jacobi.cli.common import LoadedModel

    model = tiny_model("llama", 0)
    monkeypatch.setattr(command, "load_model", lambda path, dtype: LoadedModel(model, chat_tokenizer(), "tiny"))
    monkeypatch.setattr("hf_jacobi.data.magpie.evaluation_texts", lambda: {})
    out = tmp_path / "magpie.jsonl"
    argv = ["magpie", "--num-prompts", "3", "--output", str(out), "--max-new-tokens", "200", "--batch-size", "4"]
    code = main(argv)
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["prompt_id"] for r in rows] == ["magpie/0/0", "magpie/0/1", "magpie/0/2"]
    prompts = load_prompts(str(out))
    assert prompts["prompt_id"] == [r["prompt_id"] for r in rows]
    assert main(["magpie", "--num-prompts", "3", "--output", str(tmp_path / "m.json")]) == 1
    assert "must end in .jsonl" in capsys.readouterr().err
