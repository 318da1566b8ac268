"""Tiny random causal LMs of several families, built in-process (nothing is downloaded).

Weights are drawn with a large init range so logits are peaked: the tests compare argmaxes, and near-ties between
random logits would otherwise be decided by float rounding rather than by the decoding algorithm.
"""

from __future__ import annotations

import copy
import functools

import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    GemmaConfig,
    GemmaForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

VOCAB = 128
EOS = 2
PAD = 0

TINY_CONFIG = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    initializer_range=0.25,
    bos_token_id=1,
    eos_token_id=EOS,
    pad_token_id=PAD,
)

FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, {}),
    # one full-attention layer, then a sliding one: the model takes a dict of masks
    "qwen3": (
        Qwen3Config,
        Qwen3ForCausalLM,
        {"head_dim": 8, "use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1},
    ),
    # every layer slides over a window much shorter than the generated text
    "mistral": (MistralConfig, MistralForCausalLM, {"sliding_window": 8, "head_dim": 8}),
    "gemma": (GemmaConfig, GemmaForCausalLM, {"head_dim": 8}),
    "gemma2": (Gemma2Config, Gemma2ForCausalLM, {"head_dim": 8, "sliding_window": 8, "query_pre_attn_scalar": 8}),
}


# More architectures, each checked for exactness in one test (test_decoding_equivalence): learned absolute positions
# (GPT-2, OPT), parallel attention and MLP (GPT-NeoX, Falcon, Phi), partial rotary (Phi, StableLM), mixtures of experts
# (Qwen3-MoE), QK norms (OLMo2, Cohere), mixed sliding layers (Gemma3), scaled residuals (Granite). Classes are looked
# up by name, so a transformers without one skips it instead of breaking the import.
MORE_FAMILIES = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_inner": 64}),
    "opt": ("OPTConfig", "OPTForCausalLM", {"ffn_dim": 64, "word_embed_proj_dim": 32}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {}),
    "falcon": ("FalconConfig", "FalconForCausalLM", {"num_kv_heads": 2, "new_decoder_architecture": True}),
    "phi": ("PhiConfig", "PhiForCausalLM", {}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {}),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", {}),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {"head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16},
    ),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    "cohere": ("CohereConfig", "CohereForCausalLM", {}),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {"head_dim": 8, "sliding_window": 8, "query_pre_attn_scalar": 8, "sliding_window_pattern": 2},
    ),
    "granite": ("GraniteConfig", "GraniteForCausalLM", {}),
    "glm4": ("Glm4Config", "Glm4ForCausalLM", {"head_dim": 8}),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", {}),
}


# Gemma2 has no sdpa path in transformers: it always runs eager attention.
EAGER_ONLY = {"gemma2"}


@functools.lru_cache(maxsize=64)
def tiny_model(family: str, seed: int = 0, attn_implementation: str = "sdpa"):
    """An eval-mode float32 model; cached, so tests must not modify it (enable_jacobi is fine: it is idempotent)."""
    if family in FAMILIES:
        config_cls, model_cls, extra = FAMILIES[family]
    else:
        import transformers

        config_name, model_name, extra = MORE_FAMILIES[family]
        config_cls, model_cls = getattr(transformers, config_name), getattr(transformers, model_name)
    config = config_cls(**{**TINY_CONFIG, **extra})
    if family in EAGER_ONLY:
        attn_implementation = "eager"
    config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    # Gemma ties and scales embeddings; a large init makes its logits huge. Keep every family in a sane range.
    with torch.no_grad():
        for param in model.parameters():
            param.clamp_(-1.0, 1.0)
    model.generation_config.pad_token_id = PAD
    model.generation_config.eos_token_id = EOS
    return model


def random_prompts(batch: int, max_len: int, seed: int, pad_rows: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts of different lengths (ids avoid the special tokens) and their attention mask."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, max_len), generator=gen)
    mask = torch.ones_like(ids)
    if pad_rows:
        for row in range(1, batch):
            pad = int(torch.randint(0, max_len - 1, (1,), generator=gen))
            ids[row, :pad] = PAD
            mask[row, :pad] = 0
    return ids, mask


def fresh_tiny_model(family: str = "llama", seed: int = 0, attn_implementation: str = "sdpa"):
    """An uncached copy, for tests that train or otherwise change the weights."""
    model = copy.deepcopy(tiny_model(family, seed, attn_implementation))
    return model


def tiny_tokenizer(unknown: str = "<pad>"):
    """A word-level tokenizer over the tiny vocabulary ("t3" ... "t127"), with a chat template and the special ids the
    tiny models use; trainers and collection need a real tokenizer object. Words outside the vocabulary become
    `unknown` (padding by default; an ordinary token where real English prompts must give the model something)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<s>": 1, "</s>": EOS, **{f"t{i}": i for i in range(3, VOCAB)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=unknown))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token=unknown
    )
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    tokenizer.padding_side = "left"
    return tokenizer
