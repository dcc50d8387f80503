"""Envoy ext_proc messages the endpoint picker reads and writes, as plain functions.

The names are the Gateway API Inference Extension's endpoint picker protocol (EPP protocol
v1.0.0, docs/gateway-api.md): the picked endpoints go out twice with the same value, as the
`x-gateway-destination-endpoint` request header and under the `envoy.lb` namespace of the
response's dynamic metadata; the data plane's subset hint comes in under `envoy.lb.subset_hint`;
the endpoint that served the response comes back under `envoy.lb`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from google.protobuf import json_format, struct_pb2

DESTINATION_ENDPOINT = "x-gateway-destination-endpoint"
DESTINATION_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
SERVED_KEY = "x-gateway-destination-endpoint-served"
# NOTE: a body sent back in full-duplex mode goes in pieces below Envoy's default 64 KiB gRPC
# message budget per ext_proc message (headers and framing take the rest).
BODY_CHUNK_BYTES = 60 * 1024
FULL_DUPLEX = ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = ProcessingMode.BUFFERED
NO_BODY = ProcessingMode.NONE


def header_map(headers: pb.HttpHeaders) -> dict[str, str]:
    """The request's headers (lower-case names, pseudo-headers such as :path included); Envoy
    sends the value in raw_value (older versions in value)."""
    found = {}
    for header in headers.headers.headers:
        value = header.raw_value.decode("utf-8", "replace") if header.raw_value else header.value
        found[header.key.lower()] = value
    return found


def request_body_mode(request: pb.ProcessingRequest) -> int | None:
    """The filter's request body mode, when Envoy states it (protocol_config, first message)."""
    if not request.HasField("protocol_config"):
        return None
    return int(request.protocol_config.request_body_mode)


def response_body_mode(request: pb.ProcessingRequest) -> int | None:
    if not request.HasField("protocol_config"):
        return None
    return int(request.protocol_config.response_body_mode)


def filter_metadata(request: pb.ProcessingRequest, namespace: str) -> dict[str, Any]:
    """One namespace of the request's metadata_context, as plain Python values."""
    found = request.metadata_context.filter_metadata.get(namespace)
    return json_format.MessageToDict(found) if found is not None else {}


def subset_hint(request: pb.ProcessingRequest) -> list[str] | None:
    """The endpoints the picker must choose from, or None when the data plane sets no hint. The
    protocol sends a list of `ip:port`; a comma-separated string is read too."""
    hint = filter_metadata(request, SUBSET_NAMESPACE)
    if SUBSET_KEY not in hint:
        return None
    value = hint[SUBSET_KEY]
    items: Iterable[Any] = value if isinstance(value, list) else [value]
    return [
        part.strip()
        for item in items
        if isinstance(item, str)
        for part in item.split(",")
        if part.strip()
    ]


def served_endpoint(request: pb.ProcessingRequest) -> str | None:
    served = filter_metadata(request, DESTINATION_NAMESPACE).get(SERVED_KEY)
    return served if isinstance(served, str) and served else None


def destination(endpoints: list[str]) -> tuple[pb.CommonResponse, struct_pb2.Struct]:
    """The header mutation and dynamic metadata that send the request to `endpoints` (best
    first; the data plane falls back down the list), both with the same value."""
    value = ",".join(endpoints)
    header = base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=DESTINATION_ENDPOINT, raw_value=value.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )
    # NOTE: the destination header changes the route's target: the cached route must go.
    common = pb.CommonResponse(
        header_mutation=pb.HeaderMutation(set_headers=[header]), clear_route_cache=True
    )
    metadata = struct_pb2.Struct()
    metadata.update({DESTINATION_NAMESPACE: {DESTINATION_ENDPOINT: value}})
    return common, metadata


def headers_response(
    common: pb.CommonResponse | None = None, metadata: struct_pb2.Struct | None = None
) -> pb.ProcessingResponse:
    return pb.ProcessingResponse(
        request_headers=pb.HeadersResponse(response=common or pb.CommonResponse()),
        dynamic_metadata=metadata,
    )


def body_response(
    common: pb.CommonResponse | None = None, metadata: struct_pb2.Struct | None = None
) -> pb.ProcessingResponse:
    return pb.ProcessingResponse(
        request_body=pb.BodyResponse(response=common or pb.CommonResponse()),
        dynamic_metadata=metadata,
    )


def streamed_body(body: bytes, response: bool = False) -> Iterator[pb.ProcessingResponse]:
    """The body handed back in full-duplex mode (Envoy forwards only what the processor returns),
    in pieces, the last one marked end_of_stream."""
    offsets = range(0, len(body), BODY_CHUNK_BYTES) if body else [0]
    for offset in offsets:
        piece = body[offset : offset + BODY_CHUNK_BYTES]
        last = offset + BODY_CHUNK_BYTES >= len(body)
        yield _body_piece(piece, last, response)


def request_body_piece(body: bytes, end_of_stream: bool) -> pb.ProcessingResponse:
    """One request body frame passed through unchanged (full-duplex mode)."""
    return _body_piece(body, end_of_stream, response=False)


def response_body_piece(body: bytes, end_of_stream: bool) -> pb.ProcessingResponse:
    """One response body frame passed through unchanged (full-duplex response mode)."""
    return _body_piece(body, end_of_stream, response=True)


def _body_piece(piece: bytes, last: bool, response: bool) -> pb.ProcessingResponse:
    streamed = pb.StreamedBodyResponse(body=piece, end_of_stream=last)
    common = pb.CommonResponse(body_mutation=pb.BodyMutation(streamed_response=streamed))
    if response:
        return pb.ProcessingResponse(response_body=pb.BodyResponse(response=common))
    return pb.ProcessingResponse(request_body=pb.BodyResponse(response=common))


def immediate(
    status: int, body: str, headers: Mapping[str, str], details: str
) -> pb.ProcessingResponse:
    """Answer the client directly (the request goes to no endpoint): 503, 429, 413, 400."""
    mutation = pb.HeaderMutation(
        set_headers=[
            base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=k, raw_value=v.encode()))
            for k, v in headers.items()
        ]
    )
    answer = pb.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=status),
        headers=mutation,
        body=body.encode(),
        details=details,
    )
    return pb.ProcessingResponse(immediate_response=answer)
