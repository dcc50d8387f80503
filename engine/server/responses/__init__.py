"""OpenAI's Responses API on the engine's server (docs/responses.md), served by the chat path of
engine/server/openai/ and stored in pagedock/responses_store/.

    create.py        POST /v1/responses: one Response, or its streamed events
    turn.py          ResponseTurn: the stored conversation, this input, the chat request; storing
    output.py        a finished generation as output items, status and usage
    event_writer.py  ResponseEventWriter: the numbered events of a streamed response
    stored.py        GET / DELETE /v1/responses/{id}, GET .../input_items
"""
