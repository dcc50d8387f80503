"""HeadlessChromium: Debian's Chromium, headless, driven over the Chrome DevTools Protocol (one
websocket, through aiohttp) for the tests of the router's web view. No driver and nothing
downloaded: the browser is the distribution's package, started with a fresh profile and every
background fetch off, so it talks to nothing but the pages a test opens.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

INSTALL_HINT = (
    "Chromium is not installed; the web view's test needs a real browser: "
    "`apt-get install -y chromium` (Debian's package; CI installs it)"
)
FLAGS = (
    "--headless",
    "--no-sandbox",  # root in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--no-proxy-server",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",  # the port it picks is written to DevToolsActivePort
    "--window-size=1400,1100",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def artifacts_dir() -> Path:
    """Where tests leave what a person looks at afterwards (screenshots):
    $PAGEDOCK_TEST_ARTIFACTS, else a folder in the temporary directory."""
    default = Path(tempfile.gettempdir()) / "pagedock-test-artifacts"
    path = Path(os.environ.get("PAGEDOCK_TEST_ARTIFACTS") or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


class HeadlessChromium:
    def __init__(self, binary: str, profile: Path, log: Path, timeout_s: float = 30.0) -> None:
        self.binary = binary
        self.profile = profile
        self.log = log
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._next_id = 0

    async def __aenter__(self) -> HeadlessChromium:
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [self.binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        port = await self._devtools_port()
        self._session = aiohttp.ClientSession()
        async with self._session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json()
        page = next(t for t in targets if t["type"] == "page")
        self._ws = await self._session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)

    async def _devtools_port(self) -> int:
        """The port from the profile's DevToolsActivePort, once the browser has written it."""
        path = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout_s
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise AssertionError(f"chromium exited: {self.log.read_text()[-3000:]}")
            lines = path.read_text().splitlines() if path.exists() else []
            if lines and lines[0].isdigit():
                return int(lines[0])
            if time.monotonic() > deadline:
                raise AssertionError(f"no DevTools port: {self.log.read_text()[-3000:]}")
            await asyncio.sleep(0.05)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command and its result (events in between are skipped)."""
        assert self._ws is not None, "use `async with`"
        self._next_id += 1
        await self._ws.send_json({"id": self._next_id, "method": method, "params": params})
        while True:
            message = await self._ws.receive_json(timeout=self.timeout_s)
            if message.get("id") != self._next_id:
                continue
            if "error" in message:
                raise AssertionError(f"{method}: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result

    async def open(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able values)."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG at `path`."""
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
