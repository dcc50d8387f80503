"""POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's endpoints, bodies and answers):
LoRA adapters loaded and unloaded while the server runs, served only with
--allow-runtime-lora-updating (engine/runtime/lora_adapters.py does the work).

Success is a 200 with vLLM's text; an adapter that cannot be loaded is a 400 naming the cause
(the errors the engine's start gives for a bad adapter), an unknown one to unload a 404.
"""

from __future__ import annotations

from fastapi.responses import PlainTextResponse

from engine.inputs.engine_request import AdapterRef
from engine.server.openai.context import ServerContext
from pagedock.errors import ConfigError, InvalidRequestError, ModelLoadError
from pagedock.http.errors import APIError
from pagedock.protocol import LoadLoRAAdapterRequest, UnloadLoRAAdapterRequest


async def load_lora_adapter(ctx: ServerContext, body: LoadLoRAAdapterRequest) -> PlainTextResponse:
    name = body.lora_name
    try:
        loaded = await ctx.engine.add_lora(AdapterRef(name, body.lora_path))
    except InvalidRequestError:
        raise  # its own param (lora_name, lora_path): a 400 as it is
    except ModelLoadError as e:
        raise APIError(400, str(e), "lora_path") from e
    except ConfigError as e:
        param = "lora_name" if name == ctx.served_model_name else "lora_path"
        raise APIError(400, str(e), param) from e
    if not loaded:
        return PlainTextResponse(f"Success: LoRA adapter '{name}' is already loaded.")
    return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")


async def unload_lora_adapter(
    ctx: ServerContext, body: UnloadLoRAAdapterRequest
) -> PlainTextResponse:
    """The adapter stops being served at once; its requests in flight finish first (an
    UnknownAdapterError, the 404, for a name not served)."""
    await ctx.engine.remove_lora(body.lora_name)
    return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")
