"""The object generate(..., return_dict_in_generate=True) returns under decoding="jacobi"."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput


@dataclass
class JacobiDecoderOnlyOutput(GenerateDecoderOnlyOutput):
    """A `GenerateDecoderOnlyOutput` that also says what each row cost.

    Its cache (`cache`, or `past_key_values` before transformers 5.24) is None: the Jacobi cache holds rejected-draft
    slots and dropped rows, so it is not a cache greedy decoding could continue from.

    Args:
        forward_passes: LongTensor [batch]: decoding forwards each row took part in, prefill not included. Tokens per
            forward of a row is its number of new tokens divided by this.
        forward_tokens: LongTensor [batch]: tokens the row fed through those forwards (chain and candidate branches,
            padding excluded); divided by forward_passes, the mean width of a forward.
        recycled_tokens: LongTensor [batch]: committed draft tokens that came from recycled n-gram candidates rather
            than from the draft chain.
    """

    forward_passes: torch.LongTensor | None = None
    forward_tokens: torch.LongTensor | None = None
    recycled_tokens: torch.LongTensor | None = None
