"""Serving under a URL path prefix (an Ingress path such as /llm) without an Ingress rewrite.

A request for /llm/v1/chat/completions is handled, and forwarded to a replica, as
/v1/chat/completions; requests without the prefix (probes, in-cluster clients of the Service) are
served as before. Any Ingress controller can then forward the path unchanged.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class RootPathMiddleware:
    def __init__(self, app: ASGIApp, root_path: str) -> None:
        self.app = app
        self.root_path = root_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and has_prefix(scope["path"], self.root_path):
            # NOTE: the proxy forwards scope["path"], so the prefix goes from it (and raw_path).
            path = scope["path"][len(self.root_path) :] or "/"
            scope = {**scope, "path": path, "raw_path": path.encode()}
        await self.app(scope, receive, send)


def has_prefix(path: str, root_path: str) -> bool:
    """/llm and /llm/... have the prefix /llm; /llmx does not."""
    return path == root_path or path.startswith(root_path + "/")
