"""One engine's LoRA adapters over HTTP, vLLM's contract: GET /v1/models lists each served adapter
as `{"id": name, "parent": <base model>, "root": <path>}`; POST /v1/load_lora_adapter and
/v1/unload_lora_adapter change them at run time (the engine runs with
--allow-runtime-lora-updating). The API key, when the deployment has one, goes as a Bearer token."""

import json

import aiohttp

OPENAI_ERROR_KEY = "error"


class EngineAdapterError(Exception):
    """The engine refused or failed a request; `status` 0 when it could not be reached."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message

    @property
    def refused(self) -> bool:
        """The engine refused this adapter (4xx): asking again gets the same answer."""
        return 400 <= self.status < 500


class EngineAdapters:
    """The adapter endpoints of the engine at `base_url` (http://<pod IP>:8000)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, api_key: str | None) -> None:
        self._session = session
        self._base_url = base_url
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def served(self) -> dict[str, str]:
        """Adapter name -> the path it was loaded from (`root`), as GET /v1/models lists them."""
        models = await self._request("GET", "/v1/models")
        return {
            str(entry["id"]): str(entry.get("root") or "")
            for entry in models.get("data", [])
            if isinstance(entry, dict) and entry.get("parent")
        }

    async def load(self, name: str, path: str) -> None:
        await self._request("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    async def unload(self, name: str) -> None:
        """Unload `name`; one the engine does not serve (404) is already gone."""
        try:
            await self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name})
        except EngineAdapterError as error:
            if error.status != 404:
                raise

    async def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        url = self._base_url + path
        try:
            async with self._session.request(
                method, url, json=body, headers=self._headers
            ) as response:
                text = await response.text()
                if response.status >= 400:
                    raise EngineAdapterError(response.status, _error_message(text))
                return _json_object(text)
        except (aiohttp.ClientError, TimeoutError) as error:
            cause = str(error) or type(error).__name__
            raise EngineAdapterError(0, f"{url} unreachable: {cause}") from error


def _error_message(text: str) -> str:
    """OpenAI's error shape `{"error": {"message": ...}}` -> the message; else the body."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    error = body.get(OPENAI_ERROR_KEY) if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return str(body["detail"])
    return text.strip()[:500]


def _json_object(text: str) -> dict:
    try:
        body = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
