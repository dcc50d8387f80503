"""The servers' logging setup: `--log-format text` (a line a person reads) or `json` (one JSON
object a line, what a log pipeline indexes), and the fields a line carries about the request it
was written for.

    {"ts": "2026-12-03T17:40:01.123Z", "level": "INFO", "logger": "pagedock.requests",
     "event": "request_finished", "request_id": "...", "x_request_id": "...", ...}

A line's fields come from two places: the record's own (`extra={"fields": {...}}`: the
per-request summary lines) and the request being served when it was written
(pagedock/request_ids.py: `x_request_id`, and `trace_id`/`span_id` from a W3C `traceparent`).
The text format prints the message only, as before.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from pagedock.errors import ConfigError
from pagedock.request_ids import current_request

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def check_log_format(log_format: str) -> None:
    if log_format not in LOG_FORMATS:
        raise ConfigError(
            f"--log-format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}"
        )


def configure_logging(level: str, log_format: str = "text") -> None:
    """The root logger at `level`, writing `log_format` lines to stderr (replacing any setup)."""
    check_log_format(log_format)
    handler = logging.StreamHandler()
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, milliseconds), level, logger, the message or the
    record's fields, the request's fields, and an exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _utc(record.created),
            "level": record.levelname,
            "logger": record.name,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        else:
            line["message"] = record.getMessage()
        ids = current_request.get()
        for key, value in (ids.log_fields() if ids is not None else {}).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def _utc(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"
