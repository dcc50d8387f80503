"""PromptInput: a completions request's `prompt`, as OpenAI takes it (text, token ids, or a batch
of either), validated by its shape.

NOTE: a plain union of the four shapes is tried member by member, and each failed member reports
one error per element: a 4.8 MB body of 1.6 million token ids with one string at the end took
pydantic 19.6 s and 3.2 million errors (benchmarks/results/request_costs.json), on whichever
thread parsed it (the engine server's event
loop; the router's parser pool, holding the GIL). Here the first element picks the one member to
try, every list stops at its first bad element, and a batch longer than MAX_PROMPTS is refused
before any of its prompts is validated: the same body is refused in 0.18 s with one error.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Discriminator, Field, Tag

from pagedock.limits import MAX_INT32, MAX_PROMPTS

_TokenId = Annotated[int, Field(ge=0, le=MAX_INT32)]
_TokenIds = Annotated[list[_TokenId], Field(fail_fast=True)]


def _shape(prompt: Any) -> str:
    """Which of the four shapes a prompt claims to be, by its first element. (The tags are no
    identifiers, so error locations leave them out: `prompt.3`, as the client wrote it.)"""
    if isinstance(prompt, str):
        return "prompt:text"
    if isinstance(prompt, list) and prompt:
        if isinstance(prompt[0], str):
            return "prompt:texts"
        if isinstance(prompt[0], list):
            return "prompt:token_id_lists"
    return "prompt:token_ids"


def _check_batch_size(prompt: Any) -> Any:
    batch = isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list)
    if batch and len(prompt) > MAX_PROMPTS:
        raise ValueError(f"a batch may hold at most {MAX_PROMPTS} prompts, got {len(prompt)}")
    return prompt


PromptInput = Annotated[
    Annotated[str, Tag("prompt:text")]
    | Annotated[list[str], Field(fail_fast=True), Tag("prompt:texts")]
    | Annotated[_TokenIds, Tag("prompt:token_ids")]
    | Annotated[list[_TokenIds], Field(fail_fast=True), Tag("prompt:token_id_lists")],
    Discriminator(_shape),
    BeforeValidator(_check_batch_size),
]
"""A prompt: text, token ids, or a batch of either."""


def num_prompts(prompt: str | list[str] | list[int] | list[list[int]]) -> int:
    """How many prompts a validated `prompt` holds."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        return len(prompt)
    return 1
