"""PickerConfig: the endpoint picker port's authentication and limits, a base of RouterConfig
(router/config.py), so each field is a `pagedock route` flag and a `PAGEDOCK_*` variable."""

from __future__ import annotations

from dataclasses import dataclass

from pagedock.errors import ConfigError


@dataclass
class PickerConfig:
    picker_api_key: str | None = None
    """When set, each ext_proc stream needs gRPC metadata `authorization: Bearer KEY`."""
    picker_max_streams: int = 256
    """ext_proc streams open at once; past it, RESOURCE_EXHAUSTED at once. 0 = no limit."""
    picker_stream_idle_timeout_s: float = 30.0
    """Seconds an ext_proc stream may send nothing before it is closed and its pick released."""
    picker_tls_cert_file: str | None = None
    """PEM certificate chain the picker port serves TLS with (with its key); unset = plaintext."""
    picker_tls_key_file: str | None = None
    """PEM private key of --picker-tls-cert-file."""
    picker_tls_client_ca_file: str | None = None
    """PEM CA bundle: with it, a client must present a certificate it signed (mutual TLS)."""

    def _check_picker_limits(self) -> None:
        if self.picker_max_streams < 0:
            raise ConfigError(
                f"picker_max_streams must be 0 (no limit) or more, got {self.picker_max_streams}"
            )
        if self.picker_stream_idle_timeout_s <= 0:
            raise ConfigError(
                "picker_stream_idle_timeout_s must be more than 0, got "
                f"{self.picker_stream_idle_timeout_s}"
            )
        if self.picker_api_key is not None and not self.picker_api_key.strip():
            raise ConfigError("picker_api_key must not be empty (leave it unset for none)")
        if (self.picker_tls_cert_file is None) != (self.picker_tls_key_file is None):
            raise ConfigError("picker_tls_cert_file and picker_tls_key_file go together")
        if self.picker_tls_client_ca_file is not None and self.picker_tls_cert_file is None:
            raise ConfigError("picker_tls_client_ca_file needs picker_tls_cert_file (mutual TLS)")
