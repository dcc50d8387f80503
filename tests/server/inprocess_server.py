"""InProcessServer: the app on uvicorn in a thread of the test process, with the engine at hand
(for the fuzzer, and for tests that break the engine on purpose)."""

from __future__ import annotations

import threading
import time

import uvicorn

from engine.config import EngineConfig
from engine.runtime.llm_engine import LLMEngine
from engine.server.app import build_app
from engine.server.openai.context import ServerContext, ServerOptions
from engine.server.serve import build_context
from tests.server.server_process import free_port


class InProcessServer:
    def __init__(self, config: EngineConfig, options: ServerOptions | None = None) -> None:
        self.engine = LLMEngine(config)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.ctx: ServerContext = build_context(self.engine, options or ServerOptions(port=port))
        uv_config = uvicorn.Config(
            build_app(self.ctx), host="127.0.0.1", port=port, log_level="warning"
        )
        self.server = uvicorn.Server(uv_config)
        # uvicorn installs no signal handlers off the main thread.
        self.thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)

    def start(self, timeout_s: float = 30.0) -> InProcessServer:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise TimeoutError("the in-process server did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
