"""One batch of a collection: its prompts' trajectory rows, by either method.

`sequential` runs `generate(decoding="jacobi")` with a `TrajectoryRecorder` (plain Jacobi, one block, no recycling:
the states a block passes through in the loop users run); `parallel` runs `block_trajectories` (greedy answers first,
then every block's iterations at once). Both return `TrajectoryRow` dicts, so that a shard does not say which wrote it
(the folder's `collection.json` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..decoding.config import JacobiConfig
from ..loading import eos_token_ids
from ..measurement import generated_tokens
from .batching import left_padded
from .block_iterations import block_trajectories
from .trajectories import TrajectoryRecorder, block_states
from .trajectory_schema import TrajectoryRow

METHODS = ("sequential", "parallel")
"""The collection methods: the decoding loop's own states, or every block's iterations at once from greedy's answers."""


@dataclass(frozen=True)
class BatchCollector:
    """What every batch of one collection is decoded with."""

    model: Any
    method: str
    block_size: int
    max_new_tokens: int
    draft_seed: int
    pad_id: int
    eos_ids: frozenset[int]

    @classmethod
    def for_model(cls, model, tokenizer, method, block_size, max_new_tokens, draft_seed) -> BatchCollector:
        """The model's padding (its generation config's, else the tokenizer's, else 0) and EOS ids."""
        pad_id = model.generation_config.pad_token_id
        if pad_id is None:
            pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        eos_ids = frozenset(eos_token_ids(model.generation_config))
        return cls(model, method, block_size, max_new_tokens, draft_seed, pad_id, eos_ids)

    def rows(
        self, prompt_ids: list[str], prompts: list[list[int]], answers: list[list[int]] | None = None
    ) -> list[dict[str, Any]]:
        """The trajectory rows of one batch (`prompts`: token ids, chat template applied); with `answers` (parallel
        method only), the model's states converge to those answers instead of its own greedy ones."""
        found = self._sequential(prompts) if self.method == "sequential" else self._parallel(prompts, answers)
        return [
            TrajectoryRow(
                prompt_id=prompt_id,
                prompt_ids=ids,
                completion_ids=answer,
                block_size=self.block_size,
                states=states,
                fixed_points=[block[-1] for block in states],
                forward_passes=passes,
            ).to_dict()
            for prompt_id, ids, (answer, states, passes) in zip(prompt_ids, prompts, found, strict=True)
        ]

    @torch.no_grad()
    def _sequential(self, prompts: list[list[int]]) -> list[tuple[list[int], list, int]]:
        recorder = TrajectoryRecorder()
        config = JacobiConfig(block_size=self.block_size, draft_seed=self.draft_seed)
        inputs = left_padded(prompts, self.pad_id, self.model.device)
        width = inputs["input_ids"].shape[1]
        out = self.model.generate(
            **inputs,
            max_new_tokens=self.max_new_tokens,
            do_sample=False,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            trajectory_recorder=recorder,
            **config.to_generate_kwargs(),
        )
        found = []
        for row in range(len(prompts)):
            generated = generated_tokens(out.sequences[row, width:], self.eos_ids)
            blocks = block_states(recorder.steps.get(row, []), generated, self.block_size)
            found.append((generated, blocks, int(out.forward_passes[row])))
        return found

    def _parallel(
        self, prompts: list[list[int]], answers: list[list[int]] | None = None
    ) -> list[tuple[list[int], list, int]]:
        found = block_trajectories(
            self.model,
            prompts,
            self.block_size,
            max_new_tokens=self.max_new_tokens,
            pad_id=self.pad_id,
            eos_ids=set(self.eos_ids),
            draft_seed=self.draft_seed,
            answers=answers,
        )
        return list(zip(found.answers, found.states, found.forward_passes, strict=True))
