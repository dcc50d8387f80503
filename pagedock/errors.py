"""Typed errors. Each names the problem in its message; the server maps them to HTTP statuses."""

from __future__ import annotations


class PagedockError(Exception):
    """Base class of every error pagedock raises on purpose."""


class InvalidRequestError(PagedockError, ValueError):
    """The request itself is wrong (empty prompt, bad sampling parameter, too long): HTTP 400."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class InvalidRequestFailure(str):
    """Why a request failed inside the engine when its own content caused it (a constraint too
    costly to evaluate, say): carried as the request's error text from the engine thread to the
    server, which answers it as an InvalidRequestError (400, or an error event) naming `param`,
    not as a 500."""

    param: str | None = None

    def __new__(cls, message: str, param: str | None = None) -> InvalidRequestFailure:
        failure = super().__new__(cls, message)
        failure.param = param
        return failure

    def __reduce__(self) -> tuple[object, tuple[str, str | None]]:
        return (InvalidRequestFailure, (str(self), self.param))


class ConfigError(PagedockError, ValueError):
    """A setting is wrong or does not fit the model or machine (a flag, env var or config field).
    Raised before serving starts, so it is never an HTTP answer; the CLIs print it and exit 2."""


class PromptTooLongError(InvalidRequestError):
    """The prompt (plus what it asks to generate) does not fit the model's context."""


class UnknownRequestError(PagedockError, KeyError):
    """An operation named a request id the engine does not know."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown request"


class ModelLoadError(PagedockError, RuntimeError):
    """A model could not be found, read or understood. The message names the file and the
    problem."""


class EngineDeadError(PagedockError, RuntimeError):
    """The engine loop stopped and can serve no more requests."""


class TensorParallelError(EngineDeadError):
    """A tensor-parallel rank died or stopped answering: no step can run any more, so the engine
    is dead (the server's /health answers 503 and `pagedock serve` exits non-zero)."""
