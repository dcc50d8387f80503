"""The items of OpenAI's Responses API: what `input` holds, what `output` holds, and what a stored
conversation is made of.

    message                role user | system | developer | assistant; content a string or
                           `input_text` / `output_text` parts
    function_call          a call the model made: call_id, name, arguments (JSON text)
    function_call_output   the caller's result of that call: call_id, output

`read_input_items()` reads a request's `input` into these (ids given to items without one);
anything else (images, files, reasoning items, hosted tools' items) is a 400 naming where it is.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from pagedock.errors import InvalidRequestError
from pagedock.protocol.openai import OpenAIModel

ItemStatus = Literal["in_progress", "completed", "incomplete"]
MAX_ITEM_ID_CHARS = 128
ItemId = Annotated[str, Field(min_length=1, max_length=MAX_ITEM_ID_CHARS)]


def item_id(prefix: str) -> str:
    """An id as OpenAI spells them (`msg_…`, `fc_…`, `call_…`, `resp_…`)."""
    return f"{prefix}_{uuid.uuid4().hex}"


class InputTextPart(OpenAIModel):
    type: Literal["input_text"] = "input_text"
    text: str


class OutputTextPart(OpenAIModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[dict[str, Any]] = Field(default_factory=list)


ContentPart = Annotated[InputTextPart | OutputTextPart, Field(discriminator="type")]


class MessageItem(OpenAIModel):
    """A message of the conversation; an output message is the assistant's, with `output_text`
    parts."""

    id: ItemId
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    status: ItemStatus = "completed"
    content: list[ContentPart]

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content)


class FunctionCallItem(OpenAIModel):
    id: ItemId
    type: Literal["function_call"] = "function_call"
    call_id: ItemId
    name: str
    arguments: str
    """The arguments object as JSON text."""
    status: ItemStatus = "completed"


class FunctionCallOutputItem(OpenAIModel):
    id: ItemId
    type: Literal["function_call_output"] = "function_call_output"
    call_id: ItemId
    output: str
    status: ItemStatus = "completed"


ConversationItem = Annotated[
    MessageItem | FunctionCallItem | FunctionCallOutputItem, Field(discriminator="type")
]
OutputItem = Annotated[MessageItem | FunctionCallItem, Field(discriminator="type")]


class InputItemList(OpenAIModel):
    """GET /v1/responses/{id}/input_items."""

    object: Literal["list"] = "list"
    data: list[ConversationItem]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


# ---- reading a request's `input` ------------------------------------------------------------


class _InputMessage(OpenAIModel):
    """A message as a client sends it (OpenAI's EasyInputMessage or input message)."""

    type: Literal["message"] = "message"
    id: ItemId | None = None
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[dict[str, Any]]


class _InputFunctionCall(OpenAIModel):
    type: Literal["function_call"]
    id: ItemId | None = None
    call_id: ItemId
    name: str
    arguments: str


class _InputFunctionCallOutput(OpenAIModel):
    type: Literal["function_call_output"]
    id: ItemId | None = None
    call_id: ItemId
    output: str | list[dict[str, Any]]


_TEXT_PART_TYPES = ("input_text", "output_text")


def read_input_items(raw: str | list[Any]) -> list[ConversationItem]:
    """A request's `input` as items with ids: a string is one user message. 400s name the item."""
    if isinstance(raw, str):
        return [_message("user", [InputTextPart(text=raw)])]
    if not raw:
        raise InvalidRequestError("input is empty: send a string or at least one item", "input")
    return [_read_item(item, f"input[{i}]") for i, item in enumerate(raw)]


def _read_item(raw: Any, where: str) -> ConversationItem:
    if not isinstance(raw, dict):
        raise InvalidRequestError(f"{where} must be an object", where)
    kind = raw.get("type", "message")
    if kind == "message":
        message = _validated(_InputMessage, raw, where)
        return _message(message.role, _parts(message.role, message.content, where), message.id)
    if kind == "function_call":
        call = _validated(_InputFunctionCall, raw, where)
        return FunctionCallItem(
            id=call.id or item_id("fc"),
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
        )
    if kind == "function_call_output":
        result = _validated(_InputFunctionCallOutput, raw, where)
        output = result.output
        if not isinstance(output, str):
            output = "".join(_text_parts(output, f"{where}.output"))
        return FunctionCallOutputItem(
            id=result.id or item_id("fco"), call_id=result.call_id, output=output
        )
    raise InvalidRequestError(
        f"{where}: items of type {kind!r} are not supported by this server (message, "
        "function_call and function_call_output are)",
        f"{where}.type",
    )


def _message(role: str, parts: list[ContentPart], given_id: str | None = None) -> MessageItem:
    return MessageItem.model_validate(
        {"id": given_id or item_id("msg"), "role": role, "content": parts}
    )


def _parts(role: str, content: str | list[dict[str, Any]], where: str) -> list[ContentPart]:
    """The content as parts: the assistant's are `output_text`, everyone else's `input_text`."""
    texts = [content] if isinstance(content, str) else _text_parts(content, f"{where}.content")
    if role == "assistant":
        return [OutputTextPart(text=t) for t in texts]
    return [InputTextPart(text=t) for t in texts]


def _text_parts(parts: list[dict[str, Any]], where: str) -> list[str]:
    """The texts of `input_text` / `output_text` parts; any other part is a 400."""
    read = []
    for i, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _TEXT_PART_TYPES or not isinstance(part.get("text"), str):
            raise InvalidRequestError(
                f"{where}[{i}]: only input_text and output_text parts are supported by this "
                f"server, got {kind!r}",
                f"{where}[{i}]",
            )
        read.append(part["text"])
    return read


def _validated(model: type[Any], raw: dict[str, Any], where: str) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        # The field the client sent (a union's member names, deeper in `loc`, are pydantic's).
        at = f"{where}.{first['loc'][0]}" if first["loc"] else where
        raise InvalidRequestError(f"{at}: {first['msg']}", at) from None
