"""The static path of the Jacobi loop (`cache_implementation="static"`): same outputs as greedy and the same forwards
as the dynamic path, a few fixed forward shapes per call on a preallocated cache, and a compiled forward that compiles
once per shape."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch._dynamo.utils import get_static_address_type
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from transformers import CompileConfig, GenerationConfig, LlamaConfig, LlamaForCausalLM, StaticCache

from hf_jacobi import JacobiConfig, enable_jacobi
from hf_jacobi.decoding import compiled_forward, loop, static_cache, static_layers
from hf_jacobi.decoding.call_settings import resolve_jacobi_config
from hf_jacobi.decoding.static_cache import LENGTH_ATTRIBUTE, StaticKVSlots
from hf_jacobi.decoding.step_layout import StepLayout
from tiny_models import PAD, TINY_CONFIG, fresh_tiny_model, random_prompts, tiny_model

SETTINGS = {
    "plain": {"jacobi_block_size": 5},
    "multi_block": {"jacobi_block_size": 4, "jacobi_num_blocks": 3, "jacobi_spawn_ratio": 0.5},
    "recycling": {"jacobi_block_size": 4, "jacobi_ngram_pool_size": 4, "jacobi_ngram_size": 3},
    "all": {"jacobi_block_size": 3, "jacobi_num_blocks": 2, "jacobi_ngram_pool_size": 8, "jacobi_verify_size": 3},
}
STATIC = {"cache_implementation": "static"}


def dynamic_and_static(model, ids, mask, settings, **kwargs):
    """Greedy, then the dynamic and the static Jacobi outputs (dicts with forward counts) of one call."""
    kwargs = {"attention_mask": mask, "do_sample": False, **kwargs}
    greedy = model.generate(ids, **kwargs)
    jacobi = {"decoding": "jacobi", "return_dict_in_generate": True, **settings}
    dynamic = model.generate(ids, **kwargs, **jacobi)
    static = model.generate(ids, **kwargs, **jacobi, **STATIC)
    return greedy, dynamic, static


def assert_same_forwards(dynamic, static):
    """Same proposals and same acceptances, so the same forwards: padding to a fixed width and keeping finished rows
    in the batch add columns, never forwards, and forward_tokens count only the columns that carry tokens."""
    for name in ("forward_passes", "forward_tokens", "recycled_tokens"):
        assert torch.equal(getattr(dynamic, name), getattr(static, name)), name


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "gemma2"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_static_equals_greedy_with_the_dynamic_paths_forwards(family, batch, setting):
    """Llama (GQA: 4 query heads over 2 KV heads, as every fixture), Qwen2, Qwen3 (a full and a sliding layer: a dict
    of masks), Mistral (every layer slides over a window shorter than the text) and Gemma2 (eager attention)."""
    model = enable_jacobi(tiny_model(family, 0))
    ids, mask = random_prompts(batch, 9, seed=batch)
    greedy, dynamic, static = dynamic_and_static(model, ids, mask, SETTINGS[setting], max_new_tokens=40)
    assert torch.equal(dynamic.sequences, greedy)
    assert torch.equal(static.sequences, greedy)
    assert_same_forwards(dynamic, static)


def test_eos_inside_a_block_finishes_rows_at_different_steps():
    model = enable_jacobi(tiny_model("llama", 1))
    ids, mask = random_prompts(3, 8, seed=4)
    free_run = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=30, eos_token_id=None)
    eos = int(free_run[0, 8 + 6])  # a token row 0 emits mid-way: rows now stop at different steps, inside blocks
    greedy, dynamic, static = dynamic_and_static(
        model, ids, mask, SETTINGS["all"], max_new_tokens=30, eos_token_id=eos, pad_token_id=PAD
    )
    assert torch.equal(static.sequences, greedy)
    assert (static.sequences[0, 8 + 7 :] == PAD).all()
    assert_same_forwards(dynamic, static)


@pytest.mark.parametrize("max_new_tokens", [1, 2, 7, 33])
@pytest.mark.parametrize("block_size", [1, 8, 32])
def test_the_budget_ends_mid_block(max_new_tokens, block_size):
    model = enable_jacobi(tiny_model("qwen2", 0))
    ids, mask = random_prompts(2, 6, seed=2)
    greedy, dynamic, static = dynamic_and_static(
        model, ids, mask, {"jacobi_block_size": block_size}, max_new_tokens=max_new_tokens
    )
    assert torch.equal(static.sequences, greedy)
    assert_same_forwards(dynamic, static)


@pytest.fixture
def spy(monkeypatch):
    """Records every static forward's inputs and the cache's storage, by wrapping the slots' mask builder."""
    seen: dict = {"shapes": [], "caches": [], "compactions": 0}
    mask_builder, to_static, compact = StaticKVSlots.attention_mask, loop.to_static, StaticKVSlots.compact

    def attention_mask(self, layout, dtype):
        mask = mask_builder(self, layout, dtype)
        seen["shapes"].append((tuple(layout.positions.shape), tuple(mask.shape), self.length))
        return mask

    def recording_to_static(*args, **kwargs):
        cache, slots = to_static(*args, **kwargs)
        pointers = [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in cache.layers]
        seen["caches"].append((cache, pointers, slots))
        return cache, slots

    def counting_compact(self, cache):
        seen["compactions"] += 1
        return compact(self, cache)

    monkeypatch.setattr(StaticKVSlots, "attention_mask", attention_mask)
    monkeypatch.setattr(loop, "to_static", recording_to_static)
    monkeypatch.setattr(StaticKVSlots, "compact", counting_compact)
    return seen


def test_one_width_pads_every_forward_to_the_widest_and_the_cache_is_never_reallocated(spy):
    model = enable_jacobi(tiny_model("llama", 0))
    ids, mask = random_prompts(3, 9, seed=5)
    settings = {**SETTINGS["all"], "jacobi_static_widths": 1}
    out = model.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=30, decoding="jacobi", **STATIC, **settings
    )
    assert torch.equal(out, model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=30))
    ((cache, pointers, slots),) = spy["caches"]
    length = cache.layers[0].max_cache_len
    (width,) = slots.step_widths
    assert width == 1 + 3 * 2 - 1 + 3 * 2  # the chain of 2 blocks of 3, then 3 candidates of 2 tokens
    assert {shape[:2] for shape in spy["shapes"]} == {((3, width), (3, 1, width, length))}
    assert len(spy["shapes"]) > 5  # rows finished at different steps, yet the batch stayed at 3
    assert [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in cache.layers] == pointers
    assert int(cache.layers[0].cumulative_length) == slots.length
    assert not slots.valid[:, slots.length :].any()


def test_each_forward_takes_the_narrowest_width_that_fits(spy, monkeypatch):
    """On a CPU the static path pads to a few widths (the chain plus 0..3 candidates here), each forward to the
    narrowest that holds its widest row: steps with fewer candidates run narrower, on the same cache storage."""
    layouts = []

    def recording_layout(*args, **kwargs):
        layout = StepLayout(*args, **kwargs)
        layouts.append((max(layout.columns_used), layout.width))
        return layout

    monkeypatch.setattr(loop, "StepLayout", recording_layout)
    model = enable_jacobi(tiny_model("llama", 0))
    ids, mask = random_prompts(3, 9, seed=5)
    greedy, dynamic, static = dynamic_and_static(model, ids, mask, SETTINGS["all"], max_new_tokens=30)
    assert torch.equal(static.sequences, greedy)
    assert_same_forwards(dynamic, static)
    ((cache, pointers, slots),) = spy["caches"]
    assert slots.step_widths == (6, 8, 10, 12)  # the chain of 6, then 1, 2 or 3 candidates of 2 tokens
    static_layouts = layouts[len(layouts) // 2 :]  # the dynamic call's forwards came first, as many as the static's
    assert [width for _, width in static_layouts] == [shape[0][1] for shape in spy["shapes"]]
    assert all(width == min(w for w in slots.step_widths if w >= used) for used, width in static_layouts)
    assert len({width for _, width in static_layouts}) > 1
    assert [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in cache.layers] == pointers


def test_compaction_when_holes_fill_the_cache_changes_nothing(spy, monkeypatch):
    """With the cache sized to the slot (no rounding), rows accepting different counts run out of room and the slots are
    compacted in place; the output stays greedy's and the forwards stay the dynamic path's."""
    model = enable_jacobi(tiny_model("mistral", 0))
    monkeypatch.setattr(static_cache, "LENGTH_GRANULE", 1)
    monkeypatch.setattr(model, LENGTH_ATTRIBUTE, 0, raising=False)
    ids, mask = random_prompts(3, 9, seed=14)
    greedy, dynamic, static = dynamic_and_static(model, ids, mask, SETTINGS["recycling"], max_new_tokens=40)
    assert spy["compactions"] > 0
    assert torch.equal(static.sequences, greedy)
    assert_same_forwards(dynamic, static)


def test_a_finished_row_gives_its_slots_back_so_compactions_pack_to_the_running_rows(monkeypatch):
    """A row that finishes while others run stays in the static batch as padding, but its slots are given back: a
    later compaction packs to the fullest row still running, not to the finished one (which may have used its whole
    budget and left no room). Same output and forwards; with the slots kept, as before, the same call compacts more."""
    monkeypatch.setattr(static_cache, "LENGTH_GRANULE", 1)
    model = enable_jacobi(tiny_model("qwen2", 0))
    ids, mask = random_prompts(3, 8, seed=2)
    free_run = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=40, eos_token_id=None)
    eos = int(free_run[0, 8 + 4])  # row 0 finishes early
    compactions, compact = [], StaticKVSlots.compact

    def recording_compact(self, cache):
        compact(self, cache)
        compactions.append((self.length, list(self.counts)))

    monkeypatch.setattr(StaticKVSlots, "compact", recording_compact)

    def run():
        monkeypatch.setattr(model, LENGTH_ATTRIBUTE, 0, raising=False)
        compactions.clear()
        kwargs = {"max_new_tokens": 40, "eos_token_id": eos, "pad_token_id": PAD}
        return dynamic_and_static(model, ids, mask, SETTINGS["recycling"], **kwargs), list(compactions)

    (greedy, dynamic, static), given_back = run()
    assert torch.equal(static.sequences, greedy)
    assert_same_forwards(dynamic, static)
    assert any(0 in counts for _, counts in given_back)  # a compaction after row 0 finished, its count 0
    assert all(length == max(counts) for length, counts in given_back)

    def keeping_slots(self, cache, running, keep):
        return [row if index in set(keep) else None for index, row in enumerate(running)]

    monkeypatch.setattr(StaticKVSlots, "select_rows", keeping_slots)
    (_, _, kept), kept_slots = run()
    assert torch.equal(kept.sequences, greedy)
    assert len(kept_slots) > len(given_back), (kept_slots, given_back)


def test_compacting_after_every_step_changes_nothing(monkeypatch):
    def always(self, cache):
        self.compact(cache)
        return True

    monkeypatch.setattr(StaticKVSlots, "maybe_compact", always)
    for family in ("llama", "qwen3"):
        model = enable_jacobi(tiny_model(family, 0))
        ids, mask = random_prompts(3, 9, seed=14)
        greedy, _, static = dynamic_and_static(model, ids, mask, SETTINGS["multi_block"], max_new_tokens=30)
        assert torch.equal(static.sequences, greedy), family


def test_later_calls_reuse_the_longest_cache_so_shapes_repeat(spy):
    """Shorter prompts keep the first call's cache length, and the cache itself (its tensors' addresses, which a CUDA
    graph is recorded for) is reused, rewound, without the earlier call's keys and values leaking into the output."""
    model = enable_jacobi(fresh_tiny_model("llama", 0))
    kwargs = {"do_sample": False, "max_new_tokens": 20}
    jacobi = {"decoding": "jacobi", **STATIC, "jacobi_block_size": 4}
    for length in (12, 5, 9):
        ids, mask = random_prompts(2, length, seed=length)
        out = model.generate(ids, attention_mask=mask, **kwargs, **jacobi)
        assert torch.equal(out, model.generate(ids, attention_mask=mask, **kwargs))
    lengths = [cache.layers[0].max_cache_len for cache, _, _ in spy["caches"]]
    assert lengths == [64, 64, 64]  # 12 + 20 + 4 rounded up to a multiple of 64, then kept
    assert len({id(cache) for cache, _, _ in spy["caches"]}) == 1
    assert len({tuple(pointers) for _, pointers, _ in spy["caches"]}) == 1
    ids, mask = random_prompts(3, 9, seed=3)  # another batch size: a cache of its own
    model.generate(ids, attention_mask=mask, **kwargs, **jacobi)
    assert spy["caches"][-1][0] is not spy["caches"][0][0]


def test_a_cache_made_under_inference_mode_is_not_reused_outside_it():
    """Inference tensors cannot be written outside torch.inference_mode: a call outside it gets a cache of its own
    (the CLI decodes under inference mode; a user's later call may not)."""
    model = enable_jacobi(fresh_tiny_model("llama", 0))
    ids, mask = random_prompts(2, 9, seed=7)
    kwargs = {"attention_mask": mask, "do_sample": False, "max_new_tokens": 12}
    jacobi = {"decoding": "jacobi", **STATIC, "jacobi_block_size": 4}
    with torch.inference_mode():
        inside = model.generate(ids, **kwargs, **jacobi)
    outside = model.generate(ids, **kwargs, **jacobi)
    again = model.generate(ids, **kwargs, **jacobi)
    greedy = model.generate(ids, **kwargs)
    assert torch.equal(inside, greedy) and torch.equal(outside, greedy) and torch.equal(again, greedy)


def test_sampling_on_the_static_path_draws_what_the_dynamic_path_draws():
    """The same seed gives the same tokens: the acceptance rule draws the same random numbers in the same order."""
    model = enable_jacobi(tiny_model("llama", 0))
    ids, mask = random_prompts(3, 9, seed=3)
    kwargs = {"attention_mask": mask, "do_sample": True, "top_k": 4, "max_new_tokens": 25, "decoding": "jacobi"}
    outputs = []
    for extra in ({}, STATIC):
        torch.manual_seed(0)
        outputs.append(model.generate(ids, **kwargs, **SETTINGS["recycling"], **extra))
    assert torch.equal(*outputs)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"cache_implementation": "static"}, "static"),
        ({"jacobi_cache_implementation": "static"}, "static"),
        ({"jacobi_cache_implementation": "dynamic", "cache_implementation": "static"}, "dynamic"),
        ({}, "dynamic"),
    ],
)
def test_the_call_chooses_the_cache(monkeypatch, source, expected):
    model = enable_jacobi(tiny_model("qwen2", 0))
    used = []
    monkeypatch.setattr(loop, "to_static", lambda *a, **k: used.append(1) or static_cache.to_static(*a, **k))
    ids, mask = random_prompts(1, 6, seed=1)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, decoding="jacobi", **source)
    assert torch.equal(out, model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False))
    assert bool(used) == (expected == "static")


def test_a_generation_configs_own_cache_implementation_counts_unless_a_jacobi_setting_says_otherwise():
    model_config = GenerationConfig(cache_implementation="static")
    dynamic = GenerationConfig(cache_implementation="dynamic")

    def chosen(passed=None, **overrides):
        return resolve_jacobi_config(passed, model_config, overrides).cache_implementation

    assert chosen() == "static"
    assert chosen(cache_implementation="dynamic") == "dynamic"  # a call's jacobi_cache_implementation
    assert chosen(dynamic) == "dynamic"  # the generation_config passed to the call
    model_config.jacobi_cache_implementation = "dynamic"  # beside the generic one, in the same config
    assert chosen() == "dynamic"
    assert resolve_jacobi_config(None, model_config, {}, call_cache_implementation="static").cache_implementation == (
        "static"
    )


def test_a_checkpoint_carries_the_choice_and_a_call_overrides_it(tmp_path, monkeypatch):
    config = JacobiConfig(block_size=4, cache_implementation="static", compile="never", static_widths=2)
    config.write_to(GenerationConfig(max_new_tokens=10, do_sample=False)).save_pretrained(tmp_path)
    saved = GenerationConfig.from_pretrained(tmp_path)
    assert (saved.jacobi_cache_implementation, saved.jacobi_compile, saved.jacobi_static_widths) == (
        "static",
        "never",
        2,
    )
    assert JacobiConfig.from_generation_config(saved) == config
    model = enable_jacobi(fresh_tiny_model("llama", 0))
    model.generation_config = saved
    used = []
    monkeypatch.setattr(loop, "to_static", lambda *a, **k: used.append(1) or static_cache.to_static(*a, **k))
    ids, mask = random_prompts(2, 6, seed=1)
    greedy = model.generate(ids, attention_mask=mask, decoding="greedy")
    assert torch.equal(model.generate(ids, attention_mask=mask), greedy) and used == [1]
    # a call's own cache_implementation wins, and the checkpoint's compile and widths settings go with its static cache
    assert torch.equal(model.generate(ids, attention_mask=mask, cache_implementation="dynamic"), greedy)
    assert used == [1]
    assert "static cache" in config.describe()


def test_compile_follows_transformers_rules_unless_told(monkeypatch):
    """ "auto" compiles where transformers' generate would (on CPU only when compile_config asks for every device);
    "always" compiles anywhere; "never" never; with the call's compile_config, else the model's default one.
    Compilation itself is replaced by a recorder here."""
    model = fresh_tiny_model("llama", 0)
    enable_jacobi(model)
    compiled = []

    def compiled_verify_call(model, compile_config, widths):
        compiled.append(compile_config)
        return model

    monkeypatch.setattr(compiled_forward, "compiled_verify_call", compiled_verify_call)
    ids, mask = random_prompts(1, 6, seed=1)
    kwargs = {"attention_mask": mask, "max_new_tokens": 6, "do_sample": False, "decoding": "jacobi", **STATIC}
    everywhere = CompileConfig(fullgraph=True)
    everywhere._compile_all_devices = True
    cases = [
        ({}, False),
        ({"compile_config": CompileConfig()}, False),  # on a CPU generate compiles only when told to
        ({"compile_config": everywhere}, True),
        ({"compile_config": everywhere, "disable_compile": True}, False),
        ({"compile_config": everywhere, "jacobi_compile": "never"}, False),
        ({"jacobi_compile": "always"}, True),
    ]
    for extra, expected in cases:
        compiled.clear()
        model.generate(ids, **kwargs, **extra)
        assert bool(compiled) == expected, extra
        if expected:
            assert compiled[0]._compile_all_devices
    model.generate(ids, **kwargs, compile_config=everywhere)
    assert compiled[-1].fullgraph  # the caller's settings travel to torch.compile
    # without a compile_config, the model's own default (transformers picks one per device) is what compiles
    monkeypatch.setattr(model, "_default_compile_config", lambda: CompileConfig(mode="max-autotune-no-cudagraphs"))
    model.generate(ids, **kwargs, jacobi_compile="always")
    assert compiled[-1].mode == "max-autotune-no-cudagraphs" and compiled[-1]._compile_all_devices


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"jacobi_cache_implementation": "paged"}, r"must be one of \['auto', 'dynamic', 'static'\], got 'paged'"),
        ({"jacobi_compile": "yes"}, r"jacobi_compile must be one of \['auto', 'always', 'never'\], got 'yes'"),
        ({"jacobi_compile": "always"}, r"jacobi_compile='always' .* needs jacobi_cache_implementation='static'"),
        ({"jacobi_static_widths": 2}, r"jacobi_static_widths=2 sets .* needs jacobi_cache_implementation='static'"),
        ({**STATIC, "jacobi_static_widths": 0}, r"jacobi_static_widths must be an integer >= 1, got 0"),
        ({"cache_implementation": "offloaded"}, r"got cache_implementation='offloaded'. Accepted: None, 'dynamic'"),
        ({"compile_config": CompileConfig()}, r"compile_config needs cache_implementation='static'"),
        ({"cache": StaticCache(config=tiny_model("llama").config, max_cache_len=64)}, r"do not pass `cache`"),
    ],
    ids=[
        "cache",
        "compile",
        "compile-dynamic",
        "widths-dynamic",
        "no-widths",
        "offloaded",
        "compile-config-dynamic",
        "user-cache",
    ],
)
def test_unsupported_combinations_are_refused(kwargs, message):
    model = enable_jacobi(tiny_model("llama", 0))
    ids, mask = random_prompts(1, 6, seed=1)
    with pytest.raises(ValueError, match=message):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, decoding="jacobi", **kwargs)


@pytest.mark.parametrize("static_widths", [1, None])
def test_the_compiled_forward_compiles_once_per_width(static_widths):
    """torch.compile on CPU (dynamo, with the eager backend to keep the test short; inductor compiles the same graph):
    the verify forward compiles once, on the first call, and its later steps and later prompts of the same setting
    (other lengths, same batch and budget) compile nothing new: with one width a static graph, with the CPU's several
    widths one graph with the width dynamic (left to dynamo, the second width met would compile a second graph, in
    whichever call met it first). Outputs stay greedy's."""
    counters = torch._dynamo.utils.counters
    torch._dynamo.reset()
    model = enable_jacobi(fresh_tiny_model("qwen2", 0))
    compile_config = CompileConfig(backend="eager", mode=None, fullgraph=True)
    compile_config._compile_all_devices = True
    kwargs = {"do_sample": False, "max_new_tokens": 30}
    settings = {"decoding": "jacobi", **STATIC, **SETTINGS["all"], "compile_config": compile_config}
    graphs = []
    before = counters["stats"]["unique_graphs"]  # a global tally: earlier tests in the session compiled their own
    for length, seed in ((8, 1), (6, 2), (8, 3)):
        ids, mask = random_prompts(2, length, seed=seed)
        greedy = model.generate(ids, attention_mask=mask, **kwargs)
        out = model.generate(
            ids,
            attention_mask=mask,
            return_dict_in_generate=True,
            jacobi_static_widths=static_widths,
            **kwargs,
            **settings,
        )
        assert torch.equal(out.sequences, greedy)
        assert int(out.forward_passes.max()) > 3
        graphs.append(counters["stats"]["unique_graphs"] - before)
    assert graphs == [1, 1, 1], graphs  # several widths: one graph with the width dynamic, made on the first call
    torch._dynamo.reset()


@pytest.mark.parametrize("first", ["greedy", "jacobi"])
def test_the_jacobi_forward_compiles_on_a_frame_of_its_own(first):
    """transformers compiles greedy's forward through `model.__call__`. Compiled through the same call, the Jacobi
    forward was a recompile of greedy's graphs, and once greedy had compiled at two cache lengths (as bench's warm-up
    does) dynamo traced it with symbolic sizes: a dynamic-shape graph a Jacobi-only user never gets. On a frame of its
    own it is a static graph whichever of the two compiles first; greedy's own graphs are as before. Outputs stay
    greedy's. The model's weights reach the Jacobi graph as static inputs, as greedy's do (a CUDA graph would
    otherwise copy every weight into its input buffers at each replay)."""
    graphs: list[tuple[str, bool]] = []
    current = [""]

    def recording_backend(graph_module, example_inputs):
        symbolic = any(isinstance(size, torch.SymInt) for x in example_inputs for size in getattr(x, "shape", (x,)))
        graphs.append((current[0], symbolic))
        weights = [x for x in example_inputs if isinstance(x, torch.nn.Parameter)]
        assert len(weights) == len(list(model.parameters()))
        assert all(get_static_address_type(weight) is not None for weight in weights)
        return graph_module.forward

    torch._dynamo.reset()
    model = enable_jacobi(fresh_tiny_model("llama", 0))
    compile_config = CompileConfig(backend=recording_backend, mode=None, fullgraph=True)
    compile_config._compile_all_devices = True
    ids, mask = random_prompts(2, 8, seed=1)
    kwargs = {
        "attention_mask": mask,
        "do_sample": False,
        "max_new_tokens": 20,
        **STATIC,
        "compile_config": compile_config,
    }
    greedy = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=20)
    order = ["greedy", "jacobi"] if first == "greedy" else ["jacobi", "greedy"]
    for current[0] in order:
        if current[0] == "greedy":
            for budget in (20, 24):  # two cache lengths: greedy's second graph is a dynamic one
                out = model.generate(ids, **{**kwargs, "max_new_tokens": budget})
                assert torch.equal(out[:, : greedy.shape[1]], greedy)
        else:
            jacobi = {"decoding": "jacobi", **SETTINGS["plain"], "jacobi_compile": "always", "jacobi_static_widths": 1}
            assert torch.equal(model.generate(ids, **kwargs, **jacobi), greedy)
    assert [symbolic for name, symbolic in graphs if name == "jacobi"] == [False], graphs
    assert [symbolic for name, symbolic in graphs if name == "greedy"] == [False, True], graphs
    torch._dynamo.reset()


def test_settings_of_different_widths_each_keep_a_static_graph():
    """Settings share the Jacobi frame too: two one-width settings of different widths taking turns (bench's two
    compiled settings do) each get a static graph of their own; unmarked, the second compiled as a recompile of the
    first with the width (and the slot-move plan's width) symbolic. Outputs stay greedy's."""
    symbolic_inputs: list[list[tuple]] = []

    def recording_backend(graph_module, example_inputs):
        shapes = [tuple(getattr(x, "shape", (x,))) for x in example_inputs]
        symbolic_inputs.append([shape for shape in shapes if any(isinstance(size, torch.SymInt) for size in shape)])
        return graph_module.forward

    torch._dynamo.reset()
    model = enable_jacobi(fresh_tiny_model("llama", 0))
    compile_config = CompileConfig(backend=recording_backend, mode=None, fullgraph=True)
    ids, mask = random_prompts(2, 8, seed=1)
    kwargs = {"attention_mask": mask, "do_sample": False, "max_new_tokens": 20}
    greedy = model.generate(ids, **kwargs)
    jacobi = {"decoding": "jacobi", **STATIC, "jacobi_compile": "always", "jacobi_static_widths": 1}
    for _ in range(2):
        for block in (4, 6):
            out = model.generate(ids, **kwargs, **jacobi, jacobi_block_size=block, compile_config=compile_config)
            assert torch.equal(out, greedy)
    assert symbolic_inputs == [[], []], symbolic_inputs
    torch._dynamo.reset()


def _slot_moves_calls(monkeypatch, method: str) -> list[tuple]:
    """The arguments of every call of `SlotMoves.<method>` while the test runs (the call itself goes through)."""
    calls: list[tuple] = []
    original = getattr(static_layers.SlotMoves, method)
    monkeypatch.setattr(static_layers.SlotMoves, method, lambda self, *a: calls.append(a) or original(self, *a))
    return calls


def _compiling_llama(batch: int, length: int, seed: int, max_new_tokens: int):
    """A fresh tiny llama with Jacobi, dynamo's eager backend to compile with (short), prompts, greedy's kwargs and
    greedy's output on them."""
    torch._dynamo.reset()
    model = enable_jacobi(fresh_tiny_model("llama", 0))
    ids, mask = random_prompts(batch, length, seed=seed)
    kwargs = {"attention_mask": mask, "do_sample": False, "max_new_tokens": max_new_tokens}
    compile_config = CompileConfig(backend="eager", mode=None, fullgraph=True)
    return model, compile_config, ids, kwargs, model.generate(ids, **kwargs)


def test_a_compiled_forward_moves_the_winning_branch_inside_itself(monkeypatch):
    """On the compiled path a winning branch's keys and values are moved inside the next forward (each layer applies
    the cache's `SlotMoves` plan before writing), not at the commit; an eager call on the same, reused cache moves them
    at the commit again, and a compiled one after it defers again. Every output stays greedy's."""
    records = _slot_moves_calls(monkeypatch, "record")
    model, compile_config, ids, kwargs, greedy = _compiling_llama(3, 9, seed=5, max_new_tokens=30)
    moved = []
    for compile_mode in ("always", "never", "always"):
        records.clear()
        out = model.generate(
            ids,
            **kwargs,
            decoding="jacobi",
            **STATIC,
            **SETTINGS["all"],
            jacobi_compile=compile_mode,
            compile_config=compile_config,
        )
        assert torch.equal(out, greedy), compile_mode
        moved.append(len(records))
    assert moved[0] > 0 and moved[1] == 0 and moved[2] == moved[0], moved
    torch._dynamo.reset()


def test_settings_taking_turns_on_one_model_keep_their_slot_move_plans(monkeypatch):
    """A compiled forward reads its slot-move plan at a fixed address (a CUDA graph replays it there; a plan at a new
    address makes torch record the graph again). Two settings of different widths taking turns on one model, as
    bench's do, each keep their own plan: once both have run, later calls make no new plan. Outputs stay greedy's."""
    made = _slot_moves_calls(monkeypatch, "__init__")
    model, compile_config, ids, kwargs, greedy = _compiling_llama(2, 8, seed=7, max_new_tokens=20)
    widths, plans = set(), []
    for _ in range(3):
        for setting in ("all", "recycling"):
            jacobi = {"decoding": "jacobi", **STATIC, **SETTINGS[setting], "jacobi_compile": "always"}
            assert torch.equal(model.generate(ids, **kwargs, **jacobi, compile_config=compile_config), greedy)
            widths.add(getattr(model, static_cache.CACHE_ATTRIBUTE).moves.width)
        plans.append(len(made))
    assert len(widths) == 2, widths
    assert plans[1] == plans[2], plans  # no new plan once both settings have run on the cache's final length
    torch._dynamo.reset()


class _OpCounter(TorchDispatchMode):
    """Counts the aten ops run while it is active, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def test_a_compiled_step_does_no_per_layer_work_beside_its_forward(monkeypatch):
    """Every op a step runs outside its compiled forward is a launch on a GPU, so none may come per layer: on an
    8-layer model the compiled path's steps gather and copy no cache slots outside the forward (a winning branch is
    moved inside it) and run a handful of ops in all; the eager static path, for contrast, gathers per layer at the
    commit, which shows the count sees such work."""
    counter, steps = _OpCounter(), []
    step = loop._step

    def counted_step(forward, *args, **kwargs):
        def call(*inputs, **named):
            with _disable_current_modes():  # the forward itself is not counted
                return forward.call(*inputs, **named)

        steps.append(1)
        with counter:
            return step(loop.VerifyForward(call, forward.dtype, forward.kwargs), *args, **kwargs)

    monkeypatch.setattr(loop, "_step", counted_step)
    torch._dynamo.reset()
    config = LlamaConfig(**{**TINY_CONFIG, "num_hidden_layers": 8})
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = enable_jacobi(LlamaForCausalLM(config).eval())
    model.generation_config.pad_token_id = PAD
    ids, mask = random_prompts(3, 9, seed=5)
    kwargs = {"attention_mask": mask, "do_sample": False, "max_new_tokens": 30, "decoding": "jacobi", **STATIC}
    compile_config = CompileConfig(backend="eager", mode=None, fullgraph=True)
    counts = {}
    for compile_mode in ("always", "never"):
        counter.ops.clear()
        steps.clear()
        model.generate(ids, **kwargs, **SETTINGS["all"], jacobi_compile=compile_mode, compile_config=compile_config)
        counts[compile_mode] = (dict(counter.ops), len(steps))
    compiled, compiled_steps = counts["always"]
    assert "aten.gather" not in compiled and "aten._foreach_copy_" not in compiled, compiled
    assert sum(compiled.values()) / compiled_steps < 2 * config.num_hidden_layers, compiled
    eager, _ = counts["never"]
    assert eager.get("aten.gather", 0) >= 2 * config.num_hidden_layers  # keys and values of every layer, per move
    torch._dynamo.reset()
