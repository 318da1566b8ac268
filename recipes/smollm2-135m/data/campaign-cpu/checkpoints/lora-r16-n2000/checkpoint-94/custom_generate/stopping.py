"""generate()'s stopping criteria, applied one row and one token at a time.

Greedy decoding checks its criteria after every token on the whole batch. Jacobi commits several tokens per forward
and each row commits its own number, so the same criteria are replayed on every committed token of every row, with
exactly the prefix greedy would have shown them. EOS and max-length, which every call has, are checked directly; any
other criterion (stop strings, max time, user criteria) is called on a one-row view of the sequence.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria, StoppingCriteriaList


class RowStopper:
    """Decides, after each committed token, whether its row is finished."""

    def __init__(self, stopping_criteria: StoppingCriteriaList) -> None:
        self.eos_ids: set[int] = set()
        self.max_length: int | None = None
        self.others = []
        for criterion in stopping_criteria:
            if isinstance(criterion, EosTokenCriteria):
                self.eos_ids.update(int(t) for t in torch.as_tensor(criterion.eos_token_id).flatten().tolist())
            elif isinstance(criterion, MaxLengthCriteria):
                length = int(criterion.max_length)
                self.max_length = length if self.max_length is None else min(self.max_length, length)
            else:
                self.others.append(criterion)
        # Greedy pads finished rows only when some criterion knows an EOS token; otherwise a finished row keeps
        # producing real tokens until every row is finished.
        self.pads_finished_rows = any(hasattr(c, "eos_token_id") for c in stopping_criteria)

    def is_finished(self, token: int, length: int, row_sequence: Callable[[], torch.Tensor]) -> bool:
        """Whether a row is finished once `token` is its last token and its sequence is `length` long.

        row_sequence returns the row's sequence as LongTensor [1, length]; it is only built for criteria that read it.
        """
        if token in self.eos_ids:
            return True
        if self.max_length is not None and length >= self.max_length:
            return True
        if not self.others:
            return False
        sequence = row_sequence()
        return any(bool(criterion(sequence, None).any()) for criterion in self.others)
