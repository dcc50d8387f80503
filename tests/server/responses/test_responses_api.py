"""POST /v1/responses and the stored responses' routes, through the official `openai` client on a
live server (the tiny model, the tools-aware ChatML template, two tenants): answers as the chat
path's for the same conversation, conversations by `previous_response_id` that hit the prefix
cache, streamed events in OpenAI's order, function calls and JSON-schema output in Responses form,
retrieve / delete / input_items, and tenants that never see each other's responses."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from engine.config import EngineConfig
from engine.inputs.engine_request import EngineRequest
from engine.server.openai.context import ServerOptions
from pagedock.text.chat_template import SHIPPED_TEMPLATES_DIR
from tests.server.inprocess_server import InProcessServer

pytestmark = pytest.mark.timeout(300)
ALPHA, BETA = "sk-alpha", "sk-beta"
TENANTS = {
    "tenants": [
        {"name": "alpha", "api_keys": [ALPHA]},
        {"name": "beta", "api_keys": [BETA]},
    ]
}
# A tool whose every call is short, so that guided noise from the tiny model ends soon.
SET_MODE = {
    "type": "function",
    "name": "set_mode",
    "description": "Switch the mode",
    "parameters": {
        "type": "object",
        "properties": {"mode": {"enum": ["on", "off"]}},
        "required": ["mode"],
        "additionalProperties": False,
    },
}
MODE_SCHEMA = SET_MODE["parameters"]
TEXT_EVENTS = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


@pytest.fixture(scope="module")
def server(
    long_tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InProcessServer]:
    tenants = tmp_path_factory.mktemp("responses-tenants") / "tenants.json"
    tenants.write_text(json.dumps(TENANTS))
    config = EngineConfig(
        model=str(long_tiny_model_dir),
        chat_template=str(SHIPPED_TEMPLATES_DIR / "chatml_tools.jinja"),
        max_model_len=4096,
        num_kv_blocks=512,
        num_threads=1,
        tenants=str(tenants),
    )
    options = ServerOptions(tool_call_parser="hermes", enable_auto_tool_choice=True)
    server = InProcessServer(config, options).start()
    yield server
    server.stop()


def openai_client(server: InProcessServer, key: str = ALPHA) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=120)


def model_of(server: InProcessServer) -> str:
    return server.ctx.served_model_name


def tokenize(server: InProcessServer, messages: list[dict[str, Any]], **fields: Any) -> list[int]:
    """The prompt the chat path renders for `messages` (/tokenize, the same renderer)."""
    body = {"messages": messages, **fields}
    headers = {"Authorization": f"Bearer {ALPHA}"}
    response = httpx.post(f"{server.url}/tokenize", json=body, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    tokens: list[int] = response.json()["tokens"]
    return tokens


@pytest.fixture
def prompts(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The prompt token ids of every request the engine queues while the test runs."""
    seen: list[list[int]] = []
    queue = server.ctx.engine.queue_request

    async def recording(request: EngineRequest) -> Any:
        seen.append(list(request.prompt_token_ids))
        return await queue(request)

    monkeypatch.setattr(server.ctx.engine, "queue_request", recording)
    return seen


# ---- one response -----------------------------------------------------------------------------


def test_a_string_input_is_answered_as_the_chat_path_answers_it(server: InProcessServer) -> None:
    client = openai_client(server)
    question = "Paged attention keeps KV memory in fixed-size blocks. Why?"
    response = client.responses.create(
        model=model_of(server), input=question, max_output_tokens=8, temperature=0
    )
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status in ("completed", "incomplete")
    [message] = response.output
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    chat = client.chat.completions.create(
        model=model_of(server),
        messages=[{"role": "user", "content": question}],
        max_tokens=8,
        temperature=0,
    )
    assert response.output_text == chat.choices[0].message.content
    usage = response.usage
    assert usage is not None and chat.usage is not None
    assert usage.input_tokens == chat.usage.prompt_tokens
    assert usage.output_tokens == chat.usage.completion_tokens <= 8
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.output_tokens_details.reasoning_tokens == 0
    if response.status == "incomplete":
        assert response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"


def test_items_and_instructions_render_as_their_chat_messages(
    server: InProcessServer, prompts: list[list[int]]
) -> None:
    client = openai_client(server)
    response = client.responses.create(
        model=model_of(server),
        instructions="Answer in one word.",
        input=[
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": [{"type": "input_text", "text": "Blocks?"}]},
            {"role": "assistant", "content": "Fixed-size."},
            {"type": "message", "role": "user", "content": "And batching?"},
        ],
        max_output_tokens=4,
    )
    expected = [
        {"role": "system", "content": "Answer in one word."},
        {"role": "developer", "content": "Be terse."},
        {"role": "user", "content": "Blocks?"},
        {"role": "assistant", "content": "Fixed-size."},
        {"role": "user", "content": "And batching?"},
    ]
    assert prompts == [tokenize(server, expected)]
    assert response.instructions == "Answer in one word."


# ---- conversations ----------------------------------------------------------------------------


def test_a_three_turn_conversation_continues_its_prompt_and_hits_the_prefix_cache(
    server: InProcessServer, prompts: list[list[int]]
) -> None:
    client = openai_client(server)
    block_size = server.engine.config.block_size
    questions = [
        "Continuous batching re-forms the batch at every step. What does that buy?",
        "And prefix caching?",
        "Which of the two matters more for chat?",
    ]
    extra = {"cache_salt": uuid.uuid4().hex}  # the test's own: its turn 1 finds nothing cached
    turns: list[Any] = []
    for question in questions:
        turns.append(
            client.responses.create(
                model=model_of(server),
                input=question,
                previous_response_id=turns[-1].id if turns else openai.NOT_GIVEN,
                max_output_tokens=6,
                temperature=0,
                extra_body=extra,
            )
        )
    usages = [t.usage for t in turns]
    assert all(u is not None for u in usages)
    cached = [u.input_tokens_details.cached_tokens for u in usages if u is not None]
    inputs = [u.input_tokens for u in usages if u is not None]
    assert cached[0] == 0
    # Each follow-up found at least the full blocks of the prompt before it.
    assert cached[1] >= inputs[0] // block_size * block_size > 0
    assert cached[2] >= inputs[1] // block_size * block_size
    assert [t.previous_response_id for t in turns] == [None, turns[0].id, turns[1].id]
    conversation = [
        {"role": "user", "content": questions[0]},
        {"role": "assistant", "content": turns[0].output_text},
        {"role": "user", "content": questions[1]},
        {"role": "assistant", "content": turns[1].output_text},
        {"role": "user", "content": questions[2]},
    ]
    assert prompts[2] == tokenize(server, conversation)
    assert prompts[1] == tokenize(server, conversation[:3])
    assert prompts[0] == tokenize(server, conversation[:1])


def test_a_streamed_follow_up_continues_the_conversation_without_the_earlier_instructions(
    server: InProcessServer, prompts: list[list[int]]
) -> None:
    client = openai_client(server)
    first = client.responses.create(
        model=model_of(server), input="Hello", instructions="Answer in French.", max_output_tokens=4
    )
    events = list(
        client.responses.create(
            model=model_of(server),
            input="Again",
            previous_response_id=first.id,
            max_output_tokens=4,
            stream=True,
        )
    )
    final = events[-1].response  # type: ignore[union-attr]
    assert final.previous_response_id == first.id and final.instructions is None
    # OpenAI's rule: a response's instructions are its own, never carried over to a follow-up.
    conversation = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "Again"},
    ]
    assert prompts[1] == tokenize(server, conversation)
    again = client.responses.create(
        model=model_of(server),
        input="Once more",
        previous_response_id=final.id,
        max_output_tokens=2,
    )
    assert again.status in ("completed", "incomplete")


# ---- streaming --------------------------------------------------------------------------------


def test_streamed_events_come_in_openais_order_and_add_up_to_the_answer(
    server: InProcessServer,
) -> None:
    client = openai_client(server)
    request: dict[str, Any] = {
        "model": model_of(server),
        "input": "Prefix caching reuses the blocks of shared prompts.",
        "max_output_tokens": 8,
        "temperature": 0,
    }
    events = list(client.responses.create(**request, stream=True))
    kinds = [e.type for e in events]
    final = events[-1].response  # type: ignore[union-attr]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == f"response.{final.status}"
    body = [k for i, k in enumerate(kinds[2:-1]) if i == 0 or k != kinds[2:-1][i - 1]]
    assert body == TEXT_EVENTS
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    assert deltas == done.text == final.output_text
    assert final.id == events[0].response.id  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.output_tokens > 0
    unstreamed = client.responses.create(**request)
    assert unstreamed.output_text == final.output_text
    stored = client.responses.retrieve(final.id)
    assert stored.output_text == final.output_text and stored.status == final.status


def test_the_sdks_stream_helper_parses_json_schema_output(server: InProcessServer) -> None:
    client = openai_client(server)
    text = {"format": {"type": "json_schema", "name": "mode", "schema": MODE_SCHEMA}}
    with client.responses.stream(
        model=model_of(server),
        input="Switch it on or off.",
        text=text,  # type: ignore[arg-type]
        max_output_tokens=128,
        temperature=0,
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[-1] == "response.completed" and final.status == "completed"
    assert json.loads(final.output_text)["mode"] in ("on", "off")
    assert final.text is not None and final.text.format is not None
    assert final.text.format.type == "json_schema"


# ---- tools ------------------------------------------------------------------------------------


def test_a_forced_call_is_a_function_call_item_and_its_output_continues_the_conversation(
    server: InProcessServer, prompts: list[list[int]]
) -> None:
    client = openai_client(server)
    called = client.responses.create(
        model=model_of(server),
        input="Turn it on.",
        tools=[SET_MODE],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "set_mode"},
        max_output_tokens=128,
        temperature=0,
    )
    [call] = called.output
    assert call.type == "function_call" and call.name == "set_mode"
    assert call.id is not None and call.id.startswith("fc_") and call.call_id
    assert json.loads(call.arguments)["mode"] in ("on", "off")
    assert called.status == "completed" and called.tools[0].name == "set_mode"  # type: ignore[union-attr]
    answered = client.responses.create(
        model=model_of(server),
        previous_response_id=called.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "it is on"}],
        max_output_tokens=4,
    )
    assert answered.output[0].type == "message"
    calls = [{"id": call.call_id, "function": {"name": "set_mode", "arguments": call.arguments}}]
    conversation = [
        {"role": "user", "content": "Turn it on."},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "content": "it is on", "tool_call_id": call.call_id},
    ]
    assert prompts[1] == tokenize(server, conversation)


def test_a_streamed_call_announces_its_item_then_its_arguments(server: InProcessServer) -> None:
    client = openai_client(server)
    events = list(
        client.responses.create(
            model=model_of(server),
            input="Turn it off.",
            tools=[SET_MODE],  # type: ignore[list-item]
            tool_choice="required",
            parallel_tool_calls=False,
            max_output_tokens=128,
            temperature=0,
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    body = [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]
    assert body == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    fragments = "".join(
        e.delta for e in events if e.type == "response.function_call_arguments.delta"
    )
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    [call] = events[-1].response.output  # type: ignore[union-attr]
    assert call.type == "function_call" and fragments == done.arguments == call.arguments
    assert done.item_id == call.id


# ---- stored responses -------------------------------------------------------------------------


def test_a_stored_response_is_retrieved_listed_and_deleted(server: InProcessServer) -> None:
    client = openai_client(server)
    created = client.responses.create(
        model=model_of(server),
        input=[
            {"role": "user", "content": "one", "id": "msg_one"},
            {"role": "assistant", "content": "two", "id": "msg_two"},
            {"role": "user", "content": "three", "id": "msg_three"},
        ],
        max_output_tokens=2,
        metadata={"purpose": "test"},
    )
    stored = client.responses.retrieve(created.id)
    assert stored.model_dump() == created.model_dump()
    assert stored.metadata == {"purpose": "test"}
    newest_first = client.responses.input_items.list(created.id)
    assert [i.id for i in newest_first.data] == ["msg_three", "msg_two", "msg_one"]
    page = client.responses.input_items.list(created.id, order="asc", limit=2)
    assert [i.id for i in page.data] == ["msg_one", "msg_two"] and page.has_more
    assert (page.first_id, page.last_id) == ("msg_one", "msg_two")
    rest = client.responses.input_items.list(created.id, order="asc", after="msg_two")
    assert [i.id for i in rest.data] == ["msg_three"] and not rest.has_more
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model=model_of(server), input="x", previous_response_id=created.id)
    assert error.value.code == "previous_response_not_found"


def test_an_unstored_response_cannot_be_retrieved_or_continued(server: InProcessServer) -> None:
    client = openai_client(server)
    response = client.responses.create(
        model=model_of(server), input="x", max_output_tokens=2, store=False
    )
    assert response.store is False  # type: ignore[attr-defined]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError) as error:
        client.responses.create(model=model_of(server), input="x", previous_response_id=response.id)
    assert (error.value.code, error.value.param) == (
        "previous_response_not_found",
        "previous_response_id",
    )


def test_another_tenant_cannot_see_use_or_delete_a_response(server: InProcessServer) -> None:
    alpha, beta = openai_client(server, ALPHA), openai_client(server, BETA)
    mine = alpha.responses.create(model=model_of(server), input="secret", max_output_tokens=2)
    unknown = f"resp_{uuid.uuid4().hex}"
    for response_id in (mine.id, unknown):
        with pytest.raises(openai.NotFoundError):
            beta.responses.retrieve(response_id)
        with pytest.raises(openai.NotFoundError):
            beta.responses.delete(response_id)
        with pytest.raises(openai.NotFoundError):
            beta.responses.input_items.list(response_id)
    answers = []
    for response_id in (mine.id, unknown):
        with pytest.raises(openai.BadRequestError) as error:
            beta.responses.create(
                model=model_of(server), input="x", previous_response_id=response_id
            )
        answers.append(json.dumps(error.value.body).replace(response_id, "ID"))
    assert answers[0] == answers[1]  # alike: nothing tells beta that alpha's id exists
    assert alpha.responses.retrieve(mine.id).id == mine.id


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "background": True}, "background"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({}, "input"),
        ({"input": "x", "previous_response_id": "resp_unknown"}, "previous_response_id"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}, None),
    ],
    ids=["unsupported", "item-type", "hosted-tool", "max-tokens", "no-input", "unknown", "schema"],
)
def test_bad_input_is_a_400_in_openais_shape(
    server: InProcessServer, body: dict[str, Any], param: str | None
) -> None:
    headers = {"Authorization": f"Bearer {ALPHA}"}
    response = httpx.post(f"{server.url}/v1/responses", json=body, headers=headers, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param


def test_an_unknown_response_is_a_404_and_a_bad_page_a_400(server: InProcessServer) -> None:
    headers = {"Authorization": f"Bearer {ALPHA}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        missing = http.get("/v1/responses/resp_missing")
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "not_found_error"
        assert http.get("/v1/responses/resp_missing/input_items?limit=0").status_code == 400
        assert http.get("/v1/responses/resp_missing").status_code == 404
