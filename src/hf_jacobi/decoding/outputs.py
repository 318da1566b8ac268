"""The object generate(..., return_dict_in_generate=True) returns under decoding="jacobi"."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput


@dataclass
class JacobiDecoderOnlyOutput(GenerateDecoderOnlyOutput):
    """A `GenerateDecoderOnlyOutput` that also says how many forwards each row cost.

    Args:
        forward_passes: LongTensor [batch]: decoding forwards each row took part in, prefill not included. Tokens per
            forward of a row is its number of new tokens divided by this. `past_key_values` is None: the Jacobi cache
            holds rejected-draft slots and dropped rows, so it is not a cache greedy decoding could continue from.
    """

    forward_passes: torch.LongTensor | None = None
