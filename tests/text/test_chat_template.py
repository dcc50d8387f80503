"""The model's chat template renders as transformers renders it; bad messages are 400s."""

from __future__ import annotations

from typing import Any

import pytest

from pagedock.errors import InvalidRequestError, ModelLoadError
from pagedock.text.chat_template import ChatTemplate, render_chat_template
from pagedock.text.tokenizer import Tokenizer

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
CONVERSATIONS = {
    "one-question": QUESTION,
    "with-system": [{"role": "system", "content": "Be brief."}, *QUESTION],
    "multi-turn": [
        *QUESTION,
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And Spain? 🇪🇸 <b>&</b>\n  indented"},
    ],
}


@pytest.mark.parametrize("messages", CONVERSATIONS.values(), ids=CONVERSATIONS.keys())
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_renders_like_transformers(
    smollm2_tokenizer: Tokenizer,
    smollm2_hf_tokenizer: Any,
    messages: list[dict[str, str]],
    add_generation_prompt: bool,
) -> None:
    text = smollm2_tokenizer.apply_chat_template(messages, add_generation_prompt)
    ids = smollm2_tokenizer.apply_chat_template(messages, add_generation_prompt, tokenize=True)
    expected = smollm2_hf_tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=False
    )
    expected_ids = smollm2_hf_tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=True
    )["input_ids"]
    assert text == expected
    assert ids == expected_ids


def test_generation_prompt_opens_the_assistant_turn(smollm2_tokenizer: Tokenizer) -> None:
    text = smollm2_tokenizer.apply_chat_template(QUESTION)
    assert isinstance(text, str)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("What is the capital of France?<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"content": "hi"}], "messages[0].role"),
        ([{"role": "", "content": "hi"}], "messages[0].role"),
        ([{"role": "user"}], "messages[0].content"),
        ([*QUESTION, {"role": "user", "content": 42}], "messages[1].content"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            "messages[0].content[0]",
        ),
        (["hello"], "messages[0]"),
        ([], "messages"),
        ("hello", "messages"),
    ],
)
def test_bad_messages_are_invalid_requests_naming_the_field(
    smollm2_tokenizer: Tokenizer, messages: Any, param: str
) -> None:
    with pytest.raises(InvalidRequestError) as e:
        smollm2_tokenizer.apply_chat_template(messages)
    assert e.value.param == param
    assert param.split(".")[-1].split("[")[0] in str(e.value)


def test_text_content_parts_are_joined(smollm2_tokenizer: Tokenizer) -> None:
    parts = [
        {"type": "text", "text": "What is the capital"},
        {"type": "text", "text": "of France?"},
    ]
    as_parts = smollm2_tokenizer.apply_chat_template([{"role": "user", "content": parts}])
    as_text = smollm2_tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital\nof France?"}]
    )
    assert as_parts == as_text


def test_model_without_template_refuses_chat_clearly() -> None:
    with pytest.raises(InvalidRequestError, match="tiny has no chat template"):
        render_chat_template(None, QUESTION, model_name="tiny")


def test_template_exception_becomes_an_invalid_request() -> None:
    template = ChatTemplate(
        "{% if messages[0]['role'] != 'system' %}{{ raise_exception('system first') }}{% endif %}"
    )
    with pytest.raises(InvalidRequestError, match="system first"):
        template.render(QUESTION)


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages.__class__.__mro__ }}",
        "{% set _ = messages.append(1) %}",
        "{% set ns = namespace(_secret=1) %}",
        "{{ ''.__class__.__base__.__subclasses__() }}",
    ],
)
def test_sandbox_blocks_python_internals_and_mutation(source: str) -> None:
    with pytest.raises(InvalidRequestError, match=r"unsafe|underscore"):
        ChatTemplate(source).render(QUESTION)


def test_helpers_match_transformers_environment() -> None:
    source = (
        "{{ messages | tojson }}|{{ bos_token }}|{{ strftime_now('%Y') | length }}|"
        "{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}|"
        "{% generation %}G{% endgeneration %}|{{ dict(a=1)['a'] }}"
    )
    rendered = ChatTemplate(source, {"bos_token": "<s>"}).render(
        [{"role": "user", "content": "<&>"}]
    )
    assert rendered == '[{"role": "user", "content": "<&>"}]|<s>|4|1|G|1'


def test_trim_and_lstrip_blocks_are_on() -> None:
    source = "{% for m in messages %}\n    {{ m['content'] }}\n{% endfor %}"
    assert ChatTemplate(source).render(QUESTION * 2) == "    What is the capital of France?\n" * 2


def test_invalid_template_syntax_is_a_model_load_error() -> None:
    with pytest.raises(ModelLoadError, match="not valid Jinja"):
        ChatTemplate("{% for m in messages %}")
