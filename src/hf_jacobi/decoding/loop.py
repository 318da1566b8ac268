"""The Jacobi decoding loop: the one place where blocks are drafted, verified and committed.

It runs as a `custom_generate` callable, so generate() has already resolved the generation config, built the logits
processors and stopping criteria, and prepared the prompt's attention mask and position ids. Each iteration feeds
every active row's block [last committed token, drafts...] through one forward, takes the tokens greedy would choose at
every block position, commits the longest run that matches the drafts plus one, and turns the rest of the predictions
into the next drafts (the Jacobi update). Rows commit different numbers of tokens; `KVSlots` keeps the shared cache
consistent with per-row holes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList, StaticCache, StoppingCriteriaList
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer
from transformers.generation.streamers import BaseStreamer

from .config import JacobiConfig
from .drafts import PromptDrafter
from .kv import AttentionLayout, KVSlots
from .outputs import JacobiDecoderOnlyOutput
from .stopping import RowStopper
from .verify import accepted_draft_counts, process_block_logits

SUPPORTED_ATTENTION = ("sdpa", "eager")


@dataclass
class JacobiRuntime:
    """What a Jacobi call needs beyond generate()'s own arguments.

    generate() does not hand a callable `custom_generate` its streamer, so it travels here.
    """

    config: JacobiConfig
    streamer: BaseStreamer | None = None


def check_generation_config(model, generation_config: GenerationConfig, model_kwargs: dict[str, Any]) -> None:
    """Rejects settings that Jacobi decoding cannot honour losslessly, naming the value and what is accepted."""
    if model.config.is_encoder_decoder:
        raise ValueError("decoding='jacobi' supports decoder-only models; this model is an encoder-decoder.")
    attn = getattr(model.config, "_attn_implementation", None) or "eager"
    if attn not in SUPPORTED_ATTENTION:
        raise ValueError(
            f"decoding='jacobi' needs an attention implementation that takes 4D masks, one of {list(SUPPORTED_ATTENTION)};"
            f" the model uses {attn!r}. Load it with attn_implementation='sdpa' or call model.set_attn_implementation('sdpa')."
        )
    if generation_config.num_beams != 1:
        raise ValueError(f"decoding='jacobi' is greedy: num_beams must be 1, got {generation_config.num_beams}.")
    if generation_config.do_sample:
        raise ValueError("decoding='jacobi' currently supports greedy decoding only: do_sample must be False.")
    if generation_config.num_return_sequences not in (None, 1):
        raise ValueError(
            f"decoding='jacobi' returns one sequence per prompt: num_return_sequences must be 1, "
            f"got {generation_config.num_return_sequences}."
        )
    if generation_config.penalty_alpha is not None and generation_config.top_k not in (None, 1):
        raise ValueError("decoding='jacobi' cannot be combined with contrastive search (penalty_alpha).")
    if not generation_config.use_cache:
        raise ValueError("decoding='jacobi' needs the KV cache: use_cache must be True.")
    for flag in ("output_scores", "output_logits", "output_attentions", "output_hidden_states"):
        if getattr(generation_config, flag, False):
            raise ValueError(f"decoding='jacobi' does not return per-step tensors: {flag} must be False.")
    cache = model_kwargs.get("past_key_values")
    if generation_config.cache_implementation not in (None, "dynamic") or isinstance(cache, StaticCache):
        raise ValueError(
            "decoding='jacobi' needs a dynamic cache that can roll back rejected drafts; got "
            f"cache_implementation={generation_config.cache_implementation!r}. Accepted: None or 'dynamic'."
        )
    if cache is not None and getattr(cache, "_is_user_defined", False):
        raise ValueError("decoding='jacobi' builds its own cache: do not pass past_key_values.")


def jacobi_decode(
    model,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    jacobi_runtime: JacobiRuntime,
    **model_kwargs,
) -> JacobiDecoderOnlyOutput | torch.LongTensor:
    """Greedy-identical generation by Jacobi iteration; the signature is the one generate() calls."""
    check_generation_config(model, generation_config, model_kwargs)
    config, streamer = jacobi_runtime.config, jacobi_runtime.streamer
    n = config.block_size
    device = input_ids.device
    batch, prompt_len = input_ids.shape
    layout = AttentionLayout.from_config(model.config)
    stopper = RowStopper(stopping_criteria)
    pad_id = generation_config._pad_token_tensor
    pad_id = int(pad_id) if pad_id is not None else 0
    capacity = max(generation_config.max_length - prompt_len, 1)

    # Prefill exactly as greedy does (same call, same kernels), into a cache that keeps full history on every layer.
    prompt_mask = model_kwargs.get("attention_mask")
    prompt_valid = prompt_mask.bool() if prompt_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    prompt_positions = model_kwargs.get("position_ids")
    if prompt_positions is None:
        prompt_positions = (prompt_valid.long().cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    model_kwargs["past_key_values"] = cache
    outputs = model._prefill(input_ids, generation_config, model_kwargs)
    if any(
        isinstance(layer, DynamicSlidingWindowLayer) or not isinstance(layer, DynamicLayer) for layer in cache.layers
    ):
        raise ValueError("decoding='jacobi' supports models whose cache layers are plain dynamic layers.")
    slots = KVSlots(prompt_valid, prompt_positions.to(torch.long), layout)
    first_scores = logits_processor(input_ids, outputs.logits[:, -1].to(dtype=torch.float32, copy=True))
    first_tokens = first_scores.argmax(dim=-1)
    del outputs

    # Per-row state. Token lists on the host decide commits and build the output; `sequences` on the device gives
    # processors and stopping criteria the exact prefixes greedy would show them.
    sequences = torch.full((batch, prompt_len + capacity + n), pad_id, dtype=torch.long, device=device)
    sequences[:, :prompt_len] = input_ids
    generated: list[list[int]] = [[] for _ in range(batch)]
    finish_at: list[int | None] = [None] * batch
    forward_passes = torch.zeros(batch, dtype=torch.long)
    stream = _ColumnStreamer(streamer, generated, finish_at, stopper.pads_finished_rows, pad_id)

    def commit(row: int, candidates: list[int]) -> int:
        """Appends accepted tokens to a row until it must stop; returns how many it took."""
        taken = 0
        for token in candidates:
            if _row_done(row):
                break
            generated[row].append(token)
            taken += 1
            length = prompt_len + len(generated[row])
            if finish_at[row] is None and stopper.is_finished(
                token, length, lambda length=length: sequences[row : row + 1, :length]
            ):
                finish_at[row] = len(generated[row])
        return taken

    def _row_done(row: int) -> bool:
        if len(generated[row]) >= capacity:
            return True
        if finish_at[row] is None:
            return False
        if stopper.pads_finished_rows:
            return True
        # Without EOS, greedy keeps decoding finished rows until the last row finishes: match that length.
        if any(f is None for f in finish_at):
            return False
        return len(generated[row]) >= max(f for f in finish_at if f is not None)

    sequences[:, prompt_len] = first_tokens
    for row, token in enumerate(first_tokens.tolist()):
        commit(row, [token])
    stream.flush()

    drafter = PromptDrafter(input_ids, prompt_valid, seed=config.draft_seed)
    rows = torch.arange(batch, device=device)  # original indices of the rows still decoding
    block = torch.cat([first_tokens[:, None], drafter.draw(rows, n - 1)], dim=1)
    next_positions = prompt_positions[:, -1].to(torch.long) + 1
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    steps = torch.arange(n, device=device)
    forward_kwargs = {"logits_to_keep": 0} if model._supports_logits_to_keep() else {}
    dtype = model.dtype

    while True:
        keep_local = [i for i, row in enumerate(rows.tolist()) if not _row_done(row)]
        if not keep_local:
            break
        if len(keep_local) < rows.shape[0]:
            local = torch.tensor(keep_local, device=device)
            slots.select_rows(cache, local)
            rows, block, next_positions = rows[local], block[local], next_positions[local]
        row_list = rows.tolist()
        committed = torch.tensor([prompt_len + len(generated[r]) for r in row_list], device=device)

        query_positions = next_positions[:, None] + steps
        logits = model(
            input_ids=block,
            attention_mask=slots.attention_mask(causal, query_positions, dtype),
            position_ids=query_positions,
            past_key_values=cache,
            use_cache=True,
            **forward_kwargs,
        ).logits.float()
        forward_passes[rows.cpu()] += 1

        # Drafts sit after each row's committed tokens so that position i is processed with its would-be context.
        write_at = committed[:, None] - 1 + steps[1:]
        row_sequences = sequences[rows].scatter(1, write_at, block[:, 1:])
        scores = process_block_logits(logits_processor, row_sequences, committed, logits, rows, batch)
        predictions = scores.argmax(dim=-1)
        accepted = accepted_draft_counts(block, predictions)
        # Every prediction is written where it would land if accepted, so that stopping criteria can read the row's
        # prefix; positions past what a row commits are overwritten by later iterations and never returned.
        sequences[rows] = sequences[rows].scatter(1, committed[:, None] + steps, predictions)

        taken = torch.tensor(
            [
                commit(row, prediction[: count + 1])
                for row, prediction, count in zip(row_list, predictions.tolist(), accepted.tolist(), strict=True)
            ],
            device=device,
        )
        stream.flush()
        slots.commit(cache, steps[None, :] < taken[:, None], query_positions)
        slots.maybe_compact(cache)

        # Jacobi update: the last committed token leads, the unverified predictions after it become the drafts.
        source = (taken - 1).clamp(min=0)[:, None] + steps
        shifted = predictions.gather(1, source.clamp(max=n - 1))
        needs_fill = source >= n
        block = torch.where(needs_fill, drafter.draw(rows, n), shifted) if bool(needs_fill.any()) else shifted
        next_positions = next_positions + taken

    stream.finish()
    sequences_out = _assemble(input_ids, generated, finish_at, stopper.pads_finished_rows, pad_id)
    if generation_config.return_dict_in_generate:
        return JacobiDecoderOnlyOutput(sequences=sequences_out, forward_passes=forward_passes.to(device))
    return sequences_out


def _final_length(generated: list[list[int]], finish_at: list[int | None], pads_finished_rows: bool) -> int:
    if pads_finished_rows:
        return max(len(tokens) for tokens in generated)
    if all(f is not None for f in finish_at):
        return max(f for f in finish_at if f is not None)
    return min(len(tokens) for tokens in generated)


def _assemble(
    input_ids: torch.Tensor,
    generated: list[list[int]],
    finish_at: list[int | None],
    pads_finished_rows: bool,
    pad_id: int,
) -> torch.Tensor:
    """prompt + generated tokens, finished rows padded the way greedy pads them."""
    length = _final_length(generated, finish_at, pads_finished_rows)
    new = torch.full((len(generated), length), pad_id, dtype=torch.long)
    for row, tokens in enumerate(generated):
        kept = tokens[:length]
        new[row, : len(kept)] = torch.tensor(kept, dtype=torch.long)
    return torch.cat([input_ids, new.to(input_ids.device)], dim=1)


class _ColumnStreamer:
    """Feeds a streamer the same per-step columns greedy would: column t once every row has its token t."""

    def __init__(
        self,
        streamer: BaseStreamer | None,
        generated: list[list[int]],
        finish_at: list[int | None],
        pads_finished_rows: bool,
        pad_id: int,
    ) -> None:
        self.streamer = streamer
        self.generated = generated
        self.finish_at = finish_at
        self.pads_finished_rows = pads_finished_rows
        self.pad_id = pad_id
        self.sent = 0

    def _column(self, t: int) -> torch.Tensor:
        return torch.tensor(
            [tokens[t] if t < len(tokens) else self.pad_id for tokens in self.generated], dtype=torch.long
        )

    def _ready(self) -> int:
        ready = []
        for tokens, finish in zip(self.generated, self.finish_at, strict=True):
            padded_from_here = self.pads_finished_rows and finish is not None
            ready.append(None if padded_from_here else len(tokens))
        known = [r for r in ready if r is not None]
        return min(known) if known else max(len(tokens) for tokens in self.generated)

    def flush(self, upto: int | None = None) -> None:
        if self.streamer is None:
            return
        end = self._ready() if upto is None else upto
        while self.sent < end:
            self.streamer.put(self._column(self.sent))
            self.sent += 1

    def finish(self) -> None:
        if self.streamer is None:
            return
        self.flush(_final_length(self.generated, self.finish_at, self.pads_finished_rows))
        self.streamer.end()
