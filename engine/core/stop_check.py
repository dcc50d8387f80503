"""The stop rules a request's output is checked against after every token it appends."""

from __future__ import annotations

from engine.core.request import Request, RequestStatus


def check_stop(request: Request, token_id: int, max_model_len: int) -> RequestStatus | None:
    """The status `request` finishes with now that `token_id` (already appended) ends its output,
    or None while it goes on: EOS (unless ignore_eos) and stop_token_ids once min_tokens are out,
    then max_tokens and the context length."""
    params = request.sampling_params
    if request.num_output_tokens >= params.min_tokens:
        if token_id in request.eos_token_ids and not params.ignore_eos:
            return RequestStatus.FINISHED_STOPPED
        if token_id in request.stop_token_ids:
            request.stop_reason = token_id
            return RequestStatus.FINISHED_STOPPED
    if request.num_output_tokens >= request.max_tokens or request.num_tokens >= max_model_len:
        return RequestStatus.FINISHED_LENGTH
    return None


def append_checked(
    request: Request, token_ids: list[int], max_model_len: int
) -> tuple[list[int], RequestStatus | None]:
    """Append `token_ids` to the request's output one by one, checking the stop rules after each;
    the tokens appended (none after a stop) and the status it finishes with (None: it goes on)."""
    for count, token_id in enumerate(token_ids, 1):
        request.append_output_token(token_id)
        status = check_stop(request, token_id, max_model_len)
        if status is not None:
            return token_ids[:count], status
    return token_ids, None
