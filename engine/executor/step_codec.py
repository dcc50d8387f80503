"""A step's batch as one flat int32 buffer: what rank 0 sends the other ranks every step.

The worker ranks need only what shapes the forward pass (the tokens, where they sit, which
blocks hold their context, which rows sample or give prompt logprobs: every rank computes the
same logits rows, which rank 0 gathers), not request ids, sampling parameters or token histories,
so a step costs 4 bytes per new token and per block id plus 24 per sequence:

    | num_seqs | (num_computed, num_new, do_sample, num_blocks, prompt-logprob row offset and
    count) x num_seqs | new tokens | block ids |

The order of the batch is kept: every rank runs the same forward pass on the same rows.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from engine.core.scheduler_output import ScheduledRequest
from engine.inputs.sampling_params import SamplingParams

_FIELDS_PER_SEQ = 6
# What a worker's decoded requests carry for the fields it never reads.
_UNUSED_PARAMS = SamplingParams()


def encode_step(batch: list[ScheduledRequest]) -> bytes:
    num_seqs = len(batch)
    header = np.empty(1 + _FIELDS_PER_SEQ * num_seqs, dtype=np.int32)
    header[0] = num_seqs
    header[1:] = np.fromiter(
        chain.from_iterable(
            (
                s.num_computed_tokens,
                s.num_new_tokens,
                s.do_sample,
                len(s.block_ids),
                s.prompt_logprobs_offset,
                s.num_prompt_logprobs_rows,
            )
            for s in batch
        ),
        dtype=np.int32,
        count=_FIELDS_PER_SEQ * num_seqs,
    )
    tokens = np.fromiter(chain.from_iterable(s.new_token_ids for s in batch), dtype=np.int32)
    blocks = np.fromiter(chain.from_iterable(s.block_ids for s in batch), dtype=np.int32)
    return header.tobytes() + tokens.tobytes() + blocks.tobytes()


def decode_step(payload: bytes) -> list[ScheduledRequest]:
    flat = np.frombuffer(payload, dtype=np.int32)
    num_seqs = int(flat[0])
    fields = flat[1 : 1 + _FIELDS_PER_SEQ * num_seqs].reshape(num_seqs, _FIELDS_PER_SEQ).tolist()
    offset = 1 + _FIELDS_PER_SEQ * num_seqs
    num_tokens = sum(f[1] for f in fields)
    tokens = flat[offset : offset + num_tokens].tolist()
    blocks = flat[offset + num_tokens :].tolist()
    batch, tok, blk = [], 0, 0
    for num_computed, num_new, do_sample, num_blocks, logprobs_offset, logprobs_rows in fields:
        batch.append(
            ScheduledRequest(
                request_id="",
                new_token_ids=tokens[tok : tok + num_new],
                num_computed_tokens=num_computed,
                block_ids=blocks[blk : blk + num_blocks],
                do_sample=bool(do_sample),
                sampling_params=_UNUSED_PARAMS,
                prompt_token_ids=[],
                output_token_ids=[],
                prompt_logprobs_offset=logprobs_offset,
                num_prompt_logprobs_rows=logprobs_rows,
            )
        )
        tok, blk = tok + num_new, blk + num_blocks
    return batch
