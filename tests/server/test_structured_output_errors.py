"""Constraints the server cannot serve are the client's 400, named, with one line in the request
log and no traceback: a schema nested past the limit (as JSON text, as an object, as a forced
tool call's parameters), a body nested too deeply to parse at all, a grammar that matches
nothing. The tiny model in this process (its tokenizer is enough to compile constraints)."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from pagedock.limits import MAX_STRUCTURED_OUTPUT_DEPTH
from tests.server.inprocess_server import InProcessServer

DEPTH_MESSAGE = f"at most {MAX_STRUCTURED_OUTPUT_DEPTH} levels of objects and arrays"


def nested_schema(depth: int) -> dict[str, Any]:
    """An object schema of at most `depth` levels, `depth` when odd (each property adds two: its
    object and its properties; the innermost schema is one)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range((depth - 1) // 2):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def post(server: InProcessServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def completion(**fields: Any) -> dict[str, Any]:
    return {"prompt": "hi", "max_tokens": 4, **fields}


def assert_rejected_once(
    caplog: pytest.LogCaptureFixture, response: httpx.Response, param: str, message: str
) -> None:
    """A 400 in OpenAI's shape naming `param` and saying `message`; one request_rejected line
    in the log and no traceback."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert message in error["message"]
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "pagedock.requests"]
    assert [line["event"] for line in lines] == ["request_rejected"]
    assert lines[0]["status"] == 400 and message in lines[0]["message"]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize("as_text", [False, True], ids=["object", "json-text"])
def test_a_schema_nested_past_the_limit_is_a_400_naming_the_limit(
    inprocess_server: InProcessServer, caplog: pytest.LogCaptureFixture, as_text: bool
) -> None:
    schema = nested_schema(490)
    constraint = {"json": json.dumps(schema) if as_text else schema}
    with caplog.at_level(logging.INFO):
        response = post(
            inprocess_server, "/v1/completions", completion(structured_outputs=constraint)
        )
    assert_rejected_once(caplog, response, "structured_outputs", DEPTH_MESSAGE)


def test_a_schema_text_too_deep_for_the_json_parser_is_a_400_too(
    inprocess_server: InProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    text = '{"items": ' * 2000 + "{}" + "}" * 2000  # json.loads alone: RecursionError
    with caplog.at_level(logging.INFO):
        response = post(
            inprocess_server, "/v1/completions", completion(structured_outputs={"json": text})
        )
    assert_rejected_once(caplog, response, "structured_outputs", DEPTH_MESSAGE)


def test_a_schema_within_the_limit_is_served(inprocess_server: InProcessServer) -> None:
    schema = nested_schema(MAX_STRUCTURED_OUTPUT_DEPTH)
    response = post(
        inprocess_server, "/v1/completions", completion(structured_outputs={"json": schema})
    )
    assert response.status_code == 200, response.text


def test_a_forced_tool_call_s_deep_parameters_are_a_400_naming_tools(
    inprocess_server: InProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": nested_schema(200)}}
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "tools": [tool],
        "tool_choice": "required",
    }
    with caplog.at_level(logging.INFO):
        response = post(inprocess_server, "/v1/chat/completions", body)
    assert_rejected_once(caplog, response, "tools", DEPTH_MESSAGE)
    assert response.json()["error"]["message"].startswith("the forced tool call's schema")


def test_a_body_nested_too_deeply_to_parse_is_a_400_saying_so(
    inprocess_server: InProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    content = '{"prompt": "hi", "structured_outputs": {"json": ' + "[" * 5000 + "]" * 5000 + "}}"
    with caplog.at_level(logging.INFO):
        response = httpx.post(
            f"{inprocess_server.url}/v1/completions",
            content=content,
            headers={"content-type": "application/json"},
            timeout=60,
        )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "the request body's JSON is nested too deeply to parse"
    )
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "grammar", ["root ::= a\na ::= a", 'root ::= a\na ::= a "x"'], ids=["self", "left-recursive"]
)
def test_a_grammar_that_matches_nothing_is_a_400(
    inprocess_server: InProcessServer, caplog: pytest.LogCaptureFixture, grammar: str
) -> None:
    with caplog.at_level(logging.INFO):
        response = post(
            inprocess_server, "/v1/completions", completion(structured_outputs={"grammar": grammar})
        )
    assert_rejected_once(caplog, response, "structured_outputs", "matches no text")


def test_a_grammar_that_matches_something_is_served(inprocess_server: InProcessServer) -> None:
    grammar = 'root ::= a\na ::= "x" | a "x"'  # left-recursive, with a base case
    response = post(
        inprocess_server,
        "/v1/completions",
        completion(structured_outputs={"grammar": grammar}, max_tokens=3),
    )
    assert response.status_code == 200, response.text
    assert set(response.json()["choices"][0]["text"]) <= {"x"}


@pytest.mark.parametrize("stream", [False, True])
def test_a_grammar_that_dead_ends_after_its_first_token_fails_as_the_client_s_400(
    inprocess_server: InProcessServer, stream: bool
) -> None:
    # The first-token check passes ("x" may start); after it, no token is allowed.
    body = completion(structured_outputs={"grammar": 'root ::= "x" a\na ::= a'}, stream=stream)
    response = post(inprocess_server, "/v1/completions", body)
    if stream:
        assert response.status_code == 200
        events = [json.loads(line[6:]) for line in response.text.splitlines() if line[6:7] == "{"]
        error = next(e["error"] for e in events if "error" in e)
    else:
        assert response.status_code == 400, response.text
        error = response.json()["error"]
    assert error["param"] == "structured_outputs" and "dead-ends" in error["message"]
