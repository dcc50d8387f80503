"""PromptHasher: the router's token ids are the engine server's (one renderer, one tokenizer
loader), so its block hashes are too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pagedock.kv.block_hash import hash_blocks, root_hash
from pagedock.protocol import ChatCompletionRequest, CompletionRequest
from pagedock.protocol.responses import ResponsesRequest
from pagedock.text import tokenizer as engine_tokenizer
from pagedock.text.prompt_renderer import completion_prompts
from pagedock.text.tokenizer import Tokenizer
from router.kv.prompt_hasher import PromptHasher, load_tokenizer
from tests.protocol.apps import client, server_app

ROOT = root_hash("tiny:float32")
BLOCK_SIZE = 4
SYSTEM = {"role": "system", "content": "You route requests to the replica that holds their blocks."}
USER = {"role": "user", "content": "Which replica holds my prefix? " * 8}

# Every message shape the API accepts, each as a whole conversation.
CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "user-string": [USER],
    "system-then-user": [SYSTEM, USER],
    "developer": [{"role": "developer", "content": "Answer briefly."}, USER],
    "content-parts": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Which replica "},
                {"type": "text", "text": "holds my prefix?"},
            ],
        }
    ],
    "system-parts": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, USER],
    "multi-turn": [
        SYSTEM,
        USER,
        {"role": "assistant", "content": "Replica two."},
        {"role": "user", "content": "Why?"},
    ],
    "assistant-null-content": [
        USER,
        {"role": "assistant", "content": None},
        {"role": "user", "content": "Again?"},
    ],
    "tool-result": [USER, {"role": "tool", "content": "42", "tool_call_id": "call_1"}],
    "named-user": [{"role": "user", "content": "hi", "name": "alice"}],
    "empty-string": [{"role": "user", "content": ""}],
    "assistant-continuation": [USER, {"role": "assistant", "content": "The replica"}],
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_model import make_tiny_llama_dir

    return make_tiny_llama_dir(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Tokenizer:
    tok = load_tokenizer(str(model_dir))
    assert tok is not None
    return tok


@pytest.fixture(scope="module")
def engine_server(model_dir: Path) -> TestClient:
    """The engine's HTTP app over the tokenizer the engine itself loads from the model dir."""
    return client(server_app(engine_tokenizer.load_tokenizer(model_dir)))


def engine_tokens(server: TestClient, body: dict[str, Any]) -> list[int]:
    response = server.post("/tokenize", json=body)
    assert response.status_code == 200, response.text
    tokens: list[int] = response.json()["tokens"]
    return tokens


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("messages", CONVERSATIONS.values(), ids=CONVERSATIONS.keys())
def test_chat_requests_hash_as_the_engine_server_tokenizes_them(
    tokenizer: Tokenizer,
    engine_server: TestClient,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
) -> None:
    options = {"messages": messages, "add_generation_prompt": add_generation_prompt}
    blocks = PromptHasher(tokenizer).chat(ChatCompletionRequest.model_validate(options))
    expected = engine_tokens(engine_server, options)
    assert blocks is not None
    assert blocks.token_ids == expected
    assert blocks.hashes(ROOT, BLOCK_SIZE) == hash_blocks(expected, BLOCK_SIZE, ROOT)


@pytest.mark.parametrize(
    "prompt",
    [
        "plain text prompt " * 10,
        [5, 6, 7] * 20,
        ["first prompt " * 9, "second"],
        [[9] * 40, [3, 4]],
    ],
    ids=["text", "ids", "text-batch", "ids-batch"],
)
def test_completion_prompts_hash_as_the_engine_renders_them(
    tokenizer: Tokenizer, prompt: object
) -> None:
    body = CompletionRequest.model_validate({"prompt": prompt})
    blocks = PromptHasher(tokenizer).completion(body)
    engine_prompts = completion_prompts(tokenizer, body.prompt)
    assert blocks is not None
    assert blocks.token_ids == engine_prompts[0].token_ids
    assert blocks.num_prompt_tokens == sum(len(p.token_ids) for p in engine_prompts)


def test_a_text_prompt_hashes_as_the_engine_server_tokenizes_it(
    tokenizer: Tokenizer, engine_server: TestClient
) -> None:
    text = "plain text prompt " * 10
    blocks = PromptHasher(tokenizer).completion(CompletionRequest.model_validate({"prompt": text}))
    assert blocks is not None
    assert blocks.token_ids == engine_tokens(engine_server, {"prompt": text})


def test_a_prompt_the_engine_rejects_is_not_hashed(
    tokenizer: Tokenizer, engine_server: TestClient
) -> None:
    # A lone surrogate (a JSON escape) cannot be tokenized: the engine answers 400, the router
    # routes the request unhashed so that the client gets that answer.
    body = json.dumps({"messages": [{"role": "user", "content": "\ud800"}]})
    assert engine_server.post("/tokenize", content=body).status_code == 400
    chat = ChatCompletionRequest.model_validate(json.loads(body))
    assert PromptHasher(tokenizer).chat(chat) is None
    completion = CompletionRequest.model_validate({"prompt": ["ok", "\ud800"]})
    assert PromptHasher(tokenizer).completion(completion) is None


def test_a_responses_first_turn_hashes_as_its_chat_conversation_tokenizes(
    tokenizer: Tokenizer, engine_server: TestClient
) -> None:
    # The engine serves a response by the chat path: instructions a system message, then input.
    body = {"instructions": SYSTEM["content"], "input": [USER, {"role": "user", "content": "Hm?"}]}
    blocks = PromptHasher(tokenizer).response(ResponsesRequest.model_validate(body))
    expected = engine_tokens(
        engine_server, {"messages": [SYSTEM, USER, {"role": "user", "content": "Hm?"}]}
    )
    assert blocks is not None and blocks.token_ids == expected


def test_a_responses_follow_up_or_unreadable_input_is_not_hashed(tokenizer: Tokenizer) -> None:
    hasher = PromptHasher(tokenizer)
    follow_up = {"input": "And then?", "previous_response_id": "resp_1"}
    assert hasher.response(ResponsesRequest.model_validate(follow_up)) is None
    assert hasher.response(ResponsesRequest.model_validate({"input": []})) is None
    unknown_item = {"input": [{"type": "item_reference", "id": "msg_1"}]}
    assert hasher.response(ResponsesRequest.model_validate(unknown_item)) is None


def test_hashes_use_the_replicas_root_and_block_size(tokenizer: Tokenizer) -> None:
    body = ChatCompletionRequest.model_validate({"messages": [SYSTEM, USER]})
    blocks = PromptHasher(tokenizer).chat(body)
    assert blocks is not None
    assert blocks.hashes(ROOT, 16) == hash_blocks(blocks.token_ids, 16, ROOT)
    assert blocks.hashes(ROOT, 8) == hash_blocks(blocks.token_ids, 8, ROOT)


def test_without_a_tokenizer_text_cannot_be_hashed_but_token_ids_can() -> None:
    hasher = PromptHasher(None)
    assert hasher.chat(ChatCompletionRequest.model_validate({"messages": [USER]})) is None
    assert hasher.completion(CompletionRequest.model_validate({"prompt": "text"})) is None
    ids = hasher.completion(CompletionRequest.model_validate({"prompt": [1, 2, 3]}))
    assert ids is not None and ids.token_ids == [1, 2, 3]


def test_the_router_loads_the_tokenizer_the_engine_loads(
    model_dir: Path, tokenizer: Tokenizer
) -> None:
    engines = engine_tokenizer.load_tokenizer(model_dir)
    assert engines is not None
    text = "Prefix caching reuses the blocks of shared prompts."
    assert tokenizer.encode(text) == engines.encode(text)
    assert tokenizer.chat_template == engines.chat_template


def test_the_engine_publishes_its_root_hash_in_the_kv_snapshot(tmp_path: Path) -> None:
    from engine.core.kv_events import KVSnapshot
    from engine.server.kv_events.ndjson_stream import encode_snapshot

    line = encode_snapshot(
        KVSnapshot(seq=3, block_size=16, block_hashes=[b"\x01" * 32]), "i", root_hash=b"\x02".hex()
    )
    assert b'"root_hash":"02"' in line


def test_an_unreachable_hf_tokenizer_leaves_the_router_balancing_by_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import huggingface_hub

    def offline(repo_id: str, **kwargs: object) -> str:
        raise ConnectionError("hub unreachable")

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    assert load_tokenizer("hf://acme/tiny-llama") is None


def test_a_missing_local_model_is_still_an_error(tmp_path: Path) -> None:
    from pagedock.errors import ModelLoadError

    with pytest.raises(ModelLoadError):
        load_tokenizer(str(tmp_path / "nothing-here"))


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
TOOL_TURNS = [
    USER,
    {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
    {"role": "tool", "content": '{"temperature_c": 21}', "tool_call_id": "call_1"},
]


def test_a_tools_request_hashes_as_the_engine_renders_it(model_dir: Path) -> None:
    """Both sides given the same --chat-template (a tools-aware one): the tools, the call and the
    tool result are in the prompt, and the router's ids are the engine server's."""
    from pagedock.text.chat_template import SHIPPED_TEMPLATES_DIR, chat_template_source

    option = str(SHIPPED_TEMPLATES_DIR / "chatml_tools.jinja")
    router_tokenizer = load_tokenizer(str(model_dir), chat_template=option)
    engine = client(
        server_app(engine_tokenizer.load_tokenizer(model_dir, chat_template_source(option)))
    )
    body = {"messages": TOOL_TURNS, "tools": TOOLS, "tool_choice": "auto"}
    blocks = PromptHasher(router_tokenizer).chat(ChatCompletionRequest.model_validate(body))
    expected = engine_tokens(engine, {"messages": TOOL_TURNS, "tools": TOOLS})
    assert blocks is not None and blocks.token_ids == expected
    text = engine.post("/detokenize", json={"tokens": expected}).json()["prompt"]
    assert '"name": "get_weather"' in text.split("<tools>\n")[1].split("</tools>")[0]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert '<tool_response>\n{"temperature_c": 21}\n</tool_response>' in text
