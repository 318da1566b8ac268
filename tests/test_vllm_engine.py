"""JacobiProposer inside vLLM's real CPU engine: every output equal to transformers' float32 greedy, one request at a
time and with concurrent requests that finish at different steps, on a tiny random model (two blocks in flight) and on
the embedded model with the shipped Jacobi Forcing adapter merged. Runs in vLLM's own environment (make test-vllm);
skipped where vLLM is not installed."""

from __future__ import annotations

import gc
import os

import pytest
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

pytest.importorskip("vllm", reason="vLLM runs in its own environment: make test-vllm")
pytestmark = pytest.mark.vllm

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: ample for these models, fits small machines

# vLLM's CPU attention takes head sizes 32, 64, 80, ... only, so this model is wider than tests/tiny_models.py's.
TINY_CONFIG = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    max_position_embeddings=512,
    initializer_range=0.25,  # peaked logits: argmaxes are not decided by float rounding
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
# two blocks of 4 in flight (k = 7); the second joins once a quarter of the first has been accepted
TINY_JACOBI = {"jacobi_block_size": 4, "jacobi_num_blocks": 2, "jacobi_spawn_ratio": 0.25}
TINY_PROMPTS = [[1, 5, 9, 33, 71, 100, 17], [1, 44], [1, 200, 3, 3, 3, 9, 10, 11, 12], [1, 7, 7, 7, 7, 7, 7, 7, 7, 7]]


def engine(folder, **kwargs):
    from vllm import LLM

    from hf_jacobi.integrations.vllm import speculative_config

    return LLM(
        model=str(folder),
        dtype="float32",
        enforce_eager=True,  # compiling costs minutes on two cores
        speculative_config=speculative_config(model=folder),
        disable_log_stats=False,
        **kwargs,
    )


def greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' greedy continuation of one unpadded prompt."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, len(prompt) :].tolist()


def generate(llm, prompts: list[list[int]], max_tokens: list[int], **params) -> list[list[int]]:
    """vLLM's greedy outputs, all prompts submitted together (the engine batches and queues them)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sampling = [SamplingParams(temperature=0, max_tokens=n, **params) for n in max_tokens]
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sampling, use_tqdm=False)
    return [list(output.outputs[0].token_ids) for output in outputs]


def assert_identical(got: list[list[int]], want: list[list[int]]) -> None:
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        if a != b:
            where = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            raise AssertionError(f"request {index}: vLLM and transformers part at token {where}: {a} != {b}")


def accepted_per_draft(llm) -> tuple[int, int]:
    """(verify steps with drafts, tokens accepted) so far, from vLLM's speculative-decoding counters."""
    values = {metric.name: metric.value for metric in llm.get_metrics() if hasattr(metric, "value")}
    return int(values["vllm:spec_decode_num_drafts"]), int(values["vllm:spec_decode_num_accepted_tokens"])


def close(llm) -> None:
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY_CONFIG)).eval()
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=None, pad_token_id=0, **TINY_JACOBI)
    model.save_pretrained(folder)
    # max_num_seqs=3 queues the fourth and later requests; a small token budget chunks prefills and trims drafts
    llm = engine(folder, skip_tokenizer_init=True, max_model_len=512, max_num_seqs=3, max_num_batched_tokens=16)
    yield model, llm
    close(llm)


def test_tiny_model_one_request_at_a_time(tiny):
    model, llm = tiny
    for prompt in TINY_PROMPTS:
        assert_identical(generate(llm, [prompt], [40], ignore_eos=True), [greedy(model, prompt, 40)])


def test_tiny_model_concurrent_requests_finishing_at_different_steps(tiny):
    model, llm = tiny
    prompts = [*TINY_PROMPTS, *[p[:-1] or p for p in TINY_PROMPTS]]
    budgets = [3, 64, 17, 40, 9, 55, 30, 5]
    want = [greedy(model, p, n) for p, n in zip(prompts, budgets, strict=True)]
    assert_identical(generate(llm, prompts, budgets, ignore_eos=True), want)


# one budget per request: the requests finish at different steps (the shorter ones while others still run)
SHIPPED_BUDGETS = [32, 7, 25, 32, 16, 29, 10, 32]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    pytest.importorskip("gguf")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_jacobi.data.chat import encode_chat
    from hf_jacobi.data.prompts import load_prompts
    from hf_jacobi.integrations.merged import write_merged_model

    folder = write_merged_model(tmp_path_factory.mktemp("merged") / "smollm2-jacobi-forcing")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    rows = load_prompts("packages", split="test", limit=len(SHIPPED_BUDGETS))
    prompts = [encode_chat(tokenizer, messages) for messages in rows["messages"]]
    want = [greedy(model, p, n) for p, n in zip(prompts, SHIPPED_BUDGETS, strict=True)]
    del model
    llm = engine(folder, max_model_len=1024, max_num_seqs=8)
    yield prompts, want, llm
    close(llm)


def test_shipped_adapter_one_request_at_a_time(shipped):
    prompts, want, llm = shipped
    steps_before, accepted_before = accepted_per_draft(llm)
    for index in (0, 3):
        assert_identical(generate(llm, [prompts[index]], [SHIPPED_BUDGETS[index]]), [want[index]])
    steps, accepted = accepted_per_draft(llm)
    tokens_per_forward = 1 + (accepted - accepted_before) / (steps - steps_before)
    print(f"shipped adapter in vLLM, batch 1: {tokens_per_forward:.2f} tokens per decode forward")
    assert tokens_per_forward > 1.2  # the untrained model gets about 1.07; the proposer must be using the iterate


def test_shipped_adapter_eight_concurrent_requests(shipped):
    prompts, want, llm = shipped
    assert_identical(generate(llm, prompts, SHIPPED_BUDGETS), want)
