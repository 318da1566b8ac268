"""The Jacobi decoding loop: the one place where drafts are proposed, verified and committed.

It runs as a `custom_generate` callable, so generate() has already resolved the generation config, built the logits
processors (sampling warpers included) and stopping criteria, and prepared the prompt's attention mask and position
ids. Each iteration feeds every active row's draft chain [last committed token, drafts...] (one or more blocks,
`DraftChain`) and its recycled candidate n-grams (`NgramPool`) through one forward (`StepLayout`), processes the
scores at every column with the context the reference decoding would have had, and lets the acceptance rule walk the
proposals (`greedy_verdict` or `sampled_verdict`). The row commits the accepted tokens plus one, keeps their KV, feeds
the pool, and turns the rest of the predictions into the next drafts (the Jacobi update). Rows commit different
numbers of tokens; `KVSlots` keeps the shared cache consistent with per-row holes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList, StaticCache, StoppingCriteriaList
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer
from transformers.generation.streamers import BaseStreamer

from .acceptance import Verdict, greedy_verdict, sampled_verdict
from .chain import DraftChain
from .config import JacobiConfig
from .drafts import PromptDrafter
from .kv import AttentionLayout, KVSlots
from .outputs import JacobiDecoderOnlyOutput
from .recycling import NgramPool
from .step_layout import Branch, StepLayout
from .stopping import RowStopper
from .verify import process_column_scores

SUPPORTED_ATTENTION = ("sdpa", "eager")


class StepRecorder(Protocol):
    """Receives every draft chain the loop feeds, so that training data is recorded from the loop users run.

    `start` is the index, among the row's generated tokens, of the chain's first token (already committed); the
    tokens after it are the drafts for the positions that follow.
    """

    def record(self, row: int, start: int, tokens: list[int]) -> None: ...


@dataclass
class JacobiRuntime:
    """What a Jacobi call needs beyond generate()'s own arguments.

    generate() does not hand a callable `custom_generate` its streamer, so it travels here, with the optional
    trajectory recorder.
    """

    config: JacobiConfig
    streamer: BaseStreamer | None = None
    recorder: StepRecorder | None = None


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
        raise ValueError(
            f"decoding='jacobi' replaces greedy decoding or sampling, not beam search: num_beams must be 1, "
            f"got {generation_config.num_beams}."
        )
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
    """Jacobi generation, identical to greedy (or distributed as sampling); the signature is the one generate() calls."""
    check_generation_config(model, generation_config, model_kwargs)
    config, streamer, recorder = jacobi_runtime.config, jacobi_runtime.streamer, jacobi_runtime.recorder
    n = config.block_size
    sampling = bool(generation_config.do_sample)
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
    if sampling:
        first_tokens = torch.multinomial(torch.softmax(first_scores, dim=-1), num_samples=1).squeeze(1)
    else:
        first_tokens = first_scores.argmax(dim=-1)
    del outputs

    # Per-row state lives on the host, indexed by original row: it decides commits, builds each forward's layout and
    # the output. `sequences` mirrors the committed text on the device, so that logits processors and stopping
    # criteria see exactly the prefixes the reference decoding would show them.
    sequences = torch.full((batch, prompt_len + capacity + 1), pad_id, dtype=torch.long, device=device)
    sequences[:, :prompt_len] = input_ids
    texts = [row[valid].tolist() for row, valid in zip(input_ids.cpu(), prompt_valid.cpu(), strict=True)]
    generated: list[list[int]] = [[] for _ in range(batch)]
    finish_at: list[int | None] = [None] * batch
    forward_passes, forward_tokens, recycled_tokens = [0] * batch, [0] * batch, [0] * batch
    stream = _ColumnStreamer(streamer, generated, finish_at, stopper.pads_finished_rows, pad_id)

    def commit(row: int, candidates: list[int]) -> int:
        """Appends accepted tokens to a row until it must stop; returns how many it took."""
        start = prompt_len + len(generated[row])
        room = sequences.shape[1] - start
        sequences[row, start : start + min(len(candidates), room)] = torch.tensor(candidates[:room], dtype=torch.long)
        taken = 0
        for token in candidates:
            if _row_done(row):
                break
            generated[row].append(token)
            texts[row].append(token)
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

    for row, token in enumerate(first_tokens.tolist()):
        commit(row, [token])
    stream.flush()

    drafter = PromptDrafter(input_ids, prompt_valid, seed=config.draft_seed)
    chains = {
        row: DraftChain([token, *drafter.draw(row, n - 1)], n, config.num_blocks, config.spawn_ratio)
        for row, token in enumerate(first_tokens.tolist())
    }
    pools = {row: _seeded_pool(config, texts[row]) for row in range(batch)} if config.ngram_pool_size else {}
    positions = (prompt_positions[:, -1].to(torch.long) + 1).tolist()  # position of each row's column 0
    rows = list(range(batch))  # original indices of the rows still in the cache, in cache order
    forward_kwargs = {"logits_to_keep": 0} if model._supports_logits_to_keep() else {}
    dtype = model.dtype

    while True:
        keep_local = [i for i, row in enumerate(rows) if not _row_done(row)]
        if not keep_local:
            break
        if len(keep_local) < len(rows):
            slots.select_rows(cache, torch.tensor(keep_local, device=device))
            rows = [rows[i] for i in keep_local]
        if recorder is not None:
            for row in rows:
                recorder.record(row, len(generated[row]) - 1, list(chains[row].tokens))

        step = StepLayout(
            [chains[row].tokens for row in rows],
            [_candidates(pools.get(row), texts[row], chains[row].tokens, config) for row in rows],
            pad_id,
            device,
        )
        query_positions = torch.tensor([positions[row] for row in rows], device=device)[:, None] + step.levels
        logits = model(
            input_ids=step.tokens,
            attention_mask=slots.attention_mask(step.visible, query_positions, dtype),
            position_ids=query_positions,
            past_key_values=cache,
            use_cache=True,
            **forward_kwargs,
        ).logits.float()
        committed = [prompt_len + len(generated[row]) for row in rows]
        scores = process_column_scores(logits_processor, sequences, committed, logits, step, rows, batch)
        predictions = scores.argmax(dim=-1).tolist()

        orders, keeps = [], []
        for local, row in enumerate(rows):
            branches = step.branches[local]
            if sampling:
                verdict = sampled_verdict(branches, scores[local])
            else:
                verdict = greedy_verdict(branches, predictions[local])
            taken = commit(row, verdict.tokens)
            forward_passes[row] += 1
            forward_tokens[row] += step.columns_used[local]
            if verdict.branch:
                recycled_tokens[row] += min(verdict.accepted, taken)
            kept = verdict.columns[:taken]
            kept_set = set(kept)
            orders.append(kept + [c for c in range(step.width) if c not in kept_set])
            keeps.append(len(kept))
            if row in pools:
                _harvest(pools[row], texts[row], taken, branches[0], predictions[local])
            continuation = _continuation(branches, verdict, predictions[local], taken)
            chains[row].advance(taken, continuation, lambda count, row=row: drafter.draw(row, count))
            positions[row] += taken
        stream.flush()
        slots.commit_columns(cache, orders, keeps, query_positions)
        slots.maybe_compact(cache)

    stream.finish()
    sequences_out = _assemble(input_ids, generated, finish_at, stopper.pads_finished_rows, pad_id)
    if generation_config.return_dict_in_generate:
        return JacobiDecoderOnlyOutput(
            sequences=sequences_out,
            forward_passes=torch.tensor(forward_passes, device=device),
            forward_tokens=torch.tensor(forward_tokens, device=device),
            recycled_tokens=torch.tensor(recycled_tokens, device=device),
        )
    return sequences_out


def _seeded_pool(config: JacobiConfig, prompt: list[int]) -> NgramPool:
    """A row's pool, holding the prompt's n-grams from the start: completions often repeat the prompt's text."""
    pool = NgramPool(config.ngram_pool_size, config.candidate_length, config.ngram_key_size)
    pool.add_sequence(prompt, first_start=1, last_start=len(prompt) - pool.ngram_size)
    return pool


def _candidates(pool: NgramPool | None, text: list[int], chain: list[int], config: JacobiConfig):
    if pool is None:
        return []
    return pool.candidates(text[-config.ngram_key_size :], config.candidates_per_step, exclude=chain[1:])


def _harvest(pool: NgramPool, text: list[int], taken: int, chain: Branch, predictions: list[int]) -> None:
    """Feeds the pool what this step produced: the newly committed text and the chain's rejected tail.

    The rejected tail starts where the chain's own drafts stop matching the model; it is keyed on the draft tokens
    before it, the context it was written for, so it is proposed again if that context comes back.
    """
    size = pool.ngram_size
    pool.add_sequence(text, first_start=len(text) - taken - size + 1, last_start=len(text) - size)
    matched = greedy_verdict([chain], predictions).accepted
    if matched + 1 < len(chain):
        # Text before this step ends with chain.tokens[0]; the drafts follow it.
        context = text[max(0, len(text) - taken - pool.key_size) : len(text) - taken]
        pool.add_sequence(context + chain.tokens[1:], first_start=len(context) + matched)


def _continuation(branches: list[Branch], verdict: Verdict, predictions: list[int], taken: int) -> list[int]:
    """The next chain's known tokens: the last committed token, then the predictions after it.

    The winning branch's predictions come first; past its end, the chain's predictions for the same positions.
    """
    accepted = taken - 1
    winner, chain = branches[verdict.branch], branches[0]
    tokens = [verdict.tokens[accepted]]
    level = accepted + 1
    while level < len(chain) or level < len(winner):
        source = winner if level < len(winner) else chain
        tokens.append(predictions[source.columns[level]])
        level += 1
    return tokens


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
