"""The copy-heavy chat workload (issue 40): chat requests that ask the model to repeat a given
paragraph exactly, or to return it with its typos fixed, so that most of the answer is text the
prompt already holds (what n-gram speculation drafts from).

The paragraphs come from a plain English text (by default Debian's GPL-3, which
benchmarks/quality_nll.py reads too), split at blank lines and kept when their length falls
within a word range; the typos are seeded swaps of two adjacent letters inside a word. Every
choice is seeded, so each arm of a run, and each run, gets the same requests.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

REPEAT = "Repeat the following text exactly, with nothing before or after it:\n\n"
FIX_TYPOS = "Fix the typos in the following text and return all of it, with nothing else:\n\n"
_WORD = re.compile(r"[A-Za-z]{4,}")


@dataclass(frozen=True)
class CopyRequest:
    kind: str
    """`repeat` or `fix-typos`."""
    paragraph: str
    """The text as the prompt gives it (with its typos, for `fix-typos`)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        instruction = REPEAT if self.kind == "repeat" else FIX_TYPOS
        return [{"role": "user", "content": instruction + self.paragraph}]


def paragraphs(text: str, min_words: int, max_words: int) -> list[str]:
    """The blank-line-separated paragraphs of `text` of min_words..max_words words, each with its
    whitespace collapsed to single spaces, in the order of the text."""
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words} and {max_words}")
    found = (" ".join(block.split()) for block in re.split(r"\n\s*\n", text))
    return [p for p in found if min_words <= len(p.split()) <= max_words]


def with_typos(paragraph: str, rng: random.Random, rate: float) -> str:
    """`paragraph` with about `rate` of its words of four letters or more spoilt by swapping two
    adjacent letters inside them (never the first letter)."""

    def spoil(match: re.Match[str]) -> str:
        word = match.group()
        if rng.random() >= rate:
            return word
        i = rng.randrange(1, len(word) - 1)
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]

    return _WORD.sub(spoil, paragraph)


def copy_requests(
    pool: list[str], count: int, seed: int, typo_rate: float = 0.05
) -> list[CopyRequest]:
    """`count` requests on distinct paragraphs drawn from `pool` (seeded), alternately `repeat`
    and `fix-typos`."""
    if count > len(pool):
        raise ValueError(f"{count} requests need as many paragraphs; the text has {len(pool)}")
    rng = random.Random(seed)
    chosen = rng.sample(pool, count)
    return [
        CopyRequest("repeat", text)
        if i % 2 == 0
        else CopyRequest("fix-typos", with_typos(text, rng, typo_rate))
        for i, text in enumerate(chosen)
    ]


def split_pool(pool: list[str], sizes: list[int], seed: int) -> list[list[str]]:
    """Disjoint parts of `pool` of `sizes` paragraphs (seeded): each scenario of a run, and its
    warm-up, gets paragraphs of its own, so none finds another's prompt in the prefix cache."""
    if sum(sizes) > len(pool):
        raise ValueError(f"{sum(sizes)} paragraphs asked for; the text has {len(pool)}")
    shuffled = random.Random(seed).sample(pool, len(pool))
    parts, start = [], 0
    for size in sizes:
        parts.append(shuffled[start : start + size])
        start += size
    return parts
