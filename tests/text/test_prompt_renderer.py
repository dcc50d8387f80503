"""pagedock/text/prompt_renderer.py: the one path from a request's prompt to token ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer as BackendTokenizer

from pagedock.errors import InvalidRequestError
from pagedock.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    Conversation,
    TokenizeRequest,
)
from pagedock.text.prompt_renderer import (
    ChatInput,
    Prompt,
    completion_prompts,
    encode_text,
    read_conversation,
    render_chat,
)
from pagedock.text.tokenizer import Tokenizer

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {
        "role": "user",
        "content": [{"type": "text", "text": "The quick "}, {"type": "text", "text": "brown fox"}],
    },
    {"role": "assistant", "content": "jumps."},
    {"role": "tool", "content": "42", "tool_call_id": "call_1"},
    {"role": "developer", "content": None},
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_model import TINY_VOCAB, save_tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny-tokenizer")
    save_tiny_tokenizer(path, TINY_VOCAB)
    return path


@pytest.fixture(scope="module")
def tokenizer(tiny_dir: Path) -> Tokenizer:
    return Tokenizer.from_hf_dir(tiny_dir)


def chat_request(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": MESSAGES, **fields})


# ---- chat -------------------------------------------------------------------------------------


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_a_chat_is_the_template_encoded_without_special_tokens(
    tokenizer: Tokenizer, add_generation_prompt: bool
) -> None:
    request = chat_request(add_generation_prompt=add_generation_prompt)
    text = tokenizer.apply_chat_template(request.template_messages(), add_generation_prompt)
    assert isinstance(text, str)
    expected = Prompt(tokenizer.encode(text, add_special_tokens=False), text)
    assert render_chat(tokenizer, request) == expected


def test_content_parts_render_as_their_joined_text(tokenizer: Tokenizer) -> None:
    prompt = render_chat(tokenizer, chat_request())
    assert prompt.text is not None and "user\nThe quick brown fox<|im_end|>" in prompt.text


def test_every_chat_input_renders_the_same_messages_identically(tokenizer: Tokenizer) -> None:
    inputs: list[ChatInput] = [
        chat_request(),
        TokenizeRequest.model_validate({"messages": MESSAGES}),
        Conversation.model_validate({"messages": MESSAGES}),
        read_conversation(MESSAGES),
    ]
    prompts = [render_chat(tokenizer, i) for i in inputs]
    assert all(p == prompts[0] for p in prompts)


def test_read_conversation_keeps_add_generation_prompt(tokenizer: Tokenizer) -> None:
    without = render_chat(tokenizer, read_conversation(MESSAGES, add_generation_prompt=False))
    assert without == render_chat(tokenizer, chat_request(add_generation_prompt=False))


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ([{"role": "wizard", "content": "hi"}], "messages"),
        ([{"content": "hi"}], "messages"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content"),
        (
            [{"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}],
            "messages[0].tool_calls",
        ),
    ],
    ids=["empty", "unknown-role", "no-role", "image-part", "tool-calls"],
)
def test_read_conversation_rejects_what_the_api_rejects(messages: list[Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as error:
        read_conversation(messages)
    assert error.value.param == param


def test_a_chat_without_a_tokenizer_is_a_400_on_messages() -> None:
    with pytest.raises(InvalidRequestError) as error:
        render_chat(None, chat_request())
    assert error.value.param == "messages"


def test_a_model_without_a_chat_template_is_a_400_on_messages(tiny_dir: Path) -> None:
    bare = Tokenizer(BackendTokenizer.from_file(str(tiny_dir / "tokenizer.json")), {})
    with pytest.raises(InvalidRequestError, match="no chat template") as error:
        render_chat(bare, chat_request())
    assert error.value.param == "messages"


def test_text_the_tokenizer_cannot_take_is_a_400(tokenizer: Tokenizer) -> None:
    request = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "\ud800"}]}
    )
    with pytest.raises(InvalidRequestError) as error:
        render_chat(tokenizer, request)
    assert error.value.param == "messages"


# ---- completions ------------------------------------------------------------------------------


def prompts_of(tokenizer: Tokenizer | None, prompt: Any) -> list[Prompt]:
    return completion_prompts(
        tokenizer, CompletionRequest.model_validate({"prompt": prompt}).prompt
    )


def test_a_text_prompt_is_encoded_with_special_tokens(tokenizer: Tokenizer) -> None:
    text = "The quick brown fox"
    assert prompts_of(tokenizer, text) == [Prompt(tokenizer.encode(text), text)]


def test_a_token_id_prompt_is_taken_as_given_with_its_text(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("brown fox", add_special_tokens=False)
    assert prompts_of(tokenizer, ids) == [Prompt(ids, "brown fox")]


def test_a_batch_is_one_prompt_per_entry(tokenizer: Tokenizer) -> None:
    assert [p.text for p in prompts_of(tokenizer, ["a b", "c"])] == ["a b", "c"]
    assert [p.token_ids for p in prompts_of(tokenizer, [[5, 6], [7]])] == [[5, 6], [7]]


def test_token_ids_need_no_tokenizer() -> None:
    assert prompts_of(None, [[5, 6], [7]]) == [Prompt([5, 6]), Prompt([7])]


@pytest.mark.parametrize("prompt", ["text", ["a", "b"]], ids=["text", "text-batch"])
def test_text_without_a_tokenizer_is_a_400_on_prompt(prompt: Any) -> None:
    with pytest.raises(InvalidRequestError) as error:
        prompts_of(None, prompt)
    assert error.value.param == "prompt"


@pytest.mark.parametrize(
    "prompt", [[], "\ud800", ["ok", "\ud800"]], ids=["empty", "surrogate", "surrogate-in-batch"]
)
def test_a_prompt_that_cannot_be_tokenized_is_a_400_on_prompt(
    tokenizer: Tokenizer, prompt: Any
) -> None:
    with pytest.raises(InvalidRequestError) as error:
        prompts_of(tokenizer, prompt)
    assert error.value.param == "prompt"


def test_encode_text_adds_special_tokens_only_when_asked(tokenizer: Tokenizer) -> None:
    text = "fox"
    assert encode_text(tokenizer, text, "prompt") == tokenizer.encode(text)
    assert encode_text(tokenizer, text, "prompt", add_special_tokens=False) == tokenizer.encode(
        text, add_special_tokens=False
    )


# ---- the offline API renders through the same path ---------------------------------------------


def test_llm_chat_generates_from_the_renderers_token_ids(tokenizer: Tokenizer) -> None:
    from engine.runtime.llm import LLM

    class Recording(LLM):
        def __init__(self) -> None:
            self.engine = type("Engine", (), {"tokenizer": tokenizer})()
            self.prompts: list[Any] = []

        def generate(
            self,
            prompts: Any,
            sampling_params: Any = None,
            use_tqdm: bool = True,
            lora_request: Any = None,
        ) -> Any:
            self.prompts = list(prompts)
            return []

    llm = Recording()
    llm.chat(MESSAGES)
    assert llm.prompts == [render_chat(tokenizer, chat_request()).token_ids]
    llm.chat([MESSAGES, MESSAGES[:1]])
    assert llm.prompts[1] == render_chat(tokenizer, read_conversation(MESSAGES[:1])).token_ids
