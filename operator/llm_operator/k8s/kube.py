"""A small async Kubernetes REST client (aiohttp): get, create, merge-patch and delete.

It logs in the way kopf does (service account, else kubeconfig; the official client when it is
installed, for exec-plugin kubeconfigs) and logs in again once on HTTP 401 (rotated tokens).
"""

import base64
import json
import ssl
import tempfile
from collections.abc import Callable
from typing import Any

import aiohttp
import kopf

Obj = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
LoginFn = Callable[[], kopf.ConnectionInfo | None]


class KubeError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message  # the server's own words: a Status `message`, else the body


class KubeClient:
    def __init__(self, login: LoginFn, timeout_seconds: float = 30.0) -> None:
        self._login = login
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None
        self._server = ""
        self.num_writes = 0  # NOTE: counts create/patch/delete calls; tests and benchmarks read it

    async def get(self, path: str) -> Obj | None:
        """The object, or None when it does not exist."""
        return await self._request("GET", path, missing_ok=True)

    async def list(self, path: str, label_selector: str) -> list[Obj]:
        """The objects of a collection that match the label selector."""
        found = await self._request("GET", path, params={"labelSelector": label_selector})
        return (found or {}).get("items") or []

    async def create(self, path: str, body: Obj) -> Obj:
        self.num_writes += 1
        return await self._request("POST", path, json=body) or {}

    async def patch(self, path: str, body: Obj) -> Obj:
        self.num_writes += 1
        headers = {"Content-Type": MERGE_PATCH}
        return await self._request("PATCH", path, json=body, headers=headers) or {}

    async def delete(self, path: str) -> None:
        self.num_writes += 1
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        await self._request("DELETE", path, json=body, missing_ok=True)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(
        self, method: str, path: str, missing_ok: bool = False, **kwargs: Any
    ) -> Obj | None:
        for attempt in range(2):
            session = await self._ensure_session()
            async with session.request(method, self._server + path, **kwargs) as response:
                if response.status == 401 and attempt == 0:
                    await self.close()
                    continue
                if response.status == 404 and missing_ok:
                    return None
                if response.status >= 400:
                    raise KubeError(response.status, _status_message(await response.text()))
                return await response.json(content_type=None)
        raise KubeError(401, "unauthorized after a fresh login")

    async def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            info = self._login()
            if info is None:
                raise KubeError(401, "no Kubernetes credentials (service account or kubeconfig)")
            self._server = info.server.rstrip("/")
            self._session = aiohttp.ClientSession(
                headers=_auth_headers(info),
                connector=aiohttp.TCPConnector(ssl=_ssl_context(info)),
                timeout=self._timeout,
            )
        return self._session


def _status_message(text: str) -> str:
    """A refusal comes as a Status object; its `message` is what the server says went wrong."""
    try:
        status = json.loads(text)
    except ValueError:
        return text
    message = status.get("message") if isinstance(status, dict) else None
    return message if isinstance(message, str) and message else text


def _auth_headers(info: kopf.ConnectionInfo) -> dict[str, str]:
    if info.token:
        return {"Authorization": f"{info.scheme or 'Bearer'} {info.token}"}
    if info.username and info.password:
        basic = base64.b64encode(f"{info.username}:{info.password}".encode()).decode()
        return {"Authorization": f"Basic {basic}"}
    return {}


def _ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    if not info.server.startswith("https"):
        return False
    if info.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        cadata = _decode(info.ca_data).decode() if info.ca_data else None
        context = ssl.create_default_context(cafile=info.ca_path, cadata=cadata)
    certificate = info.certificate_path or _to_file(info.certificate_data)
    key = info.private_key_path or _to_file(info.private_key_data)
    if certificate:
        context.load_cert_chain(certificate, key)
    return context


def _decode(data: str | bytes) -> bytes:
    return base64.b64decode(data)


def _to_file(data: str | bytes | None) -> str | None:
    """ssl loads client certificates from files only; kubeconfigs may embed them (base64)."""
    if not data:
        return None
    with tempfile.NamedTemporaryFile(prefix="pagedock-", suffix=".pem", delete=False) as file:
        file.write(_decode(data))
        return file.name
