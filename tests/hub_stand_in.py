"""A loopback stand-in for the Hugging Face Hub, for tests (no hub is reachable from CI).

It serves one local directory as one model repo at one commit, on the routes that huggingface_hub's
`snapshot_download` calls (point `HF_ENDPOINT` at `endpoint`):

    GET       /api/models/{org}/{name}/revision/{rev}   repo info: the commit `rev` resolves to
    GET       /api/models/{org}/{name}/tree/{rev}       the file listing (recursive, one page)
    HEAD/GET  /{org}/{name}/resolve/{rev}/{path}        a file, with X-Repo-Commit and ETag

Anything else is a 404 in the Hub's shape (`X-Error-Code`). Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit


class HubStandIn:
    def __init__(self, repo_id: str, files: Path, revisions: tuple[str, ...] = ("main",)) -> None:
        self.repo_id = repo_id
        self.files = files
        self.commit = hashlib.sha1(repo_id.encode()).hexdigest()
        self.revisions = {*revisions, self.commit}
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every request, in order."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def file_paths(self) -> list[str]:
        return sorted(str(p.relative_to(self.files)) for p in self.files.rglob("*") if p.is_file())

    def answer(self, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of one request."""
        self.requests.append((method, path))
        repo_api = f"/api/models/{self.repo_id}/"
        if path.startswith(repo_api):
            return self._api(path.removeprefix(repo_api))
        resolve = f"/{self.repo_id}/resolve/"
        if path.startswith(resolve):
            revision, _, file = path.removeprefix(resolve).partition("/")
            return self._file(revision, file)
        return _error(404, "RepoNotFound", "Repository not found")

    def _api(self, rest: str) -> tuple[int, dict[str, str], bytes]:
        route, _, revision = rest.partition("/")
        if revision not in self.revisions:
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if route == "revision":
            siblings = [{"rfilename": path} for path in self.file_paths()]
            info = {"id": self.repo_id, "sha": self.commit, "siblings": siblings, "private": False}
            return _json(info)
        if route == "tree":
            return _json([self._tree_entry(path) for path in self.file_paths()])
        return _error(404, "EntryNotFound", f"no route {route}")

    def _tree_entry(self, path: str) -> dict[str, Any]:
        data = (self.files / path).read_bytes()
        return {"type": "file", "path": path, "size": len(data), "oid": _blob_id(data)}

    def _file(self, revision: str, path: str) -> tuple[int, dict[str, str], bytes]:
        file = self.files / path
        if revision not in self.revisions:
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if not file.is_file():
            return _error(404, "EntryNotFound", f"{path} does not exist")
        data = file.read_bytes()
        headers = {"X-Repo-Commit": self.commit, "ETag": f'"{_blob_id(data)}"'}
        return 200, headers, data


def _handler_for(hub: HubStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._reply(send_body=True)

        def do_HEAD(self) -> None:
            self._reply(send_body=False)

        def _reply(self, send_body: bool) -> None:
            status, headers, body = hub.answer(self.command, unquote(urlsplit(self.path).path))
            self.send_response(status)
            for key, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(key, value)
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: hub.requests has it
            pass

    return Handler


def _json(value: Any) -> tuple[int, dict[str, str], bytes]:
    return 200, {"Content-Type": "application/json"}, json.dumps(value).encode()


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json", "X-Error-Code": code}
    return status, headers, json.dumps({"error": message}).encode()


def _blob_id(data: bytes) -> str:
    """The git blob id, as the Hub reports it for a file that is not in LFS."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
