"""ValidationProcess: large request bodies validated in a process of their own.

NOTE: pydantic validates a body in one call into Rust that holds the GIL from start to end, and
its cost grows with the body's element count, not its bytes: a 3 MB prompt of a million token ids
takes 110 ms (json.loads and validating the dict, FastAPI's way, 190 ms), a batch of 20,000 prompts
30 ms. In the engine server that is 110 ms in which the engine thread cannot run a step for anyone
(issue 34: a neighbour's p99 went from 0.18 to 0.9 s while one client sent such bodies); in the
router, 110 ms in which no request is routed. Here a body over LARGE_BODY_BYTES is validated by a
child process instead (pagedock/http/validation_worker.py), and only the verdict comes back: the
parsed request (unpickling a million ids takes a few ms), or its first errors (a body of the wrong
shape, refused having cost this process nothing but the copy).

The child is a plain `python -m` of the worker, started on the first large body (not
multiprocessing's spawn, which imports the parent's main script again); it imports only the
protocol models. One child, one body at a time: large bodies wait for each other, not for small
ones. A child that dies (killed for memory) is replaced, and the body it held is validated here
instead, as it would have been without it; after MAX_CHILD_FAILURES in a row every body is.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

logger = logging.getLogger("pagedock.validation_process")

# Bodies up to this size are validated in the calling process: a few ms at most even when dense
# with numbers; larger ones in the child.
LARGE_BODY_BYTES = 65_536
# The errors sent back: the first few are all any answer quotes.
MAX_ERRORS = 5
MAX_CHILD_FAILURES = 3
INVALID_BODY_STATE = "invalid_body"
"""The request-state attribute where a server's route leaves a large body's InvalidBody, for its
validation-error handler (engine/server/large_body_route.py)."""

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class InvalidBody:
    """A body that does not validate: pydantic's first errors, as `type`, `loc` and `msg` (the
    rest, the input above all, stays in the child)."""

    errors: list[dict[str, Any]]
    model: str | None
    """Its `model` field, if it names one (the router sends it to a replica serving that model,
    whose error is then about the body, not the model)."""


def validate_body(model: type[M], body: bytes) -> M | InvalidBody:
    """model.model_validate_json(body), or its first errors; what the child runs."""
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_context=False, include_input=False)
        return InvalidBody([_plain(error) for error in errors[:MAX_ERRORS]], model_named(body))
    except ValueError as e:  # pydantic's own refusals outside validation
        error = {"type": "value_error", "loc": (), "msg": str(e)}
        return InvalidBody([error], model_named(body))


def _plain(error: Any) -> dict[str, Any]:
    return {"type": error["type"], "loc": tuple(error["loc"]), "msg": error["msg"]}


class _ModelField(BaseModel):
    """A body's `model` alone: the rest is scanned but never built into Python objects (a
    million-id prompt as a list of ints took twice as long)."""

    model_config = ConfigDict(extra="ignore")
    model: object = None


def model_named(body: bytes) -> str | None:
    """The `model` a body names, whether or not the rest of it validates."""
    try:
        model = _ModelField.model_validate_json(body).model
    except ValidationError:
        return None
    return model if isinstance(model, str) else None


def write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(len(payload).to_bytes(8, "little") + payload)
    stream.flush()


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame; None at the end of the stream."""
    header = stream.read(8)
    if len(header) < 8:
        return None
    size = int.from_bytes(header, "little")
    payload = stream.read(size)
    return payload if len(payload) == size else None


class ValidationProcess:
    """Validates bodies over LARGE_BODY_BYTES in a child process, smaller ones here."""

    def __init__(self) -> None:
        self._child: subprocess.Popen[bytes] | None = None
        self._io = ThreadPoolExecutor(1, thread_name_prefix="pagedock-validation")
        """Talks to the child, one body at a time."""
        self.failures = 0
        """Failed exchanges with a child in a row."""

    async def validate(self, model: type[M], body: bytes) -> M | InvalidBody:
        if len(body) <= LARGE_BODY_BYTES or self.failures >= MAX_CHILD_FAILURES:
            return validate_body(model, body)
        outcome = await asyncio.get_running_loop().run_in_executor(
            self._io, self._exchange, model, body
        )
        if outcome is None:
            logger.warning("the body validation process failed; validating this body here")
            return validate_body(model, body)
        return outcome

    def _exchange(self, model: type[BaseModel], body: bytes) -> Any:
        """The child's verdict on body; None if the child failed (it is replaced next time)."""
        try:
            child = self._child = self._child or _start_child()
            assert child.stdin is not None and child.stdout is not None
            write_frame(child.stdin, pickle.dumps((model, body), pickle.HIGHEST_PROTOCOL))
            frame = read_frame(child.stdout)
            if frame is None:
                raise EOFError("the validation process exited")
            outcome = pickle.loads(frame)
        except (OSError, EOFError, pickle.PickleError):
            self.failures += 1
            self._stop_child()
            if self.failures == MAX_CHILD_FAILURES:
                logger.error(
                    "the body validation process failed %d times in a row; large "
                    "bodies are validated in this process from now on",
                    self.failures,
                )
            return None
        self.failures = 0
        return outcome

    def _stop_child(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            self._child = None

    def close(self) -> None:
        self._io.submit(self._stop_child)
        self._io.shutdown(wait=False)


def _start_child() -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "pagedock.http.validation_worker"]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
