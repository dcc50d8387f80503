"""When tracing is on, and where its spans go.

On when `--otlp-traces-endpoint` (vLLM's flag) names an OTLP/HTTP endpoint, or when the
standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` variable does
(the latter with `/v1/traces` appended, as the OTLP exporter specification says). Off when
`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. The other `OTEL_*` variables (service
name, resource attributes, sampler, batch delays, headers, timeout) are read by the SDK itself.
Off, nothing of OpenTelemetry is imported and a request costs one `is None` check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pagedock.errors import ConfigError


def traces_endpoint(flag: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The OTLP/HTTP traces endpoint to export to, or None when tracing is off."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return None
    endpoint = flag or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not endpoint and env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        endpoint = env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
    if not endpoint:
        return None
    if not endpoint.startswith(("http://", "https://")):
        raise ConfigError(
            f"the OTLP traces endpoint must be an http:// or https:// URL (OTLP over HTTP), "
            f"got {endpoint!r}"
        )
    return endpoint
