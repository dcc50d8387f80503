"""From an OpenAI request's `response_format` or vLLM's `structured_outputs` extra to the engine's
StructuredOutputsParams (which validates the constraint; the engine compiles it)."""

from __future__ import annotations

from engine.inputs.sampling_params import StructuredOutputsParams
from pagedock.errors import InvalidRequestError
from pagedock.protocol import SamplingFields


def structured_outputs_of(request: SamplingFields) -> StructuredOutputsParams | None:
    """The request's constraint, or None; InvalidRequestError (400) for a removed `guided_*`
    field, for both `response_format` and `structured_outputs`, or for a malformed one."""
    removed = request.removed_guided_field()
    if removed is not None:
        raise InvalidRequestError(
            f"`{removed}` was removed (as in vLLM); send the constraint in `structured_outputs` "
            'instead, e.g. "structured_outputs": {"json": <schema>}, {"regex": ...}, '
            '{"choice": [...]} or {"grammar": ...}',
            removed,
        )
    from_format = _from_response_format(request)
    fields = request.structured_outputs
    if fields is None:
        return from_format
    if from_format is not None:
        raise InvalidRequestError(
            "set either `response_format` or `structured_outputs`, not both", "structured_outputs"
        )
    return StructuredOutputsParams(
        json=fields.json_,
        regex=fields.regex,
        choice=fields.choice,
        grammar=fields.grammar,
        json_object=bool(fields.json_object),
    )


def _from_response_format(request: SamplingFields) -> StructuredOutputsParams | None:
    response_format = request.response_format
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return StructuredOutputsParams(json_object=True)
    spec = response_format.json_schema
    if spec is None or spec.json_schema is None:
        raise InvalidRequestError(
            "response_format of type json_schema needs json_schema.schema",
            "response_format.json_schema",
        )
    # NOTE: `strict` is accepted and the schema is enforced either way: guided decoding cannot
    # produce output outside it, which is what strict asks for.
    return StructuredOutputsParams(json=spec.json_schema)
