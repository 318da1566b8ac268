"""A tiny local checkpoint for the campaign's CPU rehearsal (`--tiny`): every stage runs on it in seconds.

The embedded SmolLM2-135M-Instruct is what the campaign is for, but a rehearsal must not spend minutes on it. This is a
random two-layer Llama with tied embeddings (as SmolLM2 ties them, so the full-parameter run's low-rank approximation
of the embedding delta is exercised) and a word-level tokenizer whose chat template has role headers (Magpie samples
an instruction after an empty user turn's header). Its vocabulary mixes plain and code words, so sampled instructions
fall into both classes of the prompt set.
"""

from __future__ import annotations

from pathlib import Path

import torch

SPECIALS = ("<pad>", "<unk>", "<|im_start|>", "<|im_end|>")
WORDS = tuple(
    [
        "user",
        "assistant",
        "system",
        "explain",
        "why",
        "how",
        "what",
        "write",
        "story",
        "poem",
        "letter",
        "email",
        "summarize",
        "compare",
        "advice",
        "recipe",
        "travel",
        "history",
        "science",
        "water",
        "light",
        "plants",
        "dogs",
        "music",
        "weather",
        "friends",
        "health",
        "sleep",
        "garden",
        "city",
        "money",
        "book",
        "python",
        "function",
        "code",
        "sql",
        "the",
        "a",
        "of",
        "and",
        "to",
        "in",
        "is",
        "for",
        "with",
        "please",
        "can",
        "you",
        "me",
        "about",
        "short",
        "simple",
    ]
)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
    "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)


def tiny_tokenizer():
    """A word-level tokenizer over `SPECIALS` + `WORDS` (unknown words become `<unk>`), padding on the left."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate((*SPECIALS, *WORDS))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def build_tiny_checkpoint(folder: Path, seed: int = 0) -> Path:
    """Writes (once) a random tied-embedding Llama and its tokenizer into `folder`; returns the folder.

    Weights are drawn with a large init range (as tests/tiny_models.py does) so that greedy argmaxes are not decided by
    float rounding: the rehearsal checks trajectories against greedy exactly.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    if (folder / "config.json").is_file():
        return folder
    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(SPECIALS) + len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=0.25,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.clamp_(-1.0, 1.0)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
