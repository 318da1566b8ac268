"""Jacobi trajectories: the states a block passes through on its way to the fixed point.

The decoding loop keeps a rolling chain of drafts rather than a fixed block (see `decoding/chain.py`), so the
trajectory of each fixed block [j*n, (j+1)*n) of the generated text is rebuilt from what the loop fed at every
iteration: at iteration t, with the chain starting at generated index s_t, the block's state holds the committed tokens
up to s_t, the chain's drafts where the chain covers the block, and, where the chain has not reached yet, the draft the
position will start from when it does (its initial draft). The first state is therefore the block's initial draft
(noise 1 unless a draft happened to be right) and the last one its fixed point, the text greedy decoding commits.
Keeping the initial draft matters: the reference implementation overwrites it, so its noisiest states are lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TrajectoryRecorder:
    """Collects, per batch row, every (start, chain) pair the Jacobi loop fed; plugs into `generate` as
    `trajectory_recorder=`."""

    steps: dict[int, list[tuple[int, list[int]]]] = field(default_factory=dict)

    def record(self, row: int, start: int, tokens: list[int]) -> None:
        self.steps.setdefault(row, []).append((start, tokens))


def block_states(steps: list[tuple[int, list[int]]], generated: list[int], block_size: int) -> list[list[list[int]]]:
    """Per complete block of `generated`, its distinct successive states, from the initial draft to the fixed point.

    A trailing partial block (generation stopped inside it) has no fixed point of full length and is left out.
    """
    n = block_size
    initial = list(generated)  # a position no chain ever drafted (the first token) starts from its committed token
    drafted = [False] * len(generated)
    for start, tokens in steps:
        for offset in range(1, len(tokens)):
            position = start + offset
            if position < len(generated) and not drafted[position]:
                initial[position], drafted[position] = tokens[offset], True

    blocks = []
    for first in range(0, len(generated) - n + 1, n):
        end = first + n
        states = [initial[first:end]]
        for start, tokens in steps:
            if start >= end - 1 or start + len(tokens) <= first:
                continue  # the block is complete already, or the chain has not reached it yet
            state = []
            for position in range(first, end):
                if position <= start:
                    state.append(generated[position])
                elif position < start + len(tokens):
                    state.append(tokens[position - start])
                else:
                    state.append(initial[position])
            if state != states[-1]:
                states.append(state)
        fixed_point = generated[first:end]
        if states[-1] != fixed_point:
            states.append(fixed_point)
        blocks.append(states)
    return blocks


def first_mismatch(state: list[int], fixed_point: list[int]) -> int:
    """Index of the first token where a state differs from its fixed point; the block size when it is converged."""
    return next((i for i, (a, b) in enumerate(zip(state, fixed_point, strict=True)) if a != b), len(fixed_point))


def noise_level(state: list[int], fixed_point: list[int]) -> float:
    """The paper's noise of a state: the share of the block from its first wrong token on, 0 (converged) to 1."""
    return (len(fixed_point) - first_mismatch(state, fixed_point)) / len(fixed_point)
