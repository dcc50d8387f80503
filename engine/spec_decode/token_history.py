"""A running request's tokens as one numpy array for the proposer, kept up to date by copying
only what was appended since the last step. Converting the whole list every step cost ten times
the proposal itself (timeit, 2,000 tokens: ~45 us against ~4 us), for every running request."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class TokenHistory:
    def __init__(self) -> None:
        self._array = np.empty(0, dtype=np.int64)
        self._length = 0

    def view(self, token_ids: Sequence[int]) -> np.ndarray:
        """`token_ids` (the request's tokens: they only ever grow) as an array; valid until the
        next call."""
        length = len(token_ids)
        if length < self._length:  # not the request it was made for: start again
            self._length = 0
        if length > len(self._array):
            grown = np.empty(max(length, 2 * len(self._array)), dtype=np.int64)
            grown[: self._length] = self._array[: self._length]
            self._array = grown
        self._array[self._length : length] = token_ids[self._length : length]
        self._length = length
        return self._array[:length]
